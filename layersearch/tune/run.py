"""A whole tune run: check, pool, search, re-measure on held-out prompts, choose.

:func:`prepare` does every check that needs no model (prompt file and its splits, the study's
storage), :func:`tune` the rest on a loaded model. The budget covers the mask pool and the
study; the quick latency profile and the held-out re-measurement come on top.

The budget is kept by not starting what it cannot hold, never by stopping a measurement
halfway: the mask pool scores masks only while the budget lasts; then plain ``generate`` is
timed once on the longest train prompt, which prices plain generate's run over the train
prompts before any trial, and a candidate's at :data:`CANDIDATE_RUNS` of those (its first run
builds its draft, and one that does not pay is slower than plain). The first batch takes only
the enqueued trials whose runs fit beside its plain run at those prices (none: no batch), and
each later trial starts only while the time left holds one as long as the longest so far
(:func:`layersearch.tune.study.run_trials`). So the search ends within its budget, but for the
one measurement that started inside it and ran longer than its price.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DecoderSpec, ModelRef, ModelSpec
from layersearch.study.storage import StorageLocation
from layersearch.tune.pool import Candidate
from layersearch.tune.select import Selection
from layersearch.tune.settings import TuneSettings
from layersearch.tune.study import TrialRecord

PRESEARCH_SHARE = 0.1  # of the budget, for the mask pool's matchness searches
PROFILE_MAX_VERIFY = 16
PROFILE_CONTEXTS = (64, 512)
#: Enqueued trials (the starting points, the profile's best first) measured together, interleaved
#: with one plain generate, before the search samples one trial at a time.
FIRST_BATCH = 3
PLAIN_SKIPPED = "plain decoding is the reference every trial measures: not searched"
#: A candidate's run over the train prompts, priced in plain generate's runs before any is measured.
CANDIDATE_RUNS = 2


@dataclass(frozen=True)
class Prepared:
    """What :func:`prepare` checked: the settings, the prompt domain, the storage, the draft model."""

    settings: TuneSettings
    domain: str
    location: StorageLocation
    draft_model: ModelRef | None


@dataclass(frozen=True)
class TuneResult:
    """A finished run: the chosen spec, the held-out table and the search that led there."""

    spec: DecoderSpec
    selection: Selection
    records: tuple[TrialRecord, ...]
    pool: tuple[Candidate, ...]
    new_trials: int
    search_seconds: float
    prompts: str
    model: str
    draft_model: str | None
    study: str
    storage: str
    train_prompts: int
    test_prompts: int
    max_new_tokens: int
    repeats: int
    kernels: str = "stock"  # the CPU kernels every measurement ran with
    quants: tuple[str, ...] = ()  # the draft model's quantizations searched beside its own weights
    budget: float | None = None  # the search's seconds (the mask pool and the trials)
    test_ids: tuple[Any, ...] = ()  # the held-out prompts' token ids ``[1, n]`` each
    test_texts: tuple[str, ...] = ()  # the held-out prompts, as the finalists decoded them
    scored_by: str = "measured"  # how trials were scored: "measured", or "predicted on <device>" (eager runs, profile costs)
    compile_seconds: float = 0.0  # compiling the captured profile's and the finalists' forwards (outside every score)
    compiled_forwards: int = 0  # forwards compiled for the finalists' held-out run
    predicted_on: str = ""  # the device the latency profile's predictions (pool, scores) are for


@dataclass(frozen=True)
class Progress:
    """One finished trial: trials finished in this run, the study's best, this trial's value, seconds left."""

    done: int
    best: float | None
    last: float | None
    seconds_left: float
    number: int | None = None  # the trial's number in the study (Optuna's, from 0, as the report and spec name it)
    kind: str | None = None  # its drafter kind


#: Train and test prompts when not given: fewer when the file's split holds fewer.
DEFAULT_TRAIN_PROMPTS = DEFAULT_TEST_PROMPTS = 4


def prompt_counts(prompts: str, train: int | None, test: int | None) -> tuple[int, int, str | None]:
    """The train and test prompt counts for the file ``prompts``: those given, else the defaults
    capped to what its splits hold (a first file of a dozen rows is normal), with a line saying
    so (None when nothing was adapted). Only a file with no row in its train or test split is
    refused, naming the minimum."""
    from layersearch.data.splits import FRACTIONS
    from layersearch.data.user import domain_for, split_sizes

    domain_for(prompts)  # an empty ``prompts`` named as such
    sizes = split_sizes(prompts)
    total = sum(sizes.values())
    if (train is None and not sizes["train"]) or (test is None and not sizes["test"]):
        raise LayersearchError(
            f"{prompts}: too small to split: its {total} distinct row(s) put {sizes['train']} in the train split and "
            f"{sizes['test']} in the test split, and tune needs at least 1 in each; give at least about 10 rows "
            f"(rows are split {', '.join(f'{k} {v:.0%}' for k, v in FRACTIONS.items())} by a hash of their content)")
    chosen_train = min(DEFAULT_TRAIN_PROMPTS, sizes["train"]) if train is None else train
    chosen_test = min(DEFAULT_TEST_PROMPTS, sizes["test"]) if test is None else test
    adapted = (train is None and chosen_train < DEFAULT_TRAIN_PROMPTS) or (test is None and chosen_test < DEFAULT_TEST_PROMPTS)
    note = (f"{prompts}: {total} distinct rows ({sizes['train']} train, {sizes['validation']} validation, {sizes['test']} test): "
            f"using {chosen_train} train and {chosen_test} test prompts (more rows give steadier choices)") if adapted else None
    return chosen_train, chosen_test, note


def prepare(settings: TuneSettings, draft_model: ModelRef | None = None) -> Prepared:
    """Every check that needs no model: the prompt file has enough train and test rows, the
    storage is usable and any study of that name was made for these prompts."""
    from layersearch.data.user import choose_rows, domain_for
    from layersearch.tune.study import locate

    domain = domain_for(settings.prompts)
    choose_rows(settings.prompts, settings.train_prompts, settings.seed, "train")
    choose_rows(settings.prompts, settings.test_prompts, settings.seed, "test")
    location = locate(settings, study_identity(settings, domain, draft_model))
    return Prepared(settings, domain, location, draft_model)


def study_identity(settings: TuneSettings, domain: str, draft_model: ModelRef | None,
                   fingerprint: str | None = None) -> dict[str, Any]:
    """What a tune study is made for (its prompt domain, draft model, sizes, seed and, once loaded,
    the model's ``fingerprint``): a study of that name made otherwise is refused."""
    identity = {"prompts": domain, "draft_model": None if draft_model is None else draft_model.ref,
                "max_new_tokens": settings.max_new_tokens, "train_prompts": settings.train_prompts, "seed": settings.seed}
    if fingerprint is not None:
        identity["model"] = fingerprint
    return identity


def tune(
    loaded: Any, prepared: Prepared, model: ModelSpec, *, drafts: dict[str | None, Any] | None = None,
    kernels: str = "stock", say: Callable[[str], None] = lambda m: None, on_trial: Callable[[Progress], None] = lambda p: None,
    compile: str | None = None, profile: Any = None,
) -> TuneResult:
    """Search, re-measure and choose (``loaded``: the model; ``drafts``: the draft model loaded per
    quantization, None for its own weights; ``kernels``: auto, stock or numba, every measurement's
    CPU kernels, auto the profile's choice; ``compile``: every candidate spec's ``compile``, None = auto;
    ``profile``: a latency profile, possibly measured on another device, whose costs score the trials).

    Compiling what it ships only: where the specs run captured (``compile`` on, CUDA's auto), or a
    ``profile`` was given, each trial decodes eagerly, for its acceptance and its greedy output, and
    is scored by the speedup the profile predicts for that run's own steps (on the profile's device);
    without a ``profile`` a captured one is measured once at the start. Only the finalists are
    compiled, and timed captured on the held-out prompts; the compile seconds are reported apart."""
    from dataclasses import replace

    from layersearch.decoder.spec import compile_wanted
    from layersearch.kernels.select import choose_kernels
    import optuna

    from layersearch.data import load_prompts
    from layersearch.tune import select
    from layersearch.tune.objective import measure, measure_together
    from layersearch.tune.space import PLAIN, Space, starting_points, suggest_spec
    from layersearch.tune.study import SPEC_ATTR, open_study, run_batch, run_trials, store_pool, stored_pool, study_choices, trial_records

    settings = prepared.settings
    drafts = dict(drafts or {})
    if bool(drafts) != (prepared.draft_model is not None) or (drafts and None not in drafts):
        raise LayersearchError("the draft model must be loaded when the study drafts with one (and only then)")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    train_texts = [p.text for p in load_prompts(prepared.domain, settings.train_prompts, seed=settings.seed, split="train",
                                                tokenizer=loaded.tokenizer)]
    train = _ids(loaded, train_texts)
    test_texts = [p.text for p in load_prompts(prepared.domain, settings.test_prompts, seed=settings.seed, split="test",
                                               tokenizer=loaded.tokenizer)]
    test = _ids(loaded, test_texts)
    from layersearch.models.context import check_all_fit

    check_all_fit(loaded, ((f"{settings.prompts}: {split} prompt {i} ({text[:30]!r}...)", ids.shape[1])
                           for split, texts, ids_list in (("train", train_texts, train), ("test", test_texts, test))
                           for i, (text, ids) in enumerate(zip(texts, ids_list), 1)), settings.max_new_tokens)
    identity = study_identity(settings, prepared.domain, prepared.draft_model, loaded.info.fingerprint)
    study, fresh = open_study(settings, prepared.location, identity, seed=settings.seed)
    choices = study_choices(study, fresh, settings.for_vllm)
    pool = stored_pool(study)
    compile = compile or "auto"
    compiled = compile_wanted(compile, loaded.model.device.type)
    from layersearch.runtime.backend import captured_forwards

    compile_before = _compile_seconds(loaded)
    if profile is None and compiled:  # the costs of what ships: captured, measured once
        profile = _profile(loaded, say, "stock", captured_forwards(loaded.model).backend)
    elif profile is None and (pool is None or kernels == "auto"):
        profile = _profile(loaded, say, kernels)
    predicting = profile is not None and (compiled or given_profile(profile, loaded))
    scored_by = f"predicted on {profile.predicts_for}" if predicting else "measured"
    profile_compile_seconds = _compile_seconds(loaded) - compile_before
    kernels = choose_kernels(kernels, profile, loaded.model.dtype)  # compiled forwards run the numba kernels as custom ops
    say(f"kernels: {kernels}; compile: {'on (finalists only; trials run eager)' if compiled else 'off'}; "
        f"trials scored: {scored_by}")
    start = time.monotonic()  # the budget: the pre-search and the study (not loading, profiling or the held-out run)
    deadline = start + settings.budget
    if pool is None:
        pool = _pool(loaded, train_texts, train, profile, settings, say, deadline)
        store_pool(study, pool)
    model = ModelSpec(model.ref, loaded.info, model.device, model.dtype)
    quants = ("none", *(q for q in drafts if q is not None))
    space = Space(model, pool, prepared.draft_model, loaded.model.get_output_embeddings().weight.shape[0], settings.max_new_tokens,
                  quants, cheap_draft(profile), choices["drafters"], choices["lookaheads"], settings.for_vllm,
                  (getattr(loaded.model.config, "architectures", None) or [None])[0])
    if fresh:
        for params in starting_points(space):
            study.enqueue_trial(params, skip_if_exists=True)

    def spec_of(trial: Any) -> DecoderSpec:
        spec = replace(suggest_spec(trial, space), compile=compile)  # what ships
        trial.set_user_attr(SPEC_ATTR, spec.to_dict())
        if spec.plain:  # the reference every trial measures beside its candidate: no budget for it
            trial.set_user_attr("error", PLAIN_SKIPPED)
            raise optuna.TrialPruned(PLAIN_SKIPPED)
        return spec

    def run_spec(spec: DecoderSpec) -> DecoderSpec:
        """What a trial runs: eager where the profile's costs score it (only finalists compile)."""
        return replace(spec, compile="off") if predicting else spec

    def score(trial: Any, figures: Any) -> float:
        if isinstance(figures, str):  # a configuration this model cannot run: recorded, not fatal
            trial.set_user_attr("error", figures)
            raise optuna.TrialPruned(figures)
        for key, value in figures.to_dict().items():
            trial.set_user_attr(key, value)
        trial.set_user_attr("scored_by", scored_by)
        if not figures.identical:
            return 0.0  # never happens for greedy: a bug, never a winner
        if predicting:  # eager acceptance, the profile's costs
            return 1.0 if figures.predicted is None else float(figures.predicted)
        return figures.speedup

    def objective(trial: Any) -> float:
        spec = spec_of(trial)
        try:
            figures: Any = measure(loaded, run_spec(spec), train, settings.max_new_tokens, drafts=drafts, kernels=kernels,
                                   profile=profile if predicting else None)
        except LayersearchError as exc:
            figures = str(exc)
        return score(trial, figures)

    def measure_all(specs: list[DecoderSpec]) -> list[Any]:
        return measure_together(loaded, [run_spec(spec) for spec in specs], train, settings.max_new_tokens, drafts=drafts,
                                kernels=kernels, profile=profile if predicting else None)

    done = 0

    def after_trial(study: Any, trial: Any) -> None:
        nonlocal done
        if trial.params.get("drafter") == PLAIN:
            return  # skipped unmeasured: not a trial of the search's progress
        done += 1
        best = _best(study)
        on_trial(Progress(done, best, trial.value, max(0.0, deadline - time.monotonic()), trial.number,
                          str(trial.params.get("drafter", "?"))))

    per_run = run_seconds(loaded, train, settings.max_new_tokens, kernels)
    left = max(0.0, deadline - time.monotonic())
    count = batch_size(left, per_run)
    say(f"trials: {left:.0f} s of the {settings.budget:g} s budget left after the mask pool ({len(pool)} masks in it) "
        f"and timing plain generate ({per_run:.1f} s on the train prompts); "
        + (f"the first {count} enqueued measured together" if count else "no batch of the enqueued trials fits"))
    batch_start = time.monotonic()
    batch = run_batch(study, count, spec_of, measure_all, score, after_trial) if count else 0
    # A later trial decodes plain generate and one candidate: priced as the batch measured them.
    if batch:
        per_run = (time.monotonic() - batch_start) / (1 + CANDIDATE_RUNS * batch)
    per_trial = (1 + CANDIDATE_RUNS) * per_run
    run_trials(study, objective, deadline, after_trial, expected=per_trial)
    new_trials = done
    if not new_trials:
        say(f"the budget held no trial: one decodes plain generate and a candidate on the train prompts, about "
            f"{per_trial:.1f} s here, and {max(0.0, deadline - time.monotonic()):.0f} s were left; a larger budget searches")
    search_seconds = time.monotonic() - start
    chosen = select.finalists(study, settings.finalists)
    compile_start, entries_start = _compile_seconds(loaded), _compiled_entries(loaded)
    rows = select.remeasure(loaded, chosen, test, settings.max_new_tokens, settings.repeats, drafts=drafts,
                            draft_ref=None if prepared.draft_model is None else prepared.draft_model.ref, kernels=kernels,
                            say=say)
    finalist_compile = _compile_seconds(loaded) - compile_start
    compiled_forwards = _compiled_entries(loaded) - entries_start if compiled else 0
    if compiled:
        say(f"compiled {compiled_forwards} forwards for {len(chosen)} finalists in {finalist_compile:.1f} s "
            f"(and the captured profile's in {profile_compile_seconds:.1f} s), outside every score")
    plain = DecoderSpec(model=model, plain=True, max_new_tokens=settings.max_new_tokens, compile=compile)
    selection = select.choose(rows, plain)
    return TuneResult(selection.spec, selection, tuple(trial_records(study)), pool, new_trials, search_seconds,
                      settings.prompts, model.ref.ref, None if prepared.draft_model is None else prepared.draft_model.ref,
                      settings.name, prepared.location.url, settings.train_prompts, settings.test_prompts,
                      settings.max_new_tokens, settings.repeats, kernels, quants[1:], settings.budget, tuple(test),
                      tuple(test_texts), scored_by, profile_compile_seconds + finalist_compile, compiled_forwards,
                      profile.predicts_for if profile is not None else "")


def run_seconds(loaded: Any, train: list[Any], new_tokens: int, kernels: str) -> float:
    """A configuration's price before any trial: the seconds plain ``generate`` takes on the
    longest of the ``train`` prompts, times their count (a drafter that pays runs faster)."""
    from layersearch.tune.objective import plain_config

    longest = max(train, key=lambda ids: ids.shape[1])
    begin = time.monotonic()
    plain_config(loaded, kernels).generate(longest, new_tokens)
    return (time.monotonic() - begin) * len(train)


def batch_size(left: float, per_run: float) -> int:
    """How many enqueued trials the first batch takes: at most :data:`FIRST_BATCH`, and only as
    many as ``left`` seconds hold beside the batch's plain run (``per_run`` seconds; a candidate's
    :data:`CANDIDATE_RUNS` times that)."""
    if per_run <= 0:
        return FIRST_BATCH
    return max(0, min(FIRST_BATCH, int((left / per_run - 1) // CANDIDATE_RUNS)))


def given_profile(profile: Any, loaded: Any) -> bool:
    """Whether ``profile`` was measured elsewhere than where ``loaded`` runs (another device kind,
    or captured while this run is eager): then its costs, not this machine's timings, score trials."""
    device = profile.predicts_for.split(":")[0].strip()
    return device != loaded.model.device.type or profile.compile_mode != "eager"


def _compile_seconds(loaded: Any) -> float:
    """Seconds the model's shared captured forwards have spent compiling so far."""
    from layersearch.runtime.backend import captured_forwards

    return captured_forwards(loaded.model).stats().compile_seconds


def _compiled_entries(loaded: Any) -> int:
    """Forwards the model's shared captured table has compiled so far (its misses)."""
    from layersearch.runtime.backend import captured_forwards

    return captured_forwards(loaded.model).stats().misses


def cheap_draft(profile: Any, tolerance: float = 1.1) -> int:
    """The longest draft (in MAX_DRAFT_RANGE) whose verification forward (draft + 1 tokens) costs at
    most ``tolerance`` one-token forwards on the profile's curve (4 without a profile). With
    stock CPU kernels the curve rises in steps (every 3 tokens with MKL, every 4 with numba's
    token block): a draft that crosses a step pays a whole extra pass over the weights."""
    from layersearch.tune.space import MAX_DRAFT_RANGE

    if profile is None:
        return 4
    fitting = [d for d in range(MAX_DRAFT_RANGE[0], MAX_DRAFT_RANGE[1] + 1) if profile.verify_ratio(d + 1) <= tolerance]
    return max(fitting, default=MAX_DRAFT_RANGE[0])


def _profile(loaded: Any, say: Callable[[str], None], kernels: str = "stock", backend: str | None = None) -> Any:
    """A quick latency profile of this machine (the pool's pruning and ranking; with ``auto``
    kernels, which kernel set measured faster); captured with ``backend`` (8 verified lengths)."""
    from layersearch.profiling.profiler import quick_profile

    say("measuring a quick latency profile" + (f", captured ({backend})" if backend else ""))
    return quick_profile(loaded.model, loaded.info, contexts=PROFILE_CONTEXTS, max_verify=8 if backend else PROFILE_MAX_VERIFY,
                         repeats=1, kernels=kernels, compile_mode=f"captured:{backend}" if backend else "eager")


def _pool(loaded: Any, texts: list[str], train: list[Any], profile: Any, settings: TuneSettings,
          say: Callable[[str], None], deadline: float) -> tuple[Candidate, ...]:
    """The mask pool from the short pre-search (:mod:`layersearch.tune.pool`), scored until ``deadline``."""
    from layersearch.tune.pool import candidate_pool

    context = int(sum(ids.shape[1] for ids in train) / len(train)) + settings.max_new_tokens // 2
    return candidate_pool(loaded, texts, profile, context, settings.budget * PRESEARCH_SHARE, seed=settings.seed, say=say,
                          deadline=deadline)


def _ids(loaded: Any, texts: list[str]) -> list[Any]:
    """Token ids ``[1, n]`` of each prompt, on the model's device (as ``bench`` tokenizes them)."""
    return [loaded.tokenizer(text, return_tensors="pt").input_ids.to(loaded.model.device) for text in texts]


def _best(study: Any) -> float | None:
    try:
        return float(study.best_value)
    except ValueError:  # no complete trial yet
        return None


def load_drafts(loaded: Any, draft_ref: Any, device: str, dtype: str | None, say: Callable[[str], None]) -> dict[str | None, Any]:
    """The study's draft model by quantization (None: its own weights), checked against the
    verifier, with an int8 copy where one can run (CPU, float32); empty without ``draft_ref``."""
    from dataclasses import replace

    from layersearch.decoder.build import load_draft_model
    from layersearch.models.quantize import QUANT_SCHEMES, check_quant, quantized_copy

    if draft_ref is None:
        return {}
    say(f"loading draft model {draft_ref.ref}")
    draft = load_draft_model(draft_ref.ref, loaded, device, dtype)
    drafts: dict[str | None, Any] = {None: draft}
    for scheme in QUANT_SCHEMES:
        try:
            check_quant(scheme, device, dtype)
        except LayersearchError:
            continue  # e.g. a GPU: the draft model is searched with its own weights only
        drafts[scheme] = replace(draft, model=quantized_copy(draft.model, scheme))
    return drafts


class TrialLines:
    """Per-trial progress on stderr: a bar on a terminal, else one line per trial."""

    def __init__(self, quiet: bool, say: Callable[[str], None]) -> None:
        from layersearch.common.progress import TrialProgress

        self.quiet, self.say = quiet, say
        self.bar = TrialProgress(quiet=quiet, desc="tune")

    def __enter__(self) -> "TrialLines":
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.close()

    def update(self, p: Any) -> None:
        """One trial finished (a :class:`layersearch.tune.run.Progress`)."""
        self.bar.update(best=p.best, last=p.last, left=p.seconds_left)
        if not self.quiet and not self.bar.enabled:
            last = "no score (failed or skipped)" if p.last is None else f"{p.last:.2f}x train decode-phase speedup"
            best = "-" if p.best is None else f"{p.best:.2f}x"
            name = f"trial {p.done if p.number is None else p.number}" + (f" ({p.kind})" if p.kind else "")
            self.say(f"{name}: {last} (best {best}, {p.seconds_left:.0f} s of the budget left)")

"""The configuration space of a tune study as Optuna suggestions, each trial one DecoderSpec.

Define-by-run and conditional (parameter names as the dashboard shows them):

=========  ===============================================  ==================================
name       values                                           asked when
=========  ===============================================  ==================================
drafter    plain, the registered drafters (layer-skip,       always
           prompt-lookup, hybrid, ...)
           (+ model, hybrid-model with a draft model)
mask       labels of the candidate pool (:mod:`.pool`)      a drafter that takes a plan
vocab      0 (full head), 8192, 32768, below the vocabulary  the drafter takes a head
draft_quant  none, int8 (the draft model's weights)         with the draft model, on CPU
lookahead  the registered rules (static, confidence,        not plain
           adaptive, heuristic, roc, ...)
max_draft  1..16                                            not plain
threshold  0.3..0.95                                        a rule that reads it (not static,
                                                            heuristic)
verifier   chain, tree                                      a drafter that branches, no
                                                            draft model
=========  ===============================================  ==================================

A space :attr:`Space.for_vllm` offers only what vLLM serves
(:func:`layersearch.integrations.vllm_export.vllm_draft`): the drafters it exports
(:func:`vllm_serves_drafter`: one draft source, a model or the n-gram lookup), static drafts,
chain verification, the full head, the draft model's own or int8 weights, and the pool's plans a
vLLM draft folder holds (no int4 parts; single sub-layers skipped only in the architectures
vLLM's plugin runs).

What each drafter takes comes from its registry entry (:class:`~layersearch.runtime.drafters.DrafterEntry`).
With a draft model, ``model`` drafts with the draft model in the default drafter's place;
``NAME-model`` is drafter NAME with the draft model (``hybrid-model`` looks the continuation up
in the context first and falls back to the draft model); a drafter that needs a draft model is
offered under its own name.

The drafter and lookahead names come from the runtime's registries
(:data:`layersearch.runtime.drafters.DRAFTERS`, :data:`layersearch.runtime.LOOKAHEADS`) when a
study is made, and the study keeps them (:func:`space_choices`, :data:`SPACE_VERSION`): a study
resumes with the choices it was made with, whatever was registered since. Studies made before
the choices were recorded (version 1) keep :data:`V1_CHOICES`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DecoderSpec, DrafterSpec, LookaheadSpec, MaskSourceSpec, ModelRef, ModelSpec
from layersearch.masks.mask import SkipMask
from layersearch.runtime import MAX_DRAFT
from layersearch.runtime.drafters import DEFAULT_DRAFTER, DrafterEntry, drafter_entry
from layersearch.tune.pool import Candidate

PLAIN = "plain"
MODEL_KIND = "model"  # the kind of the default drafter with the draft model; another's is NAME-model
NO_THRESHOLD = ("static", "heuristic")  # rules that ignore the threshold: it is not searched for them
#: Version of the recorded choices: 2 records the registries' names when the study is made.
SPACE_VERSION = 2
#: The choices of studies made before they were recorded (their Optuna distributions must not change).
V1_CHOICES = {"version": 1, "drafters": ("layer-skip", "prompt-lookup", "hybrid"),
              "lookaheads": ("static", "confidence", "adaptive", "heuristic")}
VOCABS = (0, 8192, 32768)
MAX_DRAFT_RANGE = (1, 16)  # the searched max_draft (the default, MAX_DRAFT, lies inside)
THRESHOLD = (0.3, 0.95)
VLLM_QUANTS = ("none", "int8")  # the draft model's weights vLLM's export writes


def space_choices() -> dict[str, Any]:
    """The drafter and lookahead names a new study chooses from: the runtime's registries now."""
    from layersearch.runtime import LOOKAHEADS
    from layersearch.runtime.drafters import DRAFTERS

    return {"version": SPACE_VERSION, "drafters": tuple(DRAFTERS), "lookaheads": tuple(LOOKAHEADS)}


def check_choices(choices: Mapping[str, Any]) -> dict[str, Any]:
    """``choices`` as recorded on a study, each name still registered (else one error line), and
    ``vllm``: whether the study searches only what vLLM serves (:attr:`Space.for_vllm`)."""
    from layersearch.runtime import LOOKAHEADS
    from layersearch.runtime.drafters import DRAFTERS

    try:
        version, drafters, rules = choices["version"], tuple(choices["drafters"]), tuple(choices["lookaheads"])
        for_vllm = choices.get("vllm", False)  # absent: made before the restriction, so not restricted
    except (KeyError, TypeError, AttributeError):
        raise LayersearchError(f"the study's recorded search space is malformed: {choices!r}") from None
    if not isinstance(for_vllm, bool):
        raise LayersearchError(f"the study's recorded search space is malformed: {choices!r}")
    for what, names, registry in (("drafter", drafters, DRAFTERS), ("lookahead", rules, LOOKAHEADS)):
        gone = [name for name in names if name not in registry]
        if gone:
            raise LayersearchError(f"the study searches {what} {gone[0]!r}, which is not registered here; "
                                   "choose another name to start a new search", fields="name")
    return {"version": version, "drafters": drafters, "lookaheads": rules, "vllm": for_vllm}


def _registry_drafters() -> tuple[str, ...]:
    return space_choices()["drafters"]


def _registry_rules() -> tuple[str, ...]:
    return space_choices()["lookaheads"]


@dataclass(frozen=True)
class Space:
    """What a study may choose from: the bound model, the mask pool, the draft model, the vocabulary."""

    model: ModelSpec
    masks: tuple[Candidate, ...]
    draft_model: ModelRef | None
    vocab_size: int
    max_new_tokens: int
    quants: tuple[str, ...] = ("none",)  # the draft model's weights: as loaded, or quantized (CPU)
    cheap_draft: int = 4  # the longest draft whose verification costs about one forward (the profile's curve)
    self_drafters: tuple[str, ...] = field(default_factory=_registry_drafters)  # the study's recorded choices
    rules: tuple[str, ...] = field(default_factory=_registry_rules)
    for_vllm: bool = False  # only what vLLM serves (the module docstring), so every spec exports
    architecture: str | None = None  # the model's (config.json's), for vLLM's plans skipping single sub-layers

    @property
    def kinds(self) -> dict[str, tuple[str, bool]]:
        """The drafter kinds but plain: kind -> (the spec's drafter, with the draft model). A
        drafter taking a plan only when a mask survived the profile's pruning; with a draft model
        the drafters that take one."""
        entries = {name: drafter_entry(name) for name in self.self_drafters if not self.for_vllm or vllm_serves_drafter(name)}
        own = {name: (name, False) for name, entry in entries.items()
               if not entry.needs_draft_model and (self.plans or not entry.takes_plan)}
        with_model = {drafter_kind(name, True): (name, True) for name, entry in entries.items()
                      if entry.takes_draft_model and self.draft_model is not None}
        return {**own, **with_model}

    @property
    def drafters(self) -> tuple[str, ...]:
        """The ``drafter`` parameter's choices: plain and :attr:`kinds`."""
        return (PLAIN, *self.kinds)

    @property
    def vocabs(self) -> tuple[int, ...]:
        """Draft-head sizes: the full head and the reduced ones smaller than the vocabulary (vLLM: the full head)."""
        return (0,) if self.for_vllm else tuple(n for n in VOCABS if n < self.vocab_size)

    @property
    def plans(self) -> tuple[Candidate, ...]:
        """The pool's masks the ``mask`` parameter chooses from (for vLLM, those a draft folder holds)."""
        return tuple(c for c in self.masks if not self.for_vllm or vllm_serves_plan(c.mask, self.architecture))

    @property
    def lookaheads(self) -> tuple[str, ...]:
        """The ``lookahead`` parameter's choices: the study's rules (vLLM: static drafts only)."""
        from layersearch.integrations.vllm_export import STATIC_RULES

        return tuple(rule for rule in self.rules if not self.for_vllm or rule in STATIC_RULES)

    @property
    def draft_quants(self) -> tuple[str, ...]:
        """The ``draft_quant`` parameter's choices: the draft model's weights (vLLM: :data:`VLLM_QUANTS`)."""
        return tuple(q for q in self.quants if not self.for_vllm or q in VLLM_QUANTS)

    def verifiers(self, entry: DrafterEntry, with_model: bool) -> tuple[str, ...]:
        """The ``verifier`` parameter's choices for a drafter: a tree where it branches without a draft model (not vLLM)."""
        return ("chain", "tree") if entry.branches and not with_model and not self.for_vllm else ("chain",)

    def mask(self, label: str) -> Any:
        """The pool's mask called ``label``."""
        return next(c.mask for c in self.plans if c.label == label)


def vllm_serves_drafter(name: str) -> bool:
    """Whether vLLM serves drafter ``name``: the export takes its static drafts (it reads the
    drafter's registry declarations: one draft source, a model or its n-gram lookup)."""
    from layersearch.integrations.vllm_export import vllm_draft

    entry = drafter_entry(name)
    own_plan = entry.takes_plan and not entry.needs_draft_model
    try:
        vllm_draft(DecoderSpec(model=ModelSpec(ModelRef("probe")),
                               drafter=DrafterSpec(name, ModelRef("probe draft") if entry.needs_draft_model else None),
                               mask_source=MaskSourceSpec("uniform", skip_ratio=0.25) if own_plan else MaskSourceSpec("none"),
                               lookahead=LookaheadSpec("static", 4)), 4)
    except LayersearchError:
        return False
    return True


def vllm_serves_plan(mask: SkipMask, architecture: str | None) -> bool:
    """Whether a vLLM draft folder holds ``mask``: no int4 parts, some sub-layer kept, and single
    sub-layers skipped only in an ``architecture`` vLLM's plugin runs (whole layers: any)."""
    from layersearch.integrations.vllm_export import PLAN_ARCHITECTURES

    everything = len(mask.attention) == mask.num_layers and len(mask.mlp) == mask.num_layers
    partial = set(mask.attention) != set(mask.mlp)
    return not (mask.has_int4 or everything or (partial and architecture not in PLAN_ARCHITECTURES))


def suggest_spec(trial: Any, space: Space) -> DecoderSpec:
    """The spec ``trial`` (an Optuna trial, or a FixedTrial of recorded params) chooses."""
    kind = trial.suggest_categorical("drafter", space.drafters)
    if kind == PLAIN:
        return DecoderSpec(model=space.model, plain=True, max_new_tokens=space.max_new_tokens)
    name, with_model = space.kinds[kind]
    entry = drafter_entry(name)
    source = MaskSourceSpec("none")
    if entry.takes_plan and not with_model:
        source = MaskSourceSpec("mask", mask=space.mask(trial.suggest_categorical("mask", [c.label for c in space.plans])))
    vocab = 0
    if entry.takes_head and len(space.vocabs) > 1:
        vocab = trial.suggest_categorical("vocab", space.vocabs)
    rule = trial.suggest_categorical("lookahead", space.lookaheads)
    max_draft = trial.suggest_int("max_draft", *MAX_DRAFT_RANGE)
    threshold = trial.suggest_float("threshold", *THRESHOLD) if rule not in NO_THRESHOLD else LookaheadSpec.threshold
    verifiers = space.verifiers(entry, with_model)
    verifier = trial.suggest_categorical("verifier", verifiers) if len(verifiers) > 1 else "chain"
    quant = trial.suggest_categorical("draft_quant", space.draft_quants) if with_model and len(space.draft_quants) > 1 else "none"
    drafter = DrafterSpec(name, space.draft_model if with_model else None, vocab, None if quant == "none" else quant)
    return DecoderSpec(model=space.model, drafter=drafter, mask_source=source,
                       lookahead=LookaheadSpec(rule, max_draft, threshold), verifier=verifier,
                       max_new_tokens=space.max_new_tokens)


#: transformers' prompt lookup length (``prompt_lookup_num_tokens=10``): a lookup draft costs no forward.
LOOKUP_DRAFT = 10


def starting_points(space: Space) -> list[dict[str, Any]]:
    """Params enqueued before the search, so even a short budget measures them, likeliest first
    and never plain decoding (every trial measures plain ``generate`` beside its candidate): each
    drafter that runs no model with static drafts of :data:`LOOKUP_DRAFT` (transformers' prompt
    lookup); each drafter drafting with the draft model alone at transformers' assisted defaults;
    then the pool's masks in the profile's order (best predicted first), each with static drafts
    of the profile's cheap length for every drafter taking a plan, the mixing drafters (prompt
    lookup first) before the others, and after the first mask the lookup drafters at the cheap
    length; last each drafter that mixes in the draft model with the heuristic rule. Only points
    of ``space``: none with a rule it does not search."""
    quant = {"draft_quant": space.draft_quants[-1]} if len(space.draft_quants) > 1 else {}  # the cheapest drafts first
    kinds = [(kind, with_model, drafter_entry(name)) for kind, (name, with_model) in space.kinds.items()]
    lookups = [kind for kind, _, entry in kinds if not entry.runs_model]
    points: list[dict[str, Any]] = [{"drafter": kind, "lookahead": "static", "max_draft": LOOKUP_DRAFT} for kind in lookups]
    cheap = [{"drafter": kind, "lookahead": "static", "max_draft": space.cheap_draft} for kind in lookups
             if space.cheap_draft != LOOKUP_DRAFT]
    for kind, _, entry in (k for k in kinds if k[1] and not k[2].mixes):
        head = _head(space, entry)
        points.append({"drafter": kind, "lookahead": "static", "max_draft": space.cheap_draft, **head, **quant})
        # transformers' assisted-generation defaults: draft while the draft model's top-1 is >= 0.4
        points.append({"drafter": kind, "lookahead": "confidence", "max_draft": 12, "threshold": 0.4, **head, **quant})
        points.append({"drafter": kind, "lookahead": "heuristic", "max_draft": MAX_DRAFT, **head,
                       **({"draft_quant": "none"} if quant else {})})
    planned = sorted((k for k in kinds if not k[1] and k[2].takes_plan), key=lambda k: not k[2].mixes)
    for rank, candidate in enumerate(space.plans):  # the profile's order: best predicted speedup first
        for kind, _, entry in planned:
            tree = {"verifier": "chain"} if len(space.verifiers(entry, False)) > 1 else {}
            points.append({"drafter": kind, "mask": candidate.label, **tree, "lookahead": "static",
                           "max_draft": space.cheap_draft, **_head(space, entry)})
        if rank == 0:
            points += cheap
    if not space.plans:
        points += cheap
    for kind, _, entry in (k for k in kinds if k[1] and k[2].mixes):
        points.append({"drafter": kind, "lookahead": "heuristic", "max_draft": MAX_DRAFT, **_head(space, entry), **quant})
    return [point for point in points if point["lookahead"] in space.lookaheads]


def _head(space: Space, entry: DrafterEntry) -> dict[str, Any]:
    """A starting point's draft head: the full one, where the space searches heads."""
    return {"vocab": 0} if entry.takes_head and len(space.vocabs) > 1 else {}


def drafter_kind(name: str, with_model: bool) -> str:
    """The ``drafter`` parameter's kind of drafter ``name`` (``with_model``: with the draft model)."""
    if not with_model or drafter_entry(name).needs_draft_model:
        return name
    return MODEL_KIND if name == DEFAULT_DRAFTER else f"{name}-{MODEL_KIND}"


def kind_of(spec: DecoderSpec) -> str:
    """The drafter kind of a spec, as the ``drafter`` parameter names it."""
    return PLAIN if spec.plain else drafter_kind(spec.drafter.name, spec.drafter.model is not None)

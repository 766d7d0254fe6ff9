"""A tune run from a command's options (``layersearch tune``, and ``demo``'s quick tune): every
option checked and every output checked before the model loads (``--export-vllm``'s folder too:
``tune`` writes it after the spec, :mod:`layersearch.commands.tune`), then
:func:`~layersearch.tune.run.tune`, the spec and the report written.

``options`` is any object with ``tune``'s option names as attributes (argparse's parsed arguments,
or a :class:`types.SimpleNamespace`)."""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Any, Callable

from layersearch.common.errors import LayersearchError


def tune_from_options(options: Any, load: Callable[[], Any], say: Callable[[str], None]) -> Any:
    """The tune run ``options`` describe, its spec and report written; ``load()`` loads the model
    (after every check), ``say`` gets progress lines. Returns the TuneResult."""
    from layersearch.common.checks import check_int
    from layersearch.common.outputs import announce, check_output, write_outputs
    from layersearch.evaluation.plots import check_png_output
    from layersearch.decoder.spec import ModelRef, ModelSpec
    from layersearch.tune.report import check_picture, curve_png, markdown, report_paths
    from layersearch.tune.run import TrialLines, load_drafts, prepare, prompt_counts, tune
    from layersearch.tune.settings import TuneSettings

    o = options
    export = getattr(o, "export_vllm", None)  # demo has no such option
    if export is not None:
        check_export_folder(export)  # a file, /proc, a folder holding anything: refused before any work
    for given, option in ((o.train_prompts, "--train-prompts"), (o.test_prompts, "--test-prompts")):
        if given is not None:
            check_int(given, option)
    if o.name is not None and not o.name.strip():
        raise LayersearchError("--name is empty: give a study name (or leave it out: the prompt file's name)")
    train, test, note = prompt_counts(o.prompts, o.train_prompts, o.test_prompts)
    settings = TuneSettings(o.prompts, o.budget, study_name(o), o.storage,
                            train, test, o.max_new_tokens, o.repeats, o.finalists, for_vllm=export is not None)
    out = check_output(o.out, "--out")
    md_path, png_path = report_paths(o.out, o.report)
    md, png = check_output(md_path, "--report"), check_png_output(png_path)
    check_picture(md_path, png_path)  # an unrelated x.png beside a new x.md is the user's, not ours
    if o.draft_model is not None and not o.draft_model.strip():
        raise LayersearchError("--draft-model is empty: name a model")
    draft_ref = _draft_ref(o.draft_model) if o.draft_model else None
    prepared = prepare(settings, draft_ref)
    if export is not None:
        _check_apart(export, (("--out", o.out), ("--report", md_path), ("--report's picture", png_path),
                              ("--storage", prepared.location.path)))
        for ref, option in ((o.model, "--model"), (None if draft_ref is None else draft_ref.ref, "--draft-model")):
            if ref is not None:
                _check_served_model(ref, option)
    profile = None
    if getattr(o, "profile", None) is not None:
        from layersearch.profiling.profile import LatencyProfile

        profile = LatencyProfile.load(o.profile)  # a bad file is refused before the model loads
    if note is not None and not o.quiet:
        say(note)
    loaded = load()
    if profile is not None:
        from layersearch.common.modelfile import naming
        from layersearch.profiling.profiler import model_architecture

        with naming(o.profile):
            profile.check_model(loaded.info, model_architecture(loaded.model))
    drafts = load_drafts(loaded, draft_ref, o.device, o.dtype, say)
    model = ModelSpec(ModelRef.given(o.model), loaded.info, o.device, o.dtype)
    with TrialLines(o.quiet, say) as progress, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # transformers' deprecation notes are not the user's concern
        result = tune(loaded, prepared, model, drafts=drafts, kernels=getattr(o, "kernels", "auto"), compile=getattr(o, "compile", None),
                      profile=profile, say=say if not o.quiet else (lambda m: None), on_trial=progress.update)
    write_outputs([(md, markdown(result, Path(png_path).name)), (png, curve_png(result.records, f"tune: {settings.name}"))], "--report")
    result.spec.save(o.out)
    announce(out, f"wrote {out.given} ({'plain decoding' if result.selection.plain_chosen else result.selection.winner}), "
                  f"{md_path} and {png_path}")
    return result


def _draft_ref(text: str) -> Any:
    """``--draft-model MODEL``: the study searches the model's own and its int8 weights itself."""
    from layersearch.decoder.fragments import draft_model_item

    ref, quant = draft_model_item(text)
    if quant is not None:
        raise LayersearchError(f"--draft-model {text}: tune searches the draft model's own and {quant} weights itself; "
                               f"give {ref.ref}")
    return ref


def study_name(options: Any) -> str:
    """The study's name: ``--name``, else the prompt file's, with ``-vllm`` where ``--export-vllm``
    restricts the search (a study of the whole space is never resumed restricted)."""
    if options.name:
        return str(options.name)
    return default_name(options.prompts) + ("-vllm" if getattr(options, "export_vllm", None) is not None else "")


def check_export_folder(folder: str) -> Path:
    """``--export-vllm DIR``: a folder the vLLM export can become (the export's own check)."""
    from layersearch.integrations.vllm_export import check_export_folder as check

    return check(folder, "--export-vllm")


def _check_apart(folder: str, outputs: Any) -> None:
    """Refuse an output of the run (``outputs``: (option, path or None) pairs) at or inside the
    export folder: the export writes it whole, after them, and would find it taken."""
    real = Path(os.path.realpath(os.path.expanduser(folder)))
    for option, path in outputs:
        if path is not None and str(path) != "-":
            file = Path(os.path.realpath(os.path.expanduser(str(path))))
            if file == real or real in file.parents:
                raise LayersearchError(f"{option} {path} lies in --export-vllm {folder}: the export writes that folder "
                                       "whole after tune's files; put them apart")


def _check_served_model(ref: str, option: str) -> None:
    """The export reads the model's files: the embedded model, a .gguf file or a local model folder."""
    from layersearch.models.gguf import is_gguf_path

    if is_gguf_path(ref) or (Path(os.path.expanduser(ref)) / "config.json").is_file():
        return
    from layersearch.models.loading import EMBEDDED_MODEL

    if ref != EMBEDDED_MODEL:
        raise LayersearchError(f"{option} {ref}: --export-vllm writes the model's files for vLLM, so it takes the "
                               "embedded model, a .gguf file or a local model folder")


def default_name(prompts: str) -> str:
    """A study name from the prompt file's name (letters, digits and ._+- kept)."""
    stem = re.sub(r"[^A-Za-z0-9._+-]", "-", Path(prompts).stem).lstrip("._+-")[:100]
    return stem or "prompts"

"""One configuration's measured speedup: its decoder against plain ``generate``, interleaved.

Every measurement goes through the benchmark's machinery (:func:`layersearch.evaluation.bench.run_domain`:
prompts interleaved, the order rotated, prefill timed apart; :func:`layersearch.evaluation.bench.summarize`:
the decode-phase speedup), so a trial's score and a ``bench`` row are the same quantity.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DecoderSpec

CANDIDATE = "candidate"


@dataclass(frozen=True)
class Figures:
    """A configuration's measured figures against plain ``generate`` on the same prompts."""

    speedup: float  # decode phase (prefill excluded), median over repeats
    end_to_end: float  # prefill included
    M: float | None  # mean tokens per verification
    alpha: float | None  # draft acceptance rate
    identical: bool  # greedy output equal to plain generate's, token for token
    tokens_per_second: float
    predicted: float | None = None  # the latency profile's speedup for the run's own steps (over our plain loop)
    predicted_on: str | None = None  # the device that prediction is for

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (trial user attributes)."""
        return asdict(self)


def draft_for(drafts: Mapping[str | None, Any] | None, spec: DecoderSpec) -> Any:
    """The loaded draft model ``spec`` drafts with, from ``drafts`` (quantization -> LoadedModel)."""
    if not drafts or spec.drafter.model is None:
        return None
    return drafts[spec.drafter.quant]


def spec_config(loaded: Any, spec: DecoderSpec, label: str, drafts: Mapping[str | None, Any] | None = None,
                kernels: str = "stock") -> Any:
    """A :class:`layersearch.evaluation.bench.Configuration` running the decoder ``spec`` describes (``drafts``: the
    draft model loaded once per quantization; ``kernels``: the CPU kernels every run uses)."""
    from layersearch.evaluation.bench import Configuration
    from layersearch.decoder.build import build_decoder

    built = build_decoder(loaded, spec, draft=draft_for(drafts, spec), kernels=kernels)
    return Configuration(label, lambda ids, n: built.run(ids, n))


def with_kernels(config: Any, model: Any, kernels: str) -> Any:
    """``config`` with every run inside ``model_kernels(model, kernels)`` (a peer or plain row
    timed with the kernels the candidates run)."""
    from dataclasses import replace

    from layersearch.kernels.select import model_kernels

    def generate(ids: Any, n: int, inner=config.generate) -> Any:
        with model_kernels(model, kernels):
            return inner(ids, n)

    return replace(config, generate=generate)


def plain_config(loaded: Any, kernels: str = "stock") -> Any:
    """The benchmark's plain ``generate`` row (with ``kernels``)."""
    from layersearch.evaluation.bench import configs
    from layersearch.runtime.draft_policy import DraftPolicy

    return with_kernels(configs(loaded.model, [], DraftPolicy(), peers=())[0], loaded.model, kernels)


def figures_of(row: dict[str, Any]) -> Figures:
    """A :func:`layersearch.evaluation.bench.summarize` row as Figures (the decode-phase speedup where the
    prefill was timed, else the end-to-end one)."""
    return Figures(float(row.get("decode_speedup", row["speedup"])), float(row["speedup"]), row["M"], row["alpha"],
                   bool(row["identical_to_plain"]), float(row["tokens_per_second"]), row.get("predicted_speedup"),
                   row.get("predicted_on"))


def measure(loaded: Any, spec: DecoderSpec, prompts: Sequence[Any], new_tokens: int, *, repeats: int = 1,
            drafts: Mapping[str | None, Any] | None = None, kernels: str = "stock", profile: Any = None) -> Figures:
    """``spec``'s decoder against plain ``generate`` on ``prompts`` (token ids ``[1, n]`` each),
    both with ``kernels``; with ``profile``, also its prediction for the run's own steps."""
    (figures,) = measure_together(loaded, [spec], prompts, new_tokens, repeats=repeats, drafts=drafts, kernels=kernels,
                                  profile=profile)
    if isinstance(figures, str):
        raise LayersearchError(figures)
    return figures


def measure_together(loaded: Any, specs: Sequence[DecoderSpec], prompts: Sequence[Any], new_tokens: int, *,
                     repeats: int = 1, drafts: Mapping[str | None, Any] | None = None,
                     kernels: str = "stock", profile: Any = None) -> list[Figures | str]:
    """Each of ``specs``' decoders against one plain ``generate``, all interleaved on ``prompts``
    (one plain run serves them all, and the machine's load drifts alike for every one); per spec its
    Figures, or the error that stopped it (a spec this model cannot build or run). A failing plain
    ``generate`` raises. With ``profile``, each also holds its prediction for the run's own steps."""
    from layersearch.evaluation.bench import PLAIN, run_domain, summarize

    from layersearch.decoder.spec import compile_wanted

    labels = [f"{CANDIDATE} {i}" for i in range(len(specs))]
    built: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for label, spec in zip(labels, specs):
        try:
            built[label] = spec_config(loaded, spec, label, drafts, kernels)
        except LayersearchError as exc:
            errors[label] = str(exc)
    configs = [plain_config(loaded, kernels), *built.values()]
    compiled = any(compile_wanted(spec.compile, loaded.model.device.type) for spec in specs)
    measured = run_domain(configs, list(prompts), new_tokens, repeats, lambda message: None, device=loaded.model.device,
                          compiled=compiled)
    if measured[PLAIN].error:
        raise LayersearchError(f"{PLAIN} failed: {measured[PLAIN].error}")
    results: list[Figures | str] = []
    for label in labels:
        if label in errors:
            results.append(errors[label])
        elif measured[label].error:
            results.append(f"{CANDIDATE} failed: {measured[label].error}")
        else:
            results.append(figures_of(summarize(label, measured[label], profile, 0, None, plain=measured[PLAIN])))
    return results

"""The configuration space of a tune study as Optuna suggestions, each trial one DecoderSpec.

Define-by-run and conditional (parameter names as the dashboard shows them):

=========  ===============================================  ==================================
name       values                                           asked when
=========  ===============================================  ==================================
drafter    plain, the registered drafters (layer-skip,       always
           prompt-lookup, hybrid, ...)
           (+ model, hybrid-model with a draft model)
mask       labels of the candidate pool (:mod:`.pool`)      a drafter that runs the model
vocab      0 (full head), 8192, 32768, below the vocabulary  the drafter runs a head
draft_quant  none, int8 (the draft model's weights)         model, hybrid-model, on CPU
lookahead  the registered rules (static, confidence,        not plain
           adaptive, heuristic, roc, ...)
max_draft  1..16                                            not plain
threshold  0.3..0.95                                        a rule that reads it (not static,
                                                            heuristic)
verifier   chain, tree                                      layer-skip
=========  ===============================================  ==================================

``model`` drafts with the draft model alone; ``hybrid-model`` looks the continuation up in the
context first and falls back to the draft model (the spec's ``hybrid`` drafter with a model).

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
from layersearch.tune.pool import Candidate

PLAIN = "plain"
MODEL_KINDS = {"model": "layer-skip", "hybrid-model": "hybrid"}  # kind -> the spec's drafter name with a model
MASKLESS = ("prompt-lookup",)  # drafters that run no model: no mask, no draft head
NO_THRESHOLD = ("static", "heuristic")  # rules that ignore the threshold: it is not searched for them
#: Version of the recorded choices: 2 records the registries' names when the study is made.
SPACE_VERSION = 2
#: The choices of studies made before they were recorded (their Optuna distributions must not change).
V1_CHOICES = {"version": 1, "drafters": ("layer-skip", "prompt-lookup", "hybrid"),
              "lookaheads": ("static", "confidence", "adaptive", "heuristic")}
VOCABS = (0, 8192, 32768)
MAX_DRAFT = (1, 16)
THRESHOLD = (0.3, 0.95)


def space_choices() -> dict[str, Any]:
    """The drafter and lookahead names a new study chooses from: the runtime's registries now."""
    from layersearch.runtime import LOOKAHEADS
    from layersearch.runtime.drafters import DRAFTERS

    return {"version": SPACE_VERSION, "drafters": tuple(DRAFTERS), "lookaheads": tuple(LOOKAHEADS)}


def check_choices(choices: Mapping[str, Any]) -> dict[str, Any]:
    """``choices`` as recorded on a study, each name still registered (else one error line)."""
    from layersearch.runtime import LOOKAHEADS
    from layersearch.runtime.drafters import DRAFTERS

    try:
        version, drafters, rules = choices["version"], tuple(choices["drafters"]), tuple(choices["lookaheads"])
    except (KeyError, TypeError):
        raise LayersearchError(f"the study's recorded search space is malformed: {choices!r}") from None
    for what, names, registry in (("drafter", drafters, DRAFTERS), ("lookahead", rules, LOOKAHEADS)):
        gone = [name for name in names if name not in registry]
        if gone:
            raise LayersearchError(f"the study searches {what} {gone[0]!r}, which is not registered here; "
                                   "choose another name to start a new search", fields="name")
    return {"version": version, "drafters": drafters, "lookaheads": rules}


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

    @property
    def drafters(self) -> tuple[str, ...]:
        """The drafter kinds (masked ones only when a mask survived the profile's pruning)."""
        own = tuple(kind for kind in self.self_drafters if kind in MASKLESS or self.masks)
        return (PLAIN, *own, *(MODEL_KINDS if self.draft_model is not None else ()))

    @property
    def vocabs(self) -> tuple[int, ...]:
        """Draft-head sizes: the full head and the reduced ones smaller than the vocabulary."""
        return tuple(n for n in VOCABS if n < self.vocab_size)

    def mask(self, label: str) -> Any:
        """The pool's mask called ``label``."""
        return next(c.mask for c in self.masks if c.label == label)


def suggest_spec(trial: Any, space: Space) -> DecoderSpec:
    """The spec ``trial`` (an Optuna trial, or a FixedTrial of recorded params) chooses."""
    kind = trial.suggest_categorical("drafter", space.drafters)
    if kind == PLAIN:
        return DecoderSpec(model=space.model, plain=True, max_new_tokens=space.max_new_tokens)
    source = MaskSourceSpec("none")
    if kind not in MASKLESS and kind not in MODEL_KINDS:
        source = MaskSourceSpec("mask", mask=space.mask(trial.suggest_categorical("mask", [c.label for c in space.masks])))
    vocab = 0
    if kind not in MASKLESS and len(space.vocabs) > 1:
        vocab = trial.suggest_categorical("vocab", space.vocabs)
    rule = trial.suggest_categorical("lookahead", space.rules)
    max_draft = trial.suggest_int("max_draft", *MAX_DRAFT)
    threshold = trial.suggest_float("threshold", *THRESHOLD) if rule not in NO_THRESHOLD else LookaheadSpec.threshold
    verifier = trial.suggest_categorical("verifier", ("chain", "tree")) if kind == "layer-skip" else "chain"
    quant = trial.suggest_categorical("draft_quant", space.quants) if kind in MODEL_KINDS and len(space.quants) > 1 else "none"
    drafter = DrafterSpec(MODEL_KINDS.get(kind, kind), space.draft_model if kind in MODEL_KINDS else None, vocab,
                          None if quant == "none" else quant)
    return DecoderSpec(model=space.model, drafter=drafter, mask_source=source,
                       lookahead=LookaheadSpec(rule, max_draft, threshold), verifier=verifier,
                       max_new_tokens=space.max_new_tokens)


def starting_points(space: Space) -> list[dict[str, Any]]:
    """Params enqueued before the search, so even a short budget measures them, cheapest and
    likeliest first: prompt lookup with HF's heuristic length rule, the draft model with the
    heuristic rule, plain decoding (the noise level of a train score), then the best predicted
    mask with the confidence rule (alone and in the hybrid) and the hybrid with the draft model."""
    head = {"vocab": 0} if len(space.vocabs) > 1 else {}
    points: list[dict[str, Any]] = [{"drafter": "prompt-lookup", "lookahead": "heuristic", "max_draft": 4}]
    quant = {"draft_quant": space.quants[-1]} if len(space.quants) > 1 else {}  # the cheapest drafts first
    if space.draft_model is not None:
        points.append({"drafter": "model", "lookahead": "static", "max_draft": space.cheap_draft, **head, **quant})
        # transformers' assisted-generation defaults: draft while the draft model's top-1 is >= 0.4
        points.append({"drafter": "model", "lookahead": "confidence", "max_draft": 12, "threshold": 0.4, **head, **quant})
        points.append({"drafter": "model", "lookahead": "heuristic", "max_draft": 8, **head,
                       **({"draft_quant": "none"} if quant else {})})
    points.append({"drafter": PLAIN})
    if space.masks:
        best = space.masks[0].label
        confident = {"lookahead": "confidence", "max_draft": 8, "threshold": 0.8, **head}
        points.append({"drafter": "layer-skip", "mask": best, "verifier": "chain", **confident})
        points.append({"drafter": "hybrid", "mask": best, **confident})
    if space.draft_model is not None:
        points.append({"drafter": "hybrid-model", "lookahead": "heuristic", "max_draft": 8, **head, **quant})
    return points


def kind_of(spec: DecoderSpec) -> str:
    """The drafter kind of a spec, as the ``drafter`` parameter names it."""
    if spec.plain:
        return PLAIN
    if spec.drafter.model is not None:
        return next(kind for kind, name in MODEL_KINDS.items() if name == spec.drafter.name)
    return spec.drafter.name

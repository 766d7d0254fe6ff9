"""What a search strategy is: one frozen :class:`Strategy` value per strategy module.

Each strategy module ends with ``STRATEGY = Strategy(...)``; the registry in
:mod:`layersearch.strategies` lists them. A study reads everything it needs from that value:
the sampler, the skip ratio it takes, the masks to enqueue at creation and the stop rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from optuna.samplers import BaseSampler
from optuna.study import Study

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask


@dataclass(frozen=True)
class StrategyInputs:
    """What a strategy may read to choose its starting masks.

    ``num_layers``, the resolved ``skip_ratio`` and the study's search ``space`` (``skips`` or
    ``plans``, :mod:`layersearch.strategies.space`) always; the loaded model (a
    :class:`~layersearch.models.loading.LoadedModel`), the study's prompt texts, its latency
    profile and ``max_new_tokens`` only when a study creates them (strategies with
    ``needs_model``).
    """

    num_layers: int
    skip_ratio: float | None = None
    loaded: Any = None
    texts: Sequence[str] = ()
    profile: Any = None
    max_new_tokens: int = 0
    space: str = "skips"


def no_masks(inputs: StrategyInputs) -> tuple[SkipMask, ...]:
    """No starting masks."""
    return ()


def never_stops(study: Study, rule: Any = None) -> str | None:
    """A strategy that never stops on its own."""
    return None


@dataclass(frozen=True)
class Strategy:
    """One search strategy.

    ``sampler(num_layers=, skip_ratio=, seed=, space=)`` builds its Optuna sampler (the ratio
    already resolved; ``space`` the study's search space, ``skips`` or ``plans``); ``skip_count(L, ratio)`` the exact skipped count it promises at a skip ratio
    (None: it takes no skip ratio and searches the count freely); ``default_ratio`` the ratio
    it uses when none is given (None: free unless given); ``initial_masks`` the masks a study enqueues at creation; ``stop_reason(study,
    rule)`` why the study ends now (``rule``: SWIFT's :class:`~layersearch.strategies.swift.StopRule`
    override, ignored by the others). ``stream_seeded``: its sampler draws from one RNG stream
    (TPE), so a resumed study seeds it past the draws already made. ``needs_model``: its
    starting masks need the loaded model, prompts and profile. ``objective``: the objective
    of the paper the strategy comes from (``study head-to-head`` scores it by that one).
    ``options`` / ``stop_options``: the settings of its sampler and stop rule a study may
    change; ``presets``: named sets of study settings and options (``paper``: the paper's code).
    """

    name: str
    summary: str
    sampler: Callable[..., BaseSampler]
    skip_count: Callable[[int, float], int] | None = None
    default_ratio: float | None = None
    initial_masks: Callable[[StrategyInputs], tuple[SkipMask, ...]] = no_masks
    stop_reason: Callable[..., str | None] = never_stops
    stream_seeded: bool = False
    needs_model: bool = False
    objective: str | None = None
    options: tuple[str, ...] = ()  # keyword options its sampler takes (``study create`` flags)
    stop_options: tuple[str, ...] = ()  # fields of its stop rule a study may set
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # name -> settings and options

    @property
    def takes_ratio(self) -> bool:
        """Whether the strategy accepts a skip ratio."""
        return self.skip_count is not None


def check_kappa(kappa: Any) -> float:
    """UCB's exploration weight: a finite number >= 0."""
    if isinstance(kappa, bool) or not isinstance(kappa, (int, float)) or not 0 <= kappa < float("inf"):
        raise LayersearchError(f"kappa must be a number >= 0, got {kappa!r}")
    return float(kappa)

"""What a tune run is asked: the prompt file, the budget, the study and the measurement sizes."""

from __future__ import annotations

import math
from dataclasses import dataclass

from layersearch.common.checks import check_int
from layersearch.common.errors import LayersearchError


#: The longest search tune takes (30 days of seconds); a resumed study can run again.
MAX_BUDGET = 30 * 24 * 3600.0


@dataclass(frozen=True)
class TuneSettings:
    """One ``layersearch tune`` run (model references live in the specs it writes)."""

    prompts: str  # the user's JSONL prompt file
    budget: float  # seconds of search (pre-search and study); the held-out re-measurement comes after
    name: str  # the study's name (the same name resumes it)
    storage: str | None = None  # Optuna storage URL (None: sqlite:///studies/tune-<name>.db)
    train_prompts: int = 4  # train-split prompts each trial decodes
    test_prompts: int = 4  # held-out prompts the finalists decode
    max_new_tokens: int = 64
    repeats: int = 2  # held-out repeats (medians)
    finalists: int = 3  # distinct configurations re-measured on the held-out split
    seed: int = 0
    for_vllm: bool = False  # search only what vLLM serves (``layersearch.tune.space.Space.for_vllm``)

    def __post_init__(self) -> None:
        budget = self.budget
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not math.isfinite(budget) or budget <= 0:
            raise LayersearchError(f"budget must be a number of seconds > 0, got {budget!r}", fields="budget")
        if budget > MAX_BUDGET:  # 1e308 is a typo, not a plan: it would search until killed
            raise LayersearchError(f"budget must be at most {MAX_BUDGET:.0f} seconds (30 days), got {budget:g}", fields="budget")
        for name, what in (("train_prompts", "train_prompts"), ("test_prompts", "test_prompts"),
                           ("max_new_tokens", "max_new_tokens"), ("repeats", "repeats"), ("finalists", "finalists")):
            check_int(getattr(self, name), what)
        check_int(self.seed, "seed", minimum=0, maximum=2**32 - 1)

    @property
    def study_storage_name(self) -> str:
        """The name the default storage file is derived from (``studies/tune-<name>.db``)."""
        return f"tune-{self.name}"

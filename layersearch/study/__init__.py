"""Mask searches as Optuna studies: create, run (resumable), list, show, export, compare.

Every search is an ordinary Optuna study, so it can be resumed, run by several worker
processes at once and inspected in optuna-dashboard. What layersearch adds, module by module:

* **Settings** (:mod:`~layersearch.study.settings`, :class:`StudySettings`): model, domain,
  strategy, objective, skip ratio, samples, seed, decoding options, the model's
  :class:`~layersearch.masks.mask.ModelInfo` and the latency profile, stored with the study as the
  user attribute ``"settings"``. Every run rebuilds the model runtime, the objective and the
  strategy's sampler from them (:mod:`~layersearch.study.rebuild`).
* **Trials** record the user attributes of :mod:`layersearch.objectives` (``mask``, ``M``,
  ``alpha``, ``skip_ratio``, ``tokens_per_second``...) and the worker that ran them (system
  attribute :data:`WORKER_ATTR`: host, pid, process start; :mod:`~layersearch.study.workers`).
* **Storage** (:mod:`~layersearch.study.storage`, :func:`storage_location`): default
  ``sqlite:///studies/<name>.db``; any SQLAlchemy URL Optuna accepts (PostgreSQL, MySQL...);
  a journal file as ``journal:///relative/path.log``, ``journal:////absolute/path.log`` (the
  sqlite URL convention) or a plain path ending in ``.log``; a plain path ending in ``.db`` is
  sqlite. Reading commands never create a storage file.
* **Crash safety** (:mod:`~layersearch.study.run`): a run loses at most the trial it was
  running. RDB storages get Optuna's heartbeat (a dead worker's trial turns FAIL after the
  grace period, checked before every trial); in addition, on start a run fails every RUNNING
  trial whose worker process on this host is gone (this covers journal files, which have no
  heartbeat, and a restart right after ``kill -9``); SIGTERM and Ctrl-C fail the current trial
  before the process exits (:mod:`~layersearch.study.interrupts`).
* **Reproducible resumption**: the mask samplers draw from ``(seed, trial number)``, so a
  rebuilt sampler proposes what the original would have; ``tpe`` (a stream RNG) is seeded
  with ``seed + finished trials``.

Strategies come from the registry of :mod:`layersearch.strategies`: their sampler, the masks
to enqueue at creation (:func:`~layersearch.strategies.initial_masks`, KnapSpec's ``knapsack``
candidates included) and their stop rule, checked after every trial.

The commands live in :mod:`~layersearch.study.create`, :mod:`~layersearch.study.run`,
:mod:`~layersearch.study.inspect` (list, show), :mod:`~layersearch.study.export` and
:mod:`~layersearch.study.compare`; this package re-exports their public names.
"""

from __future__ import annotations

from layersearch.study.compare import CompareResult, compare_studies, write_table
from layersearch.study.create import CreateResult, create_study
from layersearch.study.export import export_mask
from layersearch.study.inspect import list_studies, search_seconds, show_study
from layersearch.study.run import RunSummary, run_study
from layersearch.study.settings import SETTINGS_ATTR, StudySettings
from layersearch.study.storage import (
    DEFAULT_HEARTBEAT,
    STUDIES_DIR,
    StorageLocation,
    check_name,
    default_storage_url,
    load_study,
    open_storage,
    storage_location,
)
from layersearch.study.workers import WORKER_ATTR, fail_stale_trials

# Importable from here as before the package split (the commands use them), though not in __all__.
from layersearch.common.jsonfile import write_text_atomic  # noqa: F401,E402
from layersearch.study.compare import COMPARE_COLUMNS  # noqa: F401,E402
from layersearch.study.interrupts import Terminated, Interrupts  # noqa: F401,E402
from layersearch.study.rebuild import load_study_model  # noqa: F401,E402
from layersearch.study.settings import SETTINGS_VERSION  # noqa: F401,E402
from layersearch.study.storage import HEARTBEAT_GRACE_FACTOR  # noqa: F401,E402

__all__ = [
    "CompareResult",
    "CreateResult",
    "DEFAULT_HEARTBEAT",
    "RunSummary",
    "STUDIES_DIR",
    "SETTINGS_ATTR",
    "StorageLocation",
    "StudySettings",
    "WORKER_ATTR",
    "check_name",
    "compare_studies",
    "create_study",
    "default_storage_url",
    "export_mask",
    "fail_stale_trials",
    "list_studies",
    "load_study",
    "open_storage",
    "run_study",
    "search_seconds",
    "show_study",
    "storage_location",
    "write_table",
]

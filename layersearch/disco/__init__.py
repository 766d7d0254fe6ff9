"""DISCO (disco.txt): a small classifier decides, position by position, whether the draft goes on.

Modules, in dependency order: :mod:`features` (classifier inputs), :mod:`collect` (teacher-forced
training rows), :mod:`classifier` (the 2-layer network and its training), :mod:`lookahead`
(the rule the decode loop runs), :mod:`baselines` (transformers' ROC-fitted confidence rule,
the perplexity rule), :mod:`tune` (offline replay; tau / SL_max tuned on validation),
:mod:`file` (the JSON file). ``layersearch disco bench`` is :mod:`layersearch.experiments.disco`.
"""

from layersearch.disco.baselines import PerplexityLookahead, RocConfidenceLookahead, roc_threshold
from layersearch.disco.classifier import Classifier, f1, train
from layersearch.disco.collect import Rows, collect, prompt_rows
from layersearch.disco.features import FEATURE_SPEC, NUM_FEATURES, features
from layersearch.disco.file import DiscoFile
from layersearch.disco.lookahead import DiscoLookahead
from layersearch.disco.tune import Costs, Replay, measure_costs, replay, tune

__all__ = [
    "Classifier", "Costs", "DiscoFile", "DiscoLookahead", "FEATURE_SPEC", "NUM_FEATURES", "PerplexityLookahead",
    "Replay", "RocConfidenceLookahead", "Rows", "collect", "f1", "features", "measure_costs", "prompt_rows",
    "replay", "roc_threshold", "train", "tune",
]

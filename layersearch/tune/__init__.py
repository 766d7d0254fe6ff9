"""``layersearch tune``: the fastest lossless decoder configuration for the user's own prompts.

One Optuna study searches the whole configuration space the runtime offers (drafter kind, the
layer-skip mask, a draft model where given, the lookahead rule and its parameters, the draft
head's vocabulary, chain or tree verification), scored by the measured decode-phase speedup
over plain ``generate`` on the prompt file's train split. The best few are measured again on
the held-out test split beside plain ``generate`` and transformers' own peers, and the winner
(or plain decoding, when nothing beats it) becomes a :class:`~layersearch.decoder.spec.DecoderSpec`.

The budget is kept by not starting what it cannot hold: no mask of the pool is scored, and no
trial or batch of trials starts, once the time left cannot hold it (priced by plain ``generate``
timed once, then by the longest trial so far), so a search ends within its budget but for the
one measurement that started inside it and ran longer than its price (:mod:`~layersearch.tune.run`).

Modules, one concept each: :mod:`~layersearch.tune.settings` (what a run is asked),
:mod:`~layersearch.tune.pool` (the mask candidates, made before the search),
:mod:`~layersearch.tune.space` (Optuna suggestions -> DecoderSpec),
:mod:`~layersearch.tune.objective` (one configuration's train speedup),
:mod:`~layersearch.tune.study` (the resumable study), :mod:`~layersearch.tune.select` (held-out
re-measurement and the choice), :mod:`~layersearch.tune.report` (markdown and PNG),
:mod:`~layersearch.tune.run` (the whole run). No argparse here: ``layersearch tune`` checks its
options and runs (:mod:`layersearch.commands.tune_options`).
"""

from layersearch.tune.settings import TuneSettings

__all__ = ["TuneSettings"]

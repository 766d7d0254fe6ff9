"""SD²: steering a drafter with a vector from the verifier's hidden states.

``params`` (W_hml, W_s), ``hooks`` (the bias on the MLPs, inside a context manager),
``file`` (safetensors + metadata), ``drafter`` (:class:`SteeredDrafter`), ``train`` (the KL
training, optionally fine-tuning an independent drafter), ``shrink`` (a layer-pruned drafter cut
from the verifier; a model directory is written all or nothing by :mod:`layersearch.models.modeldir`).
The bench (plain vs unsteered vs steered block efficiency and speed) and the commands' runs are
:mod:`layersearch.experiments.steer.experiment` and :mod:`layersearch.experiments.steer.workflow`.
"""

from layersearch.steer.drafter import SteeredDrafter
from layersearch.steer.file import SteeringFile
from layersearch.steer.hooks import steered
from layersearch.steer.params import SteeringParams, default_layers

__all__ = ["SteeredDrafter", "SteeringFile", "SteeringParams", "default_layers", "steered"]

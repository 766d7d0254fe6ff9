"""KNN-SSD (Song et al.): one skip mask per domain, chosen per input by nearest neighbour.

* :mod:`.represent`  an input's representation (mean last hidden state of the prefill)
* :mod:`.kmeans`     k-means++ with restarts, anchors nearest each centroid (numpy)
* :mod:`.router`     the router value type and its validated JSON file; 1-NN cosine routing
* :mod:`.build`      anchors per domain and the calibrated out-of-distribution threshold
* :mod:`.controller` routing as a decode-loop controller (no extra forward)
* :mod:`.stream`     mix-ratio streams (Eq. 8)

Its experiments (building a router from prompts; plain / SSD_F / SSD_M / KNN-SSD / oracle on
mixed streams; the figures) are :mod:`layersearch.experiments.knn` (``experiment``, ``workflow``, ``figures``).
"""

from layersearch.knn.build import DomainSamples, build_router, routing_accuracy
from layersearch.knn.router import DomainMask, Route, Router
from layersearch.knn.stream import StreamItem, domain_sequence, mix_stream, switch_rate

__all__ = ["DomainMask", "DomainSamples", "Route", "Router", "StreamItem", "build_router", "domain_sequence",
           "mix_stream", "routing_accuracy", "switch_rate"]

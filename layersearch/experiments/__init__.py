"""Each method's end-to-end experiments: fit its file on prompts, benchmark it against plain and
Self-SD decoding, draw its figures (``layersearch <method> bench`` and friends).

* :mod:`.disco`         DISCO: collect rows, train the classifier, bench the lookahead rules
* :mod:`.knapspec`      KnapSpec: the dynamic selection vs fixed masks on long contexts
* :mod:`.knn` (``experiment``, ``workflow``, ``figures``)  KNN-SSD: build a router, bench mixed streams, figures
* :mod:`.steer` (``experiment``, ``workflow``)  SD²: train the steering, bench steered vs unsteered drafts
* :mod:`.swift`         SWIFT on the fly: the domain-switching stream experiment

They drive the decoder builder and the measurement harness, so they sit above both; the method
packages themselves hold only what a decoder needs and how its file is fitted.
"""

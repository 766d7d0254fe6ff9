"""Describe and assemble a decoder.

* :mod:`.spec`      :class:`~.spec.DecoderSpec`, the one description of a decoder (its JSON file; no torch)
* :mod:`.fragments` the pieces commands build specs from (``generate``'s, ``bench``'s and ``tune``'s items)
* :mod:`.sources`   mask sources: where the draft's skip mask comes from (fixed, uniform, KnapSpec, KNN, SWIFT)
* :mod:`.build`     a spec and a loaded model -> a ready decoder (reads and checks every file it names)
* :mod:`.api`       the Python API: ``layersearch.load_decoder`` and :class:`~.api.Decoder`

The builder is where the method packages meet the runtime: it is the one place that imports
their decode-time parts (controllers, lookahead files, steering), so neither the runtime nor a
method depends on another method.
"""

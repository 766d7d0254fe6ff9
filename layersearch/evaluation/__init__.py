"""Measure decoders: the one measurement harness and the benchmarks built on it.

* :mod:`.measure`   the harness: decode prompts with a decoder, time them, speedups and their intervals
* :mod:`.bench`     ``layersearch bench``: plain vs speculative decoding side by side
* :mod:`.specbench` Spec-Bench's answer files and per-group table (``bench``'s Spec-Bench run)
* :mod:`.transfer`  a mask found on one domain, measured on others
* :mod:`.plots`     the figures (studies' trials, bench tables, masks)

Each method's own experiments (fit, then bench against plain and Self-SD) are in
:mod:`layersearch.experiments`, one layer up.
"""

"""Small shared infrastructure every layer may use; it imports nothing else of layersearch.

* :mod:`.errors`    :class:`~.errors.LayersearchError`: bad input, said in one line
* :mod:`.checks`    value checks (ints, fractions, draft lengths) raising that error
* :mod:`.inputs`    opening and parsing input files safely
* :mod:`.outputs`   writing output files all or nothing
* :mod:`.jsonfile`  versioned JSON files
* :mod:`.modelfile` JSON files bound to a model's fingerprint
* :mod:`.progress`  progress lines on stderr
* :mod:`.extras`    optional dependencies: is it installed, and the pip line that installs it
"""

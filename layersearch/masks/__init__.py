"""Which sub-layers a draft skips.

* :mod:`.mask`    :class:`~.mask.SkipMask` (a skip mask, or a draft plan with int8 sub-layers) and its JSON file
* :mod:`.formats` the other mask formats read and written (SWIFT's, Self-SD's, index lists)
"""

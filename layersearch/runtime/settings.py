"""The defaults every draft setting comes from: the longest draft and the draft threshold
(:class:`~layersearch.runtime.draft_policy.DraftPolicy` holds the two as one value)."""

from __future__ import annotations


#: The longest draft by default: every default of ``max_draft`` (the spec's, the CLI's, the
#: benches') is this one value.
MAX_DRAFT = 8
#: The draft's top-1 probability below which a confidence rule stops, by default.
DRAFT_THRESHOLD = 0.8

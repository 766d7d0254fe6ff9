"""FR-Spec: the draft scores only the most frequent tokens of the vocabulary.

* :mod:`.vocab` the vocabulary subset: counted from prompts' continuations, its JSON file
* :mod:`.head`  :class:`~.head.DraftHeads`, the draft's LM head restricted to that subset

The runtime's drafters take any draft head (:class:`~layersearch.runtime.drafters.base.DraftHead`);
the decoder builder hands them this one, so the runtime never imports FR-Spec.
"""

"""Running the lossless suites captured as well as eagerly.

A suite takes the ``decode_path`` fixture (tests/conftest.py: "eager", then "captured"), builds its
decoders with ``compile=captured(path)`` and checks the path the run took with
:func:`assert_path`; its own assertions (the output equals plain ``generate``, or the sampled
law is exact) hold on both paths. The session's models compile with dynamo's ``eager``
backend (:func:`cheap_capture`): the same full-graph capture over the static cache and plan
views as inductor's, without its code generation, and compiled once per shape per session
since a model's decoders share its compiled forwards.
"""

from __future__ import annotations

from layersearch.runtime.backend import compile_with

from layersearch.runtime.backend import dynamo_compiler

#: The paths a lossless suite runs on.
PATHS = ("eager", "captured")
#: The dynamo backend of the suites' captured runs ("aot_eager" costs about twice as much).
BACKEND = "eager"


def cheap_capture(model):
    """``model``, its decoders' forwards compiled with :data:`BACKEND` (full graph, static shapes)."""
    compile_with(model, dynamo_compiler(BACKEND))
    return model


def captured(path: str) -> bool:
    """The ``compile`` argument of a decoder on ``path``."""
    assert path in PATHS, path
    return path == "captured"


def assert_path(result, path: str, blocked_by: str | None = None) -> None:
    """The run took ``path``; asked to run captured, a run that a part blocks (its reason
    names ``blocked_by``) runs eagerly and says why."""
    stats = result.stats
    if path == "eager":
        assert (stats.path, stats.path_reason) == ("eager", "")
    elif blocked_by is None:
        assert stats.path == "captured", stats.path_reason
    else:
        assert stats.path == "eager" and blocked_by in stats.path_reason, stats.path_reason

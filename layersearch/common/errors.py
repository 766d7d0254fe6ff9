"""The one exception type users see: a problem with their input, told in one line.

The CLI catches :class:`LayersearchError` and prints its message on stderr with a
non-zero exit, so every module raises it for bad input (a malformed file, an
unknown name, a mask for another model) instead of letting a traceback escape.

Below the command line a message names the API argument or spec field at fault
(``max_draft``, ``drafter.quant``, ``mask_source``), never a command-line flag; ``fields``
lists the names it speaks of, so the CLI can word them as its options.
"""

from __future__ import annotations


class LayersearchError(Exception):
    """A user-facing error: the message is one line that names the problem.

    ``fields``: the argument or spec-field names the message uses, word for word (the CLI
    shows each as the option that sets it)."""

    def __init__(self, message: str = "", *, fields: tuple[str, ...] | str = ()) -> None:
        super().__init__(message)
        self.fields: tuple[str, ...] = (fields,) if isinstance(fields, str) else tuple(fields)

    def __reduce__(self):
        return (_rebuild, (type(self), str(self), self.fields))


def _rebuild(cls: type, message: str, fields: tuple[str, ...]) -> LayersearchError:
    """Unpickle a :class:`LayersearchError` (a worker process's error keeps its fields)."""
    return cls(message, fields=fields)

"""The one exception type users see: a problem with their input, told in one line.

The CLI catches :class:`LayersearchError` and prints its message on stderr with a
non-zero exit, so every module raises it for bad input (a malformed file, an
unknown name, a mask for another model) instead of letting a traceback escape.
"""


class LayersearchError(Exception):
    """A user-facing error: the message is one line that names the problem."""

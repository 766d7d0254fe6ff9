"""A progress bar for long study runs: trials done, best value and elapsed time, on stderr; and
:func:`say`, one progress line (e.g. a forward compiling).

The bar is drawn with tqdm only when it is wanted and can be seen: not with ``quiet``, and
only when the stream is a terminal. Otherwise nothing is printed per trial (logs and pipes
stay clean); the command prints one summary line at the end either way.
"""

from __future__ import annotations

import sys
from typing import IO, Any


_OPEN: "set[TrialProgress]" = set()


def close_open_bars() -> None:
    """Finish every bar still drawn (before an error line, which must start a line of its own)."""
    for bar in list(_OPEN):
        bar.close()


class TrialProgress:
    """Per-trial progress of one run; use as a context manager and call :meth:`update` per trial."""

    def __init__(
        self, *, total: int | None = None, quiet: bool = False, stream: IO[str] | None = None, desc: str = "trials",
        unit: str = "trial",
    ) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.enabled = not quiet and _is_terminal(self.stream)
        self.total = total
        self.desc = desc
        self.unit = unit
        self.count = 0
        self._bar: Any = None

    def __enter__(self) -> "TrialProgress":
        if self.enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=self.desc, unit=self.unit, file=self.stream, dynamic_ncols=True)
            _OPEN.add(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def update(self, *, best: float | None = None, last: float | None = None, state: str | None = None,
               left: float | None = None) -> None:
        """One more trial finished: ``best`` so far, ``last`` trial's value, its ``state``, seconds ``left``."""
        self.count += 1
        if self._bar is None:
            return
        postfix = {}
        if best is not None:
            postfix["best"] = f"{best:.4g}"
        if last is not None:
            postfix["last"] = f"{last:.4g}"
        elif state and state != "COMPLETE":
            postfix["last"] = state.lower()
        if left is not None:
            postfix["left"] = f"{left:.0f}s"
        self._bar.set_postfix(postfix, refresh=False)
        self._bar.update(1)

    def close(self) -> None:
        """Remove nothing, just finish the bar line (idempotent)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        _OPEN.discard(self)


def say(message: str, stream: IO[str] | None = None) -> None:
    """One progress line on stderr (flushed; above a bar that is drawn): what long work does now."""
    stream = sys.stderr if stream is None else stream
    if _OPEN:
        from tqdm import tqdm

        tqdm.write(message, file=stream)
    else:
        print(message, file=stream, flush=True)


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a real file
        return False

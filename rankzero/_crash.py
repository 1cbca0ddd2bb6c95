"""Whether this process is ending on an uncaught exception (torch-free): the SDK's exit hooks read it so
that a rank that raised never waits on its peers (rankzero/_metrics.py, rankzero/_runtime.py)."""

from __future__ import annotations

import sys
from types import TracebackType

_crashed = False
_previous_excepthook = sys.excepthook


def crashed() -> bool:
    """True once an uncaught exception is ending this process (its exit hooks skip what could wait)."""
    return _crashed


def _note_crash(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    global _crashed
    if not issubclass(kind, (SystemExit, KeyboardInterrupt)):
        _crashed = True
    _previous_excepthook(kind, value, tb)


def watch_for_crash() -> None:
    """Chain sys.excepthook (once) so the exit hooks know the process ends on an uncaught exception:
    Python runs the excepthook (the traceback) before the atexit hooks."""
    global _previous_excepthook
    if sys.excepthook is _note_crash:
        return
    _previous_excepthook = sys.excepthook
    sys.excepthook = _note_crash


def forget() -> None:
    """Tests that reuse the process: no crash seen."""
    global _crashed
    _crashed = False

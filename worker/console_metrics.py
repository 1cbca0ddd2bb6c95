"""A script job's console → points: core/console_reader/job.py (the API replays a stored console with it too,
so it lives in core); kept here under the worker's name for its callers."""

from __future__ import annotations

from core.console_reader.job import (
    MAX_LINE_CHARS,
    MAX_SERIES,
    ConsoleMetrics,
    Point,
    UserPattern,
    compile_patterns,
    split_lines,
)

__all__ = ["MAX_LINE_CHARS", "MAX_SERIES", "ConsoleMetrics", "Point", "UserPattern", "compile_patterns", "split_lines"]

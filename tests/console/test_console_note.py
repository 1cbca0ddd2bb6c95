"""`rankzero show`'s console note (cli/console_note.py): the words for each summary the reader writes."""

from __future__ import annotations

import json

from cli.console_note import console_words


def test_recognised_series_are_named_with_a_line_they_came_from() -> None:
    summary = {"lines": 1204, "series": ["loss", "lr", "ppl"], "example": "| lr 20.00 | loss 7.12 | ppl 1234.56"}
    assert console_words(summary) == [
        "console: loss, lr, ppl from lines like `| lr 20.00 | loss 7.12 | ppl 1234.56` (1,204 lines read)"
    ]


def test_nothing_recognised_says_how_many_lines_and_suggests_a_pattern() -> None:
    suggestion = {"line": "0 0.9 done", "regex": r"^(?P<step>\d+)\s+(?P<value>[-+0-9.eE]+)\s+done$", "name": "metric"}
    words = console_words({"lines": 1204, "series": [], "suggestion": suggestion})
    assert words[0] == "console: no metrics recognised in 1,204 lines"
    assert words[1] == "  most frequent numeric line: `0 0.9 done`"
    assert words[2].startswith("  add it: POST /api/jobs/<id>/console-patterns {")
    assert json.loads(words[2].split("console-patterns ", 1)[1].split(" (the job page")[0]) == {
        "regex": suggestion["regex"],
        "name": "metric",
    }


def test_a_cap_is_said_and_an_empty_console_says_nothing() -> None:
    capped = {"lines": 10, "series": ["loss"], "example": "loss 1", "capped_streams": ["stdout"], "cap_bytes": 1 << 30}
    assert console_words(capped)[-1] == (
        "console: the reader stopped after the first 1024 MiB of stdout: later lines were not read"
    )
    assert console_words(None) == [] and console_words({"lines": 0}) == []

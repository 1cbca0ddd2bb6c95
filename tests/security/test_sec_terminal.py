"""Issue 19 item 7: a job's output cannot drive the operator's terminal (`rankzero logs`)."""

from __future__ import annotations

import io

import pytest

from cli.terminal import for_output, safe_for_terminal


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("loss 0.5\n\tstep 3\n", "loss 0.5\n\tstep 3\n"),  # ordinary output untouched
        ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\a"),  # retitle the window
        ("\x1b[2J\x1b[1A", "\\x1b[2J\\x1b[1A"),  # clear the screen, move up
        ("ok\rFAILED", "ok\\rFAILED"),  # overwrite a printed line
        ("line\r\n", "line\n"),  # a Windows line ending is just a line ending
        ("\x9b31m", "\\x9b31m"),  # the one-byte C1 CSI
        ("\x00\x7f", "\\x00\\x7f"),
        ("admin\u202e\u2066", "admin\\u202e\\u2066"),  # bidi overrides reorder what is shown
        ("naïve ✓ 日本", "naïve ✓ 日本"),  # printable Unicode stays
    ],
)
def test_safe_for_terminal(text: str, shown: str) -> None:
    assert safe_for_terminal(text) == shown


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_escaped_only_on_a_terminal_and_not_with_raw() -> None:
    evil = "\x1b[31mred"
    assert for_output(evil, raw=False, stream=_Tty()) == "\\x1b[31mred"
    assert for_output(evil, raw=True, stream=_Tty()) == evil  # --raw: as the job wrote it
    assert for_output(evil, raw=False, stream=io.StringIO()) == evil  # a file or a pipe: as is

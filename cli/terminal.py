"""Text from a job, made safe for the operator's terminal (`rankzero logs`, issue 19 item 7).

A job's output is the job's to choose: written raw to a terminal, escape sequences could retitle
the window, rewrite what was printed, hide lines, or (on some terminals) answer back into the
shell. On a terminal, `safe_for_terminal` shows every control character as a visible escape
(`\\x1b`, `\\r`, `\\u202e`); newlines and tabs stay. `--raw` (or output that is not a terminal: a
file, a pipe) keeps the bytes as they are, for `less -R` or tools.

Wiring (the `logs` command, cli/job_commands.py, owned by another engineer): pass each chunk through
`for_output(text, raw=raw, stream=sys.stdout)` before writing it.
"""

from __future__ import annotations

import re
from typing import TextIO

# C0 controls but \t and \n, DEL, C1 controls, and the Unicode bidirectional overrides/isolates
# (they reorder what is shown: "Trojan Source"), line/paragraph separators.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\r": "\\r", "\x1b": "\\x1b", "\x07": "\\a", "\x08": "\\b", "\x0b": "\\v", "\x0c": "\\f"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    return _NAMED.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


def safe_for_terminal(text: str) -> str:
    """`text` with every control character but newline and tab shown as a visible escape.

    A \\r\\n line ending stays a line ending (Windows output is common and harmless).
    """
    return _UNSAFE.sub(_escape, text.replace("\r\n", "\n"))


def for_output(text: str, *, raw: bool, stream: TextIO) -> str:
    """What to write to `stream`: escaped on a terminal unless `raw`; as is otherwise."""
    if raw:
        return text
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return safe_for_terminal(text) if tty else text

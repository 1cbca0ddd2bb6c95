"""The browser tests' waits work under the pages' Content-Security-Policy (script-src 'self', no 'unsafe-eval').

Playwright's `wait_for_function` evaluates a bare expression with `eval` again at every poll, from the page's
own animation frames, where the CSP refuses it: the page logs an EvalError and the test fails on a console
error it did not cause (seen in CI). A function is evaluated once, in Playwright's own call, and then called:
so every predicate is written as a function ("() => ...", "arg => ...").
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
FUNCTION = re.compile(r"^\s*(\(|[A-Za-z_$][\w$]*\s*=>|function\b|async\b)")


def _predicates() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "wait_for_function"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.append((str(path.relative_to(TESTS)), node.lineno, node.args[0].value))
    return found


def test_every_wait_for_function_predicate_is_a_function() -> None:
    predicates = _predicates()
    assert predicates, "no wait_for_function found: the scan looks in the wrong place"
    bare = [f"{path}:{line}: {src}" for path, line, src in predicates if not FUNCTION.match(src)]
    assert not bare, "write these as '() => ...' (see this module's docstring):\n" + "\n".join(bare)


def test_the_check_tells_a_function_from_a_bare_expression() -> None:
    cases = {
        "() => x": True,
        "h => x(h)": True,
        "(a, b) => a": True,
        "function () { return 1 }": True,
        "!document.querySelector('#a').hidden": False,
        "document.title === 'x'": False,
    }
    assert {src: bool(FUNCTION.match(src)) for src in cases} == cases

"""The spec's `console_metrics` (trainer/spec.py): validated at submit, refusals that name their field."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from trainer.spec import MAX_CONSOLE_PATTERNS, JobSpec
from worker.console_metrics import ConsoleMetrics, compile_patterns

CODE = "sha256:" + "a" * 64


def _errors(**body: Any) -> list[tuple[tuple[Any, ...], str]]:
    with pytest.raises(ValidationError) as info:
        JobSpec(**body)
    return [(e["loc"], e["msg"]) for e in info.value.errors()]


def _script(**console: Any) -> dict[str, Any]:
    return {"entrypoint": "train.py", "code": CODE, "console_metrics": console}


def test_a_pattern_with_named_groups_is_kept() -> None:
    spec = JobSpec(**_script(defaults=False, patterns=[{"regex": r"acc (?P<value>[0-9.]+)", "name": "acc"}]))
    assert spec.console_metrics is not None and not spec.console_metrics.defaults
    assert JobSpec.model_validate(spec.model_dump()) == spec  # round-trips as the worker reads spec.json


@pytest.mark.parametrize(
    ("pattern", "loc", "says"),
    [
        ({"regex": r"(?P<value>\d+) \1"}, "regex", "does not compile under RE2"),  # a backreference
        ({"regex": r"(?=loss)(?P<value>\d+)", "name": "x"}, "regex", "does not compile under RE2"),  # lookahead
        ({"regex": r"(?P<key>\w+)"}, "regex", "needs a named group `value`"),
        ({"regex": r"(?P<value>\d+)"}, "name", "needs a `name`"),
        ({"regex": "x" * 501, "name": "x"}, "regex", "at most 500 characters"),
        ({"regex": "(?P<value>[0-9", "name": "x"}, "regex", "does not compile"),
    ],
)
def test_a_bad_pattern_is_refused_naming_its_field(pattern: dict[str, str], loc: str, says: str) -> None:
    ((where, msg),) = _errors(**_script(patterns=[pattern]))
    assert where == ("console_metrics", "patterns", 0, loc) and says in msg
    assert not msg.startswith("Value error")


def test_too_many_patterns_are_refused() -> None:
    many = [{"regex": r"(?P<value>\d)", "name": f"m{i}"} for i in range(MAX_CONSOLE_PATTERNS + 1)]
    ((where, _),) = _errors(**_script(patterns=many))
    assert where == ("console_metrics", "patterns")


def test_a_nested_quantifier_runs_in_linear_time_under_re2() -> None:
    # Python's backtracking `re` takes exponential time on this line (no `x` to end the match); RE2 does not.
    patterns = compile_patterns([{"regex": r"^(?P<value>(\d+)+)x", "name": "n"}])
    assert ConsoleMetrics(defaults=False, patterns=patterns).feed("1" * 4000 + "\n") == []


def test_refusals_read_as_sentences_naming_their_field() -> None:
    assert _errors(entrypoint="train.py", code=CODE, epochs=3) == [
        (
            ("epochs",),
            "epochs only applies to the built-in trainer, not to an entrypoint script: remove it (your script "
            "reads its own arguments: put them in entrypoint).",
        )
    ]
    ((where, msg),) = _errors(entrypoint="train.py")
    assert where == ("code",) and msg.startswith("entrypoint needs code")
    ((where, msg),) = _errors(max_steps=3, console_metrics={})
    assert where == ("console_metrics",) and msg.startswith("console_metrics applies only to an entrypoint script")


def test_the_cli_shows_a_refusal_as_field_and_sentence() -> None:
    import httpx

    from cli.client import _detail

    detail = [
        {"loc": ["body", "resume_from"], "msg": "resume_from only applies to the built-in trainer."},
        {"loc": ["body"], "msg": "Value error, set epochs or max_steps (or both) so the run knows when to stop"},
    ]
    r = httpx.Response(422, json={"detail": detail})
    assert _detail(r).splitlines() == [
        "  resume_from: resume_from only applies to the built-in trainer.",
        "  set epochs or max_steps (or both) so the run knows when to stop",
    ]

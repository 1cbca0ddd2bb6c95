"""The one spec-text loader (trainer/spec_text.py): what it reads and what it refuses, and why."""

from __future__ import annotations

import pytest

from trainer.spec_text import MAX_SPEC_DEPTH, MAX_SPEC_TEXT_BYTES, SpecTextError, load_spec_text


@pytest.mark.parametrize(
    ("text", "filename", "expected"),
    [
        ("name: x\nmodel: {name: mlp, args: {hidden: [64, 64]}}\n", None,
         {"name": "x", "model": {"name": "mlp", "args": {"hidden": [64, 64]}}}),
        ("max_steps: 3\n", "spec.yaml", {"max_steps": 3}),
        ("max_steps: 3\n", "spec.YML", {"max_steps": 3}),
        ('{"max_steps": 3, "lr": 0.1}', "spec.json", {"max_steps": 3, "lr": 0.1}),
        ('{"max_steps": 3}', None, {"max_steps": 3}),  # YAML reads JSON too
        ('{"max_steps": 3}', "spec.txt", {"max_steps": 3}),
        (b"name: caf\xc3\xa9\n", None, {"name": "café"}),
        ("name: x\nwhen: 2024-01-01\n", None, {"name": "x", "when": "2024-01-01"}),  # a date becomes text
        ("1: one\n", None, {"1": "one"}),  # JSON keys are strings
    ],
    ids=["yaml", "yaml-suffix", "yml-upper", "json", "json-as-yaml", "other-suffix", "bytes", "date", "int-key"],
)  # fmt: skip
def test_reads_yaml_and_json_into_plain_json(text, filename, expected) -> None:
    assert load_spec_text(text, filename=filename) == expected


DEEP = MAX_SPEC_DEPTH + 1


@pytest.mark.parametrize(
    ("text", "filename", "says"),
    [
        ("a: &x [1, 2]\nb: *x\n", None, "anchors"),
        ("a: *nope\n", None, "aliases"),
        ("a: &x 1\n", None, "anchors"),
        ("a: " + "[" * DEEP + "]" * DEEP + "\n", None, "nested deeper"),
        ("".join(f"{'  ' * i}k{i}:\n" for i in range(DEEP)) + "  " * DEEP + "v: 1\n", None, "nested deeper"),
        ('{"a": ' + "[" * DEEP + "]" * DEEP + "}", "s.json", "nested deeper"),
        ('{"a": ' + "[" * 5000 + "]" * 5000 + "}", "s.json", "nested deeper"),  # past json's recursion limit
        ("a: " + "x" * MAX_SPEC_TEXT_BYTES, None, "too large"),
        ("[1, 2]\n", None, "mapping"),
        ("", None, "not nothing"),
        ("a: [1\n", None, "line 2"),
        ('{"a": 1,}', "s.json", "not valid JSON"),
        ("a: 2024-13-45\n", None, "not valid YAML"),
        ("a: 1" + "0" * 5000 + "\n", None, "not valid YAML"),
        ("2024-01-01: day\n", None, "JSON"),
        (b"\xff\xfe", None, "UTF-8"),
    ],
    ids=["alias", "unknown-alias", "anchor", "flow-deep", "block-deep", "json-deep", "json-very-deep", "size",
         "list", "empty", "syntax", "json-syntax", "bad-date", "huge-int", "date-key", "not-utf8"],
)  # fmt: skip
def test_refuses_with_what_to_fix(text, filename, says) -> None:
    with pytest.raises(SpecTextError, match=says):
        load_spec_text(text, filename=filename)


def test_spec_text_error_is_a_value_error() -> None:
    """Callers that caught ValueError from the old parsers keep working."""
    with pytest.raises(ValueError):
        load_spec_text("- 1\n")

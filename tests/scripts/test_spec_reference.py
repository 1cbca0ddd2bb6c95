"""The spec reference in docs/trainer.md is the model's (trainer/spec_doc.py); regenerate it with
`python -m trainer.spec_doc --write docs/trainer.md`."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer import spec_doc

DOC = Path(__file__).resolve().parents[2] / "docs" / "trainer.md"


def test_the_documented_spec_reference_matches_the_model() -> None:
    doc = DOC.read_text(encoding="utf-8")
    start, end = spec_doc.embedded_table(doc)
    documented = "\n".join(doc.splitlines()[start:end])
    assert documented == spec_doc.markdown(), "run: python -m trainer.spec_doc --write docs/trainer.md"
    assert "| `compile` |" in documented and "| `entrypoint` |" in documented


def test_writing_replaces_only_the_table() -> None:
    doc = f"# title\n\nbefore\n\n{spec_doc.HEAD}\n|---|\n| `old` | x |\n\nafter\n"
    assert (
        spec_doc.with_table(doc, f"{spec_doc.HEAD}\n| new |")
        == f"# title\n\nbefore\n\n{spec_doc.HEAD}\n| new |\n\nafter\n"
    )
    with pytest.raises(ValueError, match="no spec reference table"):
        spec_doc.embedded_table("no table here")

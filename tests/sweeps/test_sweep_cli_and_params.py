"""`submit --set/--name` and the params block (substitution, refusals, `rankzero.params()`), and the CLI's
trials table: pure, no service."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import ValidationError
from rich.console import Console

from cli.spec_input import with_overrides
from cli.sweep_commands import trials_table
from trainer.spec import JobSpec

CODE = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("sets", "name", "expected"),
    [
        (["optimizer.lr=0.01"], None, {"optimizer": {"name": "sgd", "lr": 0.01}, "epochs": 1}),
        (["epochs=3", "compile=true"], "run-3",
         {"optimizer": {"name": "sgd"}, "epochs": 3, "compile": True, "name": "run-3"}),
        (["params.lr=0.1", "params.tag=big one"], None,
         {"optimizer": {"name": "sgd"}, "epochs": 1, "params": {"lr": 0.1, "tag": "big one"}}),
        (["optimizer.name=adamw"], None, {"optimizer": {"name": "adamw"}, "epochs": 1}),
    ],
)  # fmt: skip
def test_set_writes_dotted_paths_with_yaml_scalars(sets: list[str], name: str | None, expected: dict[str, Any]) -> None:
    assert with_overrides({"optimizer": {"name": "sgd"}, "epochs": 1}, sets, name) == expected


@pytest.mark.parametrize("bad", ["optimizer.lr", "=3", "a b=1", "../x=1"])
def test_a_malformed_set_is_refused(bad: str) -> None:
    with pytest.raises(typer.Exit):
        with_overrides({}, [bad], None)


def test_a_bad_name_is_refused() -> None:
    with pytest.raises(typer.Exit):
        with_overrides({}, [], "no spaces allowed")


def test_params_are_substituted_as_one_word_each() -> None:
    spec = JobSpec.model_validate({"code": CODE, "entrypoint": "train.py --lr ${params.lr} --tag ${params.tag}",
                                   "params": {"lr": 0.01, "tag": "a b", "flag": True}})  # fmt: skip
    assert spec.entrypoint == "train.py --lr 0.01 --tag 'a b'"
    assert spec.parsed_entrypoint().args == ("--lr", "0.01", "--tag", "a b")  # type: ignore[union-attr]
    again = JobSpec.model_validate(spec.model_dump(mode="json"))  # a stored spec validates again unchanged
    assert again.entrypoint == spec.entrypoint and again.params == spec.params


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"entrypoint": "train.py --lr ${params.lx}", "params": {"lr": 0.1}}, "entrypoint", "params has no 'lx'"),
        ({"entrypoint": "train.py", "params": {"bad name": 1}}, "params", "is not allowed"),
        ({"entrypoint": "train.py", "params": {"x": float("nan")}}, "params", ""),
        ({"entrypoint": "train.py", "params": {f"p{i}": i for i in range(65)}}, "params", "at most 64"),
        ({"entrypoint": "train.py", "params": {"x": "y" * 201}}, "params", "at most 200"),
    ],
)
def test_bad_params_are_refused_naming_the_field(body: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate({"code": CODE, **body})
    first = caught.value.errors()[0]
    assert first["loc"][0] == field and words in str(caught.value)


def test_the_sdk_reads_the_params_the_worker_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rankzero

    monkeypatch.delenv("RANKZERO_RUN_DIR", raising=False)
    assert rankzero.params(local={"lr": 0.5}) == {"lr": 0.5}  # by hand: the script's own defaults
    (tmp_path / "spec.json").write_text(json.dumps({"params": {"lr": 0.01, "opt": "adamw"}}))
    monkeypatch.setenv("RANKZERO_RUN_DIR", str(tmp_path))
    assert rankzero.params(local={"lr": 0.5}) == {"lr": 0.01, "opt": "adamw"}


def test_the_trials_table_has_a_column_per_parameter_and_marks_the_best() -> None:
    detail = {
        "parameters": ["optimizer.lr", "batch_size"],
        "trials": [
            {"number": 1, "job_id": 8, "status": "succeeded", "params": {"optimizer.lr": 0.03, "batch_size": 16},
             "final": 0.21, "best": 0.2, "step": 12, "is_best": True},
            {"number": 0, "job_id": 7, "status": "pruned", "params": {"optimizer.lr": 0.3, "batch_size": 32},
             "final": 1.5, "best": 1.4, "step": 8, "is_best": False},
        ],
    }  # fmt: skip
    console = Console(width=160, record=True)
    console.print(trials_table(detail))
    lines = console.export_text().splitlines()
    assert "optimizer.lr" in lines[1] and "batch_size" in lines[1] and "final" in lines[1]
    body = [line for line in lines if "succeeded" in line or "pruned" in line]  # the plain header-rule style
    assert "★" in body[0] and "0.03" in body[0] and "pruned" in body[1] and "★" not in body[1]


def test_submit_reads_the_spec_from_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    from cli.spec_input import load_spec

    stdin = io.TextIOWrapper(io.BytesIO(b"name: from-stdin\nmax_steps: 5\n"))
    monkeypatch.setattr(sys, "stdin", stdin)
    assert load_spec(Path("-")) == {"name": "from-stdin", "max_steps": 5}

"""The CLI's pure parts, no server: the spec file goes through the one hardened spec-text loader, job states
come from core/job_state.py, and a placement is shown through the one placement reader."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from cli import views
from cli.job_commands import _load_spec
from core.job_state import TERMINAL

ELASTIC = {
    "nodes": [{"host": "host-a", "node_rank": 0, "gpus": ["0", "1"], "slots": 0, "address": "10.0.0.1"}],
    "nproc": 2,
    "accumulation_steps": 4,
}


def test_finished_states_are_core_job_states() -> None:
    assert views.finished_states() == {s.value for s in TERMINAL} == {"succeeded", "failed", "cancelled"}


@pytest.mark.parametrize(
    ("job", "rows"),
    [
        ({"status": "queued", "pending_reason": "needs 4 GPUs", "placement": None}, [("waiting", "needs 4 GPUs")]),
        (
            {"status": "running", "spec": {"nproc": 4}, "placement": ELASTIC, "priority": 5},
            [
                ("hosts", "host-a (GPU 0,1)"),
                ("elastic", "running on 2 of 4 ranks (accumulation ×4)"),
                ("priority", "5"),
            ],
        ),
        (  # two CPU nodes at full size, written without addresses (an older row)
            {
                "status": "running",
                "spec": {"nproc": 1},
                "host_losses": 1,
                "placement": {
                    "nodes": [{"host": "a", "node_rank": 0, "slots": 1}, {"host": "b", "node_rank": 1, "slots": 1}],
                    "nproc": 1,
                    "accumulation_steps": 1,
                },
            },
            [("hosts", "a, b"), ("host losses", "1")],
        ),
        ({"status": "running", "placement": {"nodes": "damaged"}}, []),  # shown without it
    ],
)
def test_placement_rows(job: dict, rows: list[tuple[str, str]]) -> None:
    assert views.placement_rows(job) == rows


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("spec.yaml", "base: &b {lr: 1}\nother: *b\n", "anchors"),
        ("spec.yaml", "- a\n- b\n", "one mapping"),
        ("spec.json", "{name: x}", "not valid JSON"),
        ("spec.yaml", "a: [" * 40 + "]" * 40, "deeper"),
    ],
)
def test_a_bad_spec_file_fails_saying_what_to_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, says: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(typer.Exit) as exited:
        _load_spec(path)
    assert exited.value.exit_code == 1
    message = capsys.readouterr().err
    assert says in message and str(path) in message.replace("\n", "")


def test_a_spec_file_reads_as_its_mapping(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text("name: digits\nmax_steps: 5\nargs: {hidden: [64, 32]}\n")
    assert _load_spec(tmp_path / "spec.yaml") == {"name": "digits", "max_steps": 5, "args": {"hidden": [64, 32]}}
    with pytest.raises(typer.Exit):
        _load_spec(tmp_path / "missing.yaml")


def test_hosts_table_shows_free_capacity_state_and_jobs() -> None:
    from rich.console import Console

    hosts = [
        {"name": "gpu-a", "gpus": ["0", "1"], "free_gpus": ["1"], "cpu_slots": 8, "free_slots": 8, "draining": False,
         "alive": True, "jobs": [{"id": 7, "name": "ddp", "node_rank": 1}], "last_seen": "2026-01-01T00:00:00Z"},
        {"name": "cpu-b", "gpus": [], "free_gpus": [], "cpu_slots": 4, "free_slots": 3, "draining": True,
         "alive": True, "jobs": [], "last_seen": "2026-01-01T00:00:00Z"},
    ]  # fmt: skip
    console = Console(width=80, record=True)
    console.print(views.hosts_table(hosts))
    out = console.export_text()
    assert "1/2 GPUs" in out and "7 ddp (node 1)" in out
    assert "3/4 slots" in out and "draining" in out
    assert "last seen" in out.splitlines()[1]  # the header, under a blank line

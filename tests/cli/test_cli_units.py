"""The CLI's pure parts, no server: the spec file goes through the one hardened spec-text loader, job states
come from core/job_state.py, and a placement is shown through the one placement reader."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from cli import views
from cli.spec_input import load_spec
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
        load_spec(path)
    assert exited.value.exit_code == 1
    message = capsys.readouterr().err
    assert says in message and str(path) in message.replace("\n", "")


def test_a_spec_file_reads_as_its_mapping(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text("name: digits\nmax_steps: 5\nargs: {hidden: [64, 32]}\n")
    assert load_spec(tmp_path / "spec.yaml") == {"name": "digits", "max_steps": 5, "args": {"hidden": [64, 32]}}
    with pytest.raises(typer.Exit):
        load_spec(tmp_path / "missing.yaml")


def test_hosts_table_shows_free_capacity_state_and_jobs() -> None:
    from rich.console import Console

    hosts = [
        {"name": "gpu-a", "gpus": ["0", "1"], "free_gpus": ["1"], "cpu_slots": 8, "free_slots": 8, "draining": False,
         "alive": True, "jobs": [{"id": 7, "name": "ddp", "node_rank": 1}], "last_seen": "2026-01-01T00:00:00Z"},
        {"name": "cpu-b", "gpus": [], "free_gpus": [], "cpu_slots": 4, "free_slots": 3, "draining": True,
         "alive": True, "jobs": [], "last_seen": "2026-01-01T00:00:00Z", "storage": "store"},
    ]  # fmt: skip
    console = Console(width=100, record=True)
    console.print(views.hosts_table(hosts, {"kind": "s3", "where": "s3://b/p"}))
    out = console.export_text()
    assert "1/2 GPUs" in out and "7 ddp (node 1)" in out
    assert "3/4 slots" in out and "draining" in out
    assert "API store (S3)" in out  # each host's storage: cpu-b uploads to the API's S3 store
    assert "last seen" in out.splitlines()[1]  # the header, under a blank line


def _printed(table: object, width: int = 80) -> str:
    from rich.console import Console

    console = Console(width=width, record=True)
    console.print(table)
    return console.export_text()


def test_the_jobs_table_at_80_columns_cuts_names_never_numbers() -> None:
    """At 80 columns the step, loss and created columns were cut ('50/…', '0.3…', '11-28 10:…')."""
    jobs = [
        {"id": 5, "name": "digits-ddp-resume", "status": "succeeded", "strategy": "DDP 2 × acc 2", "step": 60,
         "total_steps": 60, "latest_loss": 0.3581, "created_at": "2026-11-28T10:16:00+00:00", "spec": {}},
        {"id": 1, "name": "digits-ddp", "status": "running", "strategy": "script", "step": 1234,
         "total_steps": 100_000, "latest_loss": 0.3581, "created_at": "2026-11-28T10:16:00+00:00", "spec": {}},
    ]  # fmt: skip
    out = _printed(views.jobs_table(jobs, 80))
    assert all(len(line) <= 80 for line in out.splitlines()), out
    for whole in ("60/60", "1,234/100,000", "0.3581", views.local_time(jobs[0]["created_at"], short=True)):
        assert whole in out, out
    assert "digits-ddp" in out, out


@pytest.mark.parametrize(
    ("room", "first", "second", "widths"),
    [(40, 20, 12, (20, 12)), (20, 20, 12, (14, 6)), (6, 20, 12, (4, 4))],
)
def test_give_way_shares_the_room_name_first(room: int, first: int, second: int, widths: tuple[int, int]) -> None:
    assert views.give_way(room, first, second) == widths


def _summary(name: str, step: int, low: float, high: float) -> dict:
    return {"name": name, "points": 5, "step": step, "latest": low, "min": low, "min_step": step,
            "max": high, "max_step": step}  # fmt: skip


def test_metrics_tables_keep_series_names_and_show_system_samples_at_clock_times() -> None:
    """Before, the one table ran ~125 columns: at 80 the series names vanished ('po…' headed the first column)
    and sys/… samples showed their unix-ms keys as steps (1,795,860,842,115)."""
    at_ms = 1_795_860_842_115
    summaries = [_summary("throughput/samples_per_s", 50, 6662.6, 15427.2), _summary("train/loss", 50, 0.5156, 2.255),
                 _summary("sys/rank0/cpu_percent", at_ms, 17.4, 31.5)]  # fmt: skip
    own, system = views.metrics_tables(summaries)
    out = _printed(own) + _printed(system)
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "throughput/samples_per_s" in out and "train/loss" in out and "sys/rank0/cpu_percent" in out, out
    assert "0.5156 @50" in out and "1,795,860" not in out, out
    assert views.series_step("sys/rank0/cpu_percent", at_ms) in out
    assert views.series_step("sys/x", at_ms).count(":") == 2 and views.series_step("train/loss", 50) == "50"
    assert len(views.metrics_tables([summaries[1]])) == 1


@pytest.mark.parametrize(
    ("detail", "said"),
    [
        ("no job 999: list jobs with GET /api/jobs", "no job 999: list jobs with `rankzero jobs`"),
        ("no checkpoint 4", "no checkpoint 4"),
        (
            "no user 'nobody': list users with GET /api/users (admin)",
            "no user 'nobody': list users with `rankzero users list` (admin)",
        ),
        ("no token 999: GET /api/users/{name}/tokens", "no token 999: list a user's with `rankzero tokens list USER`"),
        ("no host 'x': list hosts with GET /api/hosts", "no host 'x': list hosts with `rankzero hosts`"),
    ],
)
def test_the_apis_route_advice_reads_as_a_command(detail: str, said: str) -> None:
    """`rankzero logs 999` said 'list jobs with GET /api/jobs' to someone at the CLI."""
    from cli.client import in_cli_words

    assert in_cli_words(detail) == said


def test_a_quota_left_unset_reads_default() -> None:
    """`rankzero users set bob --max-queued 1` printed 'GPUs None' for the quota it left at the default."""
    from cli.user_commands import quota_cells

    assert quota_cells({"max_gpus": None, "max_cpu_slots": 1, "max_queued": 0}) == ["default", "1", "0"]


@pytest.mark.parametrize(
    ("detail", "said"),
    [("  bob has 1 of 1 jobs queued (quota)", "bob has 1 of 1 jobs queued (quota)"),
     ("  a: one\n  b: two", "\n  a: one\n  b: two"), ("plain", "plain")],
)  # fmt: skip
def test_a_refusals_one_problem_reads_on_the_errors_line(detail: str, said: str) -> None:
    """A 429's list detail printed as 'error: 429 from POST /api/jobs:   bob has …' (its list indent)."""
    from cli.client import one_problem

    assert one_problem(detail) == said


def test_a_sweeps_trials_table_shows_whole_parameter_names_at_80_columns() -> None:
    """The grid-boxed trials table cut `optimizer.lr` to 'optimizer…' at 80 columns."""
    from cli.sweep_commands import trials_table

    trial = {"number": 0, "job_id": 12, "status": "succeeded", "is_best": True, "final": 2.277, "best": 2.277,
             "step": 30, "params": {"optimizer.lr": 0.01072, "batch_size": 16}}  # fmt: skip
    out = _printed(trials_table({"parameters": ["optimizer.lr", "batch_size"], "trials": [trial]}))
    assert "optimizer.lr" in out and "batch_size" in out and "0.01072" in out, out


@pytest.mark.parametrize(
    ("token_from", "says"),
    [("profile default", "`rankzero login http://h:1` with it"),
     ("--token / RANKZERO_API_TOKEN", "`rankzero up` prints"), (None, "RANKZERO_DATA_DIR")],
)  # fmt: skip
def test_a_rejected_token_says_what_to_do_where_it_came_from(token_from: str | None, says: str) -> None:
    """A member whose saved token was revoked was told to set RANKZERO_DATA_DIR to the server's data dir."""
    from cli.client import rejected_token

    said = rejected_token("http://h:1", token_from)
    assert says in said and "revoked" in said
    assert ("RANKZERO_DATA_DIR" in said) == (token_from is None or not token_from.startswith("profile"))


def test_a_refused_resume_of_anothers_job_points_to_clone() -> None:
    """`rankzero resume 1` by a member who does not own job 1 ended at the 403 with nothing to do instead."""
    from cli.job_commands import resume_refused

    refused = "403 from POST /api/jobs: resuming job 1 needs role admin (or being its owner); alice is member"
    assert "`rankzero clone 1` trains a copy of it from the start as your own job" in resume_refused(refused, 1)
    assert (
        resume_refused("the server refused the request:\n  max_steps: …", 1)
        == "the server refused the request:\n  max_steps: …"
    )


@pytest.mark.parametrize(
    ("loc", "hint"),
    [(["maxsteps"], "did you mean max_steps?"), (["optimizer", "lrr"], "did you mean lr?"),
     (["checkpoint", "every_step"], "did you mean every_steps?"),
     (["environment", "packges"], "did you mean packages?"),
     (["zzz"], "the spec has no field 'zzz': (`rankzero schema`"), (["nope", "x"], "no field 'x': (")],
)  # fmt: skip
def test_a_misspelt_spec_field_gets_the_nearest_name(loc: list, hint: str) -> None:
    """`maxsteps: 10` was refused as 'Extra inputs are not permitted', naming nothing to use instead."""
    from cli.client import _problem

    said = _problem({"type": "extra_forbidden", "loc": ["body", *loc], "msg": "Extra inputs are not permitted"},
                    spec_hints=True)  # fmt: skip
    assert hint in said and said.startswith(f"  {'.'.join(loc)}: "), said


@pytest.mark.parametrize(
    ("running_url", "port_is_free", "says"),
    [("http://127.0.0.1:18437", True, "already running for /d at http://127.0.0.1:18437"),
     ("http://127.0.0.1:18437", False, "already running"), (None, False, "port 18437 is in use"), (None, True, None)],
)  # fmt: skip
def test_a_second_up_is_refused_before_it_touches_anything(running_url, port_is_free, says) -> None:
    """A second `rankzero up` of a running data dir printed "rankzero is up", failed to bind, and removed the
    running instance's server.json on its way out: the CLI then looked for the API on port 8000."""
    from cli.service_commands import why_not_start

    said = why_not_start("/d", running_url, 18437, port_is_free)
    assert (said is None) if says is None else (said is not None and says in said), said


def test_port_free_sees_a_listening_socket() -> None:
    import socket

    from cli.service_commands import port_free

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert not port_free("127.0.0.1", port)
    assert port_free("127.0.0.1", port)


def test_a_recorded_server_that_does_not_answer_is_not_running() -> None:
    """server.json's pid may be another process's after a reboot: only an API that answers counts."""
    from cli.service_commands import answers
    from tests.support.ports import free_port

    assert not answers(f"http://127.0.0.1:{free_port()}")


def test_the_banners_cli_line_names_the_url_too() -> None:
    """`up` printed only the token: a shell without the same RANKZERO_DATA_DIR looked for port 8000."""
    from cli.service_commands import cli_exports

    assert (
        cli_exports("http://127.0.0.1:18437", "t0k")
        == "export RANKZERO_URL=http://127.0.0.1:18437 RANKZERO_API_TOKEN=t0k"
    )


LINES = [{"rank": 0, "stream": "stdout", "text": "step 10"}, {"rank": 1, "stream": "stderr", "text": "warn"},
         {"rank": 1, "stream": "stdout", "text": "hi"}]  # fmt: skip


@pytest.mark.parametrize(("rank", "texts"), [(None, ["step 10", "warn", "hi"]), (1, ["warn", "hi"]), (0, ["step 10"])])
def test_logs_of_one_rank_keep_both_its_streams(rank: int | None, texts: list[str]) -> None:
    """`rankzero logs 1 --rank 0` showed rank 0's stderr only (its help: "--stream … default: both, merged"),
    so the built-in trainer's progress lines, on stdout, never showed."""
    assert [ln["text"] for ln in views.lines_of_rank(LINES, rank)] == texts


@pytest.mark.parametrize(
    ("rank", "ranks", "more", "says"),
    [(None, [0, 1], False, None), (1, [0, 1], False, None), (1, [], False, None),
     (5, [0, 1], False, "job 3 has no rank 5: its ranks are 0, 1"), (70, list(range(64)), True, "--stream stdout")],
)  # fmt: skip
def test_a_rank_the_job_lacks_is_named(rank: int | None, ranks: list[int], more: bool, says: str | None) -> None:
    """`rankzero logs 1 --rank 5` of a 2-rank job printed '(empty) rank 5 stderr' and exited 0."""
    said = views.rank_not_shown(rank, ranks, more, 3)
    assert (said is None) if says is None else (said is not None and says in said), said


@pytest.mark.parametrize(
    ("job", "said", "note"),
    [({"status": "queued", "pending_reason": "quota: 1 of 1 CPU slots"}, None, "quota: 1 of 1 CPU slots"),
     ({"status": "queued", "pending_reason": "quota: x"}, "quota: x", None),
     ({"status": "queued", "pending_reason": None}, None, None),
     ({"status": "running", "pending_reason": "stale"}, None, None)],
)  # fmt: skip
def test_follow_says_once_why_a_queued_job_waits(job: dict, said: str | None, note: str | None) -> None:
    """`rankzero follow` of a job held by its owner's quota showed a bar at 'queued' and nothing else."""
    from cli.follow import waiting_note

    assert waiting_note(job, said) == note


EST = {"position": 2, "start_in_s": 250.0, "start_at": None, "why": "when job 12 ends"}


@pytest.mark.parametrize(
    ("job", "said", "note"),
    [({"status": "queued", "start_estimate": EST}, None, "#2 in its pool, starts in ~4:10 (when job 12 ends)"),
     ({"status": "queued", "start_estimate": {**EST, "start_in_s": 249.5}}, (2, "when job 12 ends"), None),
     ({"status": "queued", "start_estimate": {**EST, "position": 1}}, (2, "when job 12 ends"),
      "#1 in its pool, starts in ~4:10 (when job 12 ends)"),
     ({"status": "queued", "start_estimate": {**EST, "start_in_s": None, "why": "after job 9"}},
      (2, "when job 12 ends"), "#2 in its pool, start not known (after job 9)"),
     ({"status": "queued", "start_estimate": None}, None, None),
     ({"status": "running", "start_estimate": EST}, None, None)],
)  # fmt: skip
def test_follow_says_a_queued_jobs_place_when_the_queue_moves(job: dict, said: tuple | None, note: str | None) -> None:
    """Issue 38: `rankzero follow` of a queued job said nothing of when it would start (`show` did); a line is
    printed when its place or what it waits on changes, not as the countdown ticks, in `show`'s words."""
    from cli.follow import queue_note

    assert queue_note(job, said) == note
    if note is not None:
        assert note == views.queue_place(job["start_estimate"])  # the words `show` prints, not a copy

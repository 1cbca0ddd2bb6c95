"""The sandbox's pure parts: what bwrap is told (worker/sandbox.py `bwrap_args`) and how the worker's
cgroup is read (worker/sandbox_cgroup.py), table-driven, no processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker import sandbox, sandbox_cgroup

SYSTEM = (("/usr", None), ("/bin", "usr/bin"), ("/etc", None))


def _view(**fields) -> sandbox.View:
    base = {"run_dir": Path("/srv/rz/runs/job_1"), "cwd": Path("/srv/rz/runs/job_1"), "system": SYSTEM}
    return sandbox.View(**{**base, **fields})


def _pairs(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def test_namespaces_and_capabilities() -> None:
    one = sandbox.bwrap_args(_view())
    for flag in ("--as-pid-1", "--unshare-pid", "--unshare-ipc", "--unshare-net"):
        assert flag in one
    assert _pairs(one, "--cap-drop") == ["ALL"] and "--unshare-user" not in one
    assert "--die-with-parent" not in one  # the worker's death must reach the ranks as one SIGTERM, not SIGKILL
    several = sandbox.bwrap_args(_view(host_network=True, as_root=False))
    assert "--unshare-net" not in several and "--unshare-user" in several


@pytest.mark.parametrize(
    ("hidden", "runtime", "masked"),
    [
        (Path("/srv/rz"), (Path("/srv"),), True),  # the data dir inside a read-only bind: masked
        (Path("/root/.rankzero"), (Path("/work/main"),), False),  # never shown: nothing to mask
        (Path("/usr/local/rz"), (), True),  # under a system dir
    ],
)
def test_hidden_dirs_are_masked_where_a_bind_would_show_them(hidden: Path, runtime: tuple, masked: bool) -> None:
    args = sandbox.bwrap_args(_view(hidden=(hidden,), runtime_dirs=runtime))
    assert (str(hidden) in _pairs(args, "--tmpfs")) is masked


def test_the_jobs_own_dirs_come_after_the_masks() -> None:
    code = Path("/srv/rz/bundles/" + "a" * 64)
    args = sandbox.bwrap_args(
        _view(hidden=(Path("/srv/rz"),), runtime_dirs=(Path("/srv"),), code_dir=code, datasets_dir=Path("/srv/rz/ds"))
    )
    mask = args.index("/srv/rz", args.index("--tmpfs", args.index("/tmp")))
    assert args.index(str(code)) > mask and args.index("/srv/rz/runs/job_1") > mask
    assert _pairs(args, "--ro-bind").count(str(code)) == 1  # its bundle: read-only
    assert "/srv/rz/runs/job_1" in _pairs(args, "--bind")
    assert "/srv/rz/ds" in _pairs(args, "--ro-bind") and "/srv/rz/ds" not in _pairs(args, "--bind")  # data: read-only
    assert _pairs(args, "--symlink") == ["usr/bin"] and args[-2:] == ["--chdir", "/srv/rz/runs/job_1"]


CGROUP_V1 = "12:pids:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n"
CGROUP_V2 = "0::/system.slice/rankzero.service\n"


@pytest.mark.parametrize(
    ("text", "controller", "path"),
    [
        (CGROUP_V1, "memory", "/docker/abc"),
        (CGROUP_V1, "pids", "/docker/abc"),
        (CGROUP_V1, None, "/"),
        (CGROUP_V2, None, "/system.slice/rankzero.service"),
        (CGROUP_V2, "memory", None),
    ],
)
def test_own_cgroup_path(text: str, controller: str | None, path: str | None) -> None:
    assert sandbox_cgroup.own_path(controller, text) == path


def test_a_v1_attempt_cgroup_gets_the_limits(tmp_path: Path) -> None:
    layout = sandbox_cgroup.Layout(1, (tmp_path / "memory", tmp_path / "pids"))
    for base in layout.bases:
        base.mkdir()
    cg = sandbox_cgroup.create(layout, "1-2-abc", 1024, 500)
    memory, pids = cg.dirs
    assert (memory / "memory.limit_in_bytes").read_text() == str(1024 * 2**20)
    assert (pids / "pids.max").read_text() == "500"
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert cg.oom_kills() == 2


def test_no_sandbox_off_warning_when_on_and_a_warning_when_off() -> None:
    assert sandbox.check_host("off") == sandbox.NOT_ISOLATED
    assert "RANKZERO_SANDBOX=off" in sandbox.NOT_ISOLATED and "RANKZERO_SANDBOX=off" in sandbox.HOW_TO_ENABLE


@pytest.mark.parametrize(
    ("data", "network", "shared"),
    [
        ({"name": "digits"}, "isolated", False),
        # the worker downloads before the ranks start (trainer/data/prefetch.py): the ranks need no network
        ({"name": "mnist", "args": {"root": "mnist", "download": True}}, "isolated", False),
        ({"name": "mnist", "args": {"download": False}}, "isolated", False),
        ({"name": "mnist", "args": {"download": "yes"}}, "isolated", False),
        ({"name": "digits"}, "host", True),
    ],
)
def test_which_single_node_jobs_share_the_hosts_network(data: dict, network: str, shared: bool) -> None:
    from types import SimpleNamespace

    from worker.launch_command import needs_network

    assert needs_network({"data": data}, SimpleNamespace(sandbox_network=network)) is shared


def test_the_checkpoint_it_resumes_from_is_its_one_read_only_file_of_another_run() -> None:
    other = Path("/srv/rz/runs/job_7/checkpoints/step_00000010.pt")
    args = sandbox.bwrap_args(_view(hidden=(Path("/srv/rz/runs"),), runtime_dirs=(Path("/srv"),), inputs=(other,)))
    assert str(other) in _pairs(args, "--ro-bind") and str(other) not in _pairs(args, "--bind")
    assert args.index(str(other)) > args.index("/srv/rz/runs")  # shown through the runs dir's mask


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        (None, False),
        ("job_1/checkpoints/step_00000010.pt", True),  # relative to the runs dir
        ("{runs}/job_1/checkpoints/step_00000010.pt", True),  # absolute, inside
        ("job_1/checkpoints/step_00000099.pt", False),  # missing: the trainer says so
        ("../outside.pt", False),  # outside the runs dir: never shown
        ("{runs}", False),
    ],
)
def test_which_resume_from_is_shown(tmp_path: Path, given: str | None, shown: bool) -> None:
    from types import SimpleNamespace

    from worker.launch_command import resume_input

    runs = tmp_path / "runs"
    (runs / "job_1" / "checkpoints").mkdir(parents=True)
    (runs / "job_1" / "checkpoints" / "step_00000010.pt").write_bytes(b"x")
    (tmp_path / "outside.pt").write_bytes(b"x")
    settings = SimpleNamespace(resolved_runs_dir=runs)
    spec = {"resume_from": given.format(runs=runs) if given else None}
    assert bool(resume_input(spec, settings)) is shown  # type: ignore[arg-type]

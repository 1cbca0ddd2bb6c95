"""Host secrets inside the system dirs the sandbox shows read-only (/etc) are masked: a worker running as root
(compose, this host) runs its jobs as uid 0 without capabilities, and uid 0 owns /etc/shadow, the SSH host
keys and the systemd unit's settings file (/etc/rankzero/env): before, a job read them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from worker import sandbox


def test_secrets_are_masked_after_the_system_binds() -> None:
    view = sandbox.View(
        run_dir=Path("/r/j"), cwd=Path("/r/j"), system=(("/etc", None),),
        masked=(("/etc/shadow", False), ("/etc/rankzero", True)),
    )  # fmt: skip
    args = sandbox.bwrap_args(view)
    etc = args.index("/etc")
    assert args.index("/etc/shadow") > etc and args[args.index("/etc/shadow") - 1] == "/dev/null"
    assert args[args.index("/etc/rankzero") - 1] == "--tmpfs"


def test_secret_paths_finds_what_exists(tmp_path: Path) -> None:
    (tmp_path / "shadow").write_text("x")
    (tmp_path / "conf").mkdir()
    (tmp_path / "ssh").mkdir()
    (tmp_path / "ssh" / "ssh_host_ed25519_key").write_text("k")
    (tmp_path / "link").symlink_to(tmp_path / "shadow")
    names = [str(tmp_path / n) for n in ("shadow", "conf", "missing", "link")]
    found = sandbox.secret_paths(names, [str(tmp_path / "ssh" / "ssh_host_*key")])
    assert found == (
        (str(tmp_path / "shadow"), False),
        (str(tmp_path / "conf"), True),
        (str(tmp_path / "ssh" / "ssh_host_ed25519_key"), False),
    )


@pytest.mark.skipif(sandbox.probe() is not None, reason=f"no sandbox here: {sandbox.probe()}")
@pytest.mark.skipif(not os.access("/etc/shadow", os.R_OK), reason="this user cannot read /etc/shadow anyway")
def test_a_job_reads_nothing_of_etc_shadow(tmp_path: Path) -> None:
    from core.settings import Settings
    from trainer.run_dir import RunDir
    from worker.launch_command import sandbox_view

    settings = Settings(data_dir=tmp_path / "data", runs_dir=tmp_path / "runs")  # pyright: ignore[reportCallIssue]
    run = RunDir(settings.resolved_runs_dir / "job_1")
    run.root.mkdir(parents=True)
    view = sandbox_view(run, run.root, None, settings, {}, host_network=False)
    done = subprocess.run(["bwrap", *sandbox.bwrap_args(view), "cat", "/etc/shadow"], capture_output=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.stdout == b"", "a job read the host's /etc/shadow"  # empty, or refused (a device on a nodev mount)
    assert done.returncode == 0 or b"Permission denied" in done.stderr, done.stderr

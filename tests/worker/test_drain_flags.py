"""Graceful-stop flags belong to one process's lifetime: a flag left by a killed worker whose pid is
reused must not make the new process refuse every job (hardening issue, item 18)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from core.settings import Settings
from worker import drain


def _settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, api_token="t" * 40)


def test_a_dead_workers_flag_with_our_pid_does_not_drain_us(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    # What a worker with our pid but another lifetime (killed with SIGKILL, never cleared) left behind.
    # On main this was `drain/<pid>`: both names are tried, neither may apply to this process.
    (tmp_path / "drain").mkdir()
    (tmp_path / "drain" / str(os.getpid())).touch()
    (tmp_path / "drain" / f"{os.getpid()}-1").touch()
    assert not drain.draining(settings)
    drain.request_drain(settings)
    assert drain.draining(settings)
    drain.clear_drain(settings)
    assert not drain.draining(settings)
    assert list((tmp_path / "drain").iterdir()) == []  # stale flags swept, ours removed


def test_a_killed_workers_flag_is_swept_and_a_live_ones_is_kept(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    code = "import sys, time; from worker import drain; from core.settings import Settings; "
    code += f"drain.request_drain(Settings(data_dir={str(tmp_path)!r}, api_token='t' * 40)); print('up', flush=True); "
    code += "time.sleep(60)"
    live = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    dead = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline().strip() == "up" and dead.stdout.readline().strip() == "up"
        dead.send_signal(signal.SIGKILL)
        dead.wait(timeout=10)
        drain.clear_drain(settings)
        names = [p.name.split("-")[0] for p in (tmp_path / "drain").iterdir()]
        assert names == [str(live.pid)]
    finally:
        for proc in (live, dead):
            proc.kill()
            proc.wait(timeout=10)

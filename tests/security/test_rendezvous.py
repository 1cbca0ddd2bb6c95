"""Issue 19 item 2 and issue 20 item 3: no port a job opens is reachable from another host, nothing
written to a multi-node job's store runs code, and a port taken by another process is no failure of
a sandboxed job. Real launches of the probe job (tests/support/sandbox_job.py) and real namespaces."""

from __future__ import annotations

import base64
import json
import os
import pickle
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import netns
from tests.support.deadlines import deadline_in
from worker import sandbox

NO_SANDBOX = sandbox.probe()


@pytest.fixture
def probe_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANKZERO_TRAINER_MODULE", "tests.support.sandbox_job")
    monkeypatch.delenv("RANKZERO_SANDBOX", raising=False)


@pytest.fixture
def launch_node(probe_env: None, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Factory: launch one node of job 1 running the probe with probe.json = `ask`."""
    from core.settings import Settings
    from trainer.run_dir import RunDir
    from worker.launch import launch

    started: list[Any] = []

    def start(ask: dict[str, Any], topology: Any = 1) -> Any:
        settings = Settings(data_dir=tmp_path / "data", sandbox="on")
        run = RunDir(settings.resolved_runs_dir / "job_1")
        run.root.mkdir(parents=True, exist_ok=True)
        (run.root / "probe.json").write_text(json.dumps(ask))
        launched = launch(run, {"name": "probe"}, 1, 1, topology, None, settings)
        launched.run = run
        started.append(launched)
        return launched

    yield start
    for launched in started:
        if launched.proc.poll() is None:
            os.killpg(launched.proc.pid, signal.SIGKILL)
            launched.proc.wait(timeout=30)


def _result(launched: Any, rank: int = 0, timeout_s: float = 120.0) -> dict[str, Any]:
    path = launched.run.root / f"probe_rank{rank}.json"
    deadline = deadline_in(timeout_s)
    while not path.exists():
        assert launched.proc.poll() is None, launched.launcher_log.read_text()
        assert time.monotonic() < deadline, "the probe wrote nothing"
        time.sleep(0.1)
    return json.loads(path.read_text())


@pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no sandbox here: {NO_SANDBOX}")
@pytest.mark.skipif(netns.available() is not None, reason=f"{netns.available()}")
def test_no_port_of_a_single_node_job_is_reachable_from_another_host(launch_node) -> None:
    launched = launch_node({"listen": True, "end": "hang"})
    listen_port = _result(launched)["listen_port"]
    control = socket.create_server(("0.0.0.0", 0))  # the worker's own listener: the path works
    with control, netns.other_host() as other:
        assert other.can_connect(other.host_address, control.getsockname()[1])
        assert not other.can_connect(other.host_address, launched.port), "the job's rendezvous store is reachable"
        assert not other.can_connect(other.host_address, listen_port), "a port the job's code opened is reachable"
    assert launched.proc.poll() is None  # the job ran all along


class _Payload:
    """What an attacker writes to the store: unpickling it creates `path` (in the job's own run dir)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (f"open({str(self.path)!r}, 'w').write('pwned')",))


@pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no sandbox here: {NO_SANDBOX}")
def test_a_forged_pickle_in_a_multi_node_jobs_store_does_nothing(launch_node) -> None:
    from torch.distributed import TCPStore

    from worker.launch_command import Topology, free_port

    port = free_port()
    ask = {"stay_s": 8, "end": 0}
    nodes = [launch_node(ask, Topology(nproc=1, nnodes=2, node_rank=r, endpoint=f"127.0.0.1:{port}")) for r in (0, 1)]
    pwned = nodes[0].run.root / "pwned"
    store = TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False, timeout=_seconds(120))
    forged = base64.b64encode(pickle.dumps(_Payload(pwned)))
    for key in ("torch.rendezvous.rankzero-1-1", "rankzero-1-1/torch.rendezvous.rankzero-1-1"):
        store.set(key, forged)  # where torchrun's c10d rendezvous keeps (and unpickles) its state
    for launched in nodes:
        assert launched.proc.wait(timeout=180) == 0, launched.launcher_log.read_text()
    assert _result(nodes[0], 0)["pid"] and _result(nodes[1], 1)["pid"]  # both nodes' ranks ran
    assert not pwned.exists(), "the forged state was unpickled: a write to the store ran code"


def _seconds(n: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=n)


@pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no sandbox here: {NO_SANDBOX}")
def test_a_port_taken_by_another_process_is_no_failure_of_a_sandboxed_job(launch_node, monkeypatch) -> None:
    """The red team's race: `free_port()` bound and released a port, another process took it before
    torchrun bound it. A sandboxed single-node job's store lives in its own network namespace."""
    thief = socket.create_server(("0.0.0.0", 0))
    with thief:
        monkeypatch.setattr("worker.launch.free_port", lambda: thief.getsockname()[1])
        launched = launch_node({"end": 0})
        assert launched.proc.wait(timeout=120) == 0, launched.launcher_log.read_text()


PORT_TAKEN_LOG = (
    "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
    "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"
)


@pytest.mark.parametrize(
    ("log", "taken"),
    [
        (PORT_TAKEN_LOG, True),
        ("OSError: [Errno 98] Address already in use", True),
        ("ValueError: the loss is nan", False),
        ("", False),
    ],
)
def test_a_port_taken_failure_is_told_apart(tmp_path: Path, log: str, taken: bool) -> None:
    from worker.launch import port_taken

    path = tmp_path / "attempt_1.torchrun.log"
    path.write_text("a rank's output\n" + log + "\n")
    assert port_taken(path) is taken
    assert port_taken(tmp_path / "missing.log") is False


@pytest.mark.parametrize("nodes", [1, 2])
def test_torchrun_uses_the_static_rendezvous_at_the_registered_address(tmp_path: Path, nodes: int) -> None:
    from trainer.run_dir import RunDir
    from worker.launch_command import Topology, build_command

    topo = Topology(nproc=2, nnodes=nodes, node_rank=nodes - 1, endpoint="10.0.0.7:41000" if nodes > 1 else None)
    cmd = build_command(RunDir(tmp_path / "job_3"), 3, 2, topo, 29500)
    assert "--rdzv-backend=static" in cmd and not any("c10d" in a or "rdzv-endpoint" in a for a in cmd)
    if nodes == 1:
        assert "--master-addr=127.0.0.1" in cmd and "--master-port=29500" in cmd
    else:
        assert "--master-addr=10.0.0.7" in cmd and "--master-port=41000" in cmd and "--node-rank=1" in cmd

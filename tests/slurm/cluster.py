"""A real Slurm on this machine for the Slurm backend's tests: munged, slurmctld and three slurmd ("n1", "n2",
"n3") sharing this host, a `low` and a `high` partition on n1 and n2 (partition-priority preemption, REQUEUE), a
`drop` one whose preempted jobs Slurm cancels instead (PreemptMode=CANCEL, as some sites set it), and `solo` on n3
(a job there runs beside a preemption of n1 and n2, untouched by it), started from a template and stopped by pid
(docs/slurm.md; the recipe: shared/reference/slurm-on-one-machine.md).

Debian's packages are installed with apt where missing; the tests skip only when that fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.apt import APT_GET
from tests.support.ports import free_port

PACKAGES = ("slurm-wlm", "munge")
NODES = ("n1", "n2", "n3")
NEEDED = ("slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo", "munged")

CONF = """\
ClusterName=rztest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket},cred_expire={cred_expire}
CredType=cred/munge
StateSaveLocation={state}/slurmctld
SlurmdSpoolDir={state}/slurmd/%n
SlurmctldPidFile={state}/slurmctld.pid
SlurmdPidFile={state}/slurmd-%n.pid
SlurmctldLogFile={state}/slurmctld.log
SlurmdLogFile={state}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
JobCompType=jobcomp/filetxt
JobCompLoc={state}/jobcomp.txt
JobRequeue=1
KillWait=5
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
Waittime=0
NodeName=n1 NodeHostname={host} NodeAddr=127.0.0.1 Port={n1_port} CPUs=2 RealMemory=4000 State=UNKNOWN
NodeName=n2 NodeHostname={host} NodeAddr=127.0.0.1 Port={n2_port} CPUs=2 RealMemory=4000 State=UNKNOWN
NodeName=n3 NodeHostname={host} NodeAddr=127.0.0.1 Port={n3_port} CPUs=2 RealMemory=4000 State=UNKNOWN
PartitionName=low  Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP PriorityTier=1  OverSubscribe=NO GraceTime=20
PartitionName=high Nodes=n1,n2 Default=NO  MaxTime=INFINITE State=UP PriorityTier=10 OverSubscribe=NO
PartitionName=drop Nodes=n1,n2 Default=NO MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=20 PreemptMode=CANCEL
PartitionName=solo Nodes=n3 Default=NO MaxTime=INFINITE State=UP PriorityTier=1 OverSubscribe=NO
"""


def install_reason() -> str | None:
    """None when Slurm's commands are here (installing them with apt where missing), else why not."""
    if all(shutil.which(c) or Path("/usr/sbin", c).exists() for c in NEEDED):
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "slurm-wlm is not installed and apt-get cannot install it here (not root, or no apt-get)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = [*APT_GET, "install", "-y", "--no-install-recommends", *PACKAGES]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        subprocess.run([*APT_GET, "update"], env=env, capture_output=True, timeout=300, check=False)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        return f"apt-get could not install {' '.join(PACKAGES)}: {done.stderr.strip()[-400:]}"
    return None


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    env: dict[str, str]
    pids: list[int] = field(default_factory=list)

    def run(self, *argv: str, check: bool = True) -> str:
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
        return done.stdout

    def log(self, name: str = "slurmctld.log") -> str:
        path = self.root / name
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self) -> None:
        """Cancel every job of this private cluster (its processes end with them), then stop the daemons."""
        self.cancel_all()
        self._stop_daemons()

    def cancel_all(self) -> None:
        try:
            ids = self.run("squeue", "-h", "-o", "%i", check=False).split()
            if ids:
                self.run("scancel", *ids, check=False)
                deadline = time.monotonic() + 20
                while self.run("squeue", "-h", "-o", "%i", check=False).split() and time.monotonic() < deadline:
                    time.sleep(0.5)
        except subprocess.TimeoutExpired:
            pass  # the controller does not answer: stopping the daemons is all that is left

    def _stop_daemons(self) -> None:
        for pid in reversed(self.pids):
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + 15
        for pid in self.pids:
            while time.monotonic() < deadline:
                try:
                    if os.waitpid(pid, os.WNOHANG)[0]:
                        break
                except ChildProcessError:
                    break
                time.sleep(0.1)
            else:
                try:
                    os.killpg(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass


def _spawn(argv: list[str], env: dict[str, str], log: Path, user: str | None = None) -> int:
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            user=user,
        )  # fmt: skip
    return proc.pid


def start(root: Path, cred_expire: int = 10) -> SlurmCluster:
    """Write the configuration under `root` and start munged, slurmctld, slurmd n1 and n2; wait until both
    nodes are idle."""
    state = root.resolve()
    for sub in ("slurmctld", "slurmd"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    (state / "munge").mkdir(exist_ok=True)
    shutil.chown(state / "munge", "munge", "munge")
    os.chmod(state / "munge", 0o755)  # munged requires the socket dir traversable by all
    key = Path("/etc/munge/munge.key")
    if not key.exists():
        subprocess.run(["/usr/sbin/mungekey", "--create", "--force"], check=True, timeout=30)
        shutil.chown(key, "munge", "munge")
    socket_path = state / "munge" / "munge.socket"
    host = socket.gethostname().split(".")[0]
    conf = state / "slurm.conf"
    conf.write_text(
        CONF.format(
            host=host,
            state=state,
            munge_socket=socket_path,
            cred_expire=cred_expire,
            ctld_port=free_port(),
            slurmd_port=free_port(),
            n1_port=free_port(),
            n2_port=free_port(),
            n3_port=free_port(),
        )  # fmt: skip
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    cluster = SlurmCluster(state, conf, env)
    try:
        munged = [
            "/usr/sbin/munged", "-F", f"--socket={socket_path}", f"--pid-file={state / 'munge' / 'munged.pid'}",
            f"--log-file={state / 'munge' / 'munged.log'}", f"--seed-file={state / 'munge' / 'munged.seed'}",
        ]  # fmt: skip
        cluster.pids.append(_spawn(munged, env, state / "munged.out", user="munge"))
        _wait(lambda: socket_path.exists(), 20, "munged did not create its socket")
        cluster.pids.append(_spawn(["slurmctld", "-D"], env, state / "slurmctld.out"))
        for node in NODES:
            cluster.pids.append(_spawn(["slurmd", "-D", "-N", node], env, state / f"slurmd-{node}.out"))
        _wait(lambda: _idle_nodes(cluster) >= len(NODES), 60, "the slurmd nodes did not become idle", cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _idle_nodes(cluster: SlurmCluster) -> int:
    out = cluster.run("sinfo", "-h", "-N", "-o", "%N %t", check=False)
    return sum(1 for line in out.splitlines() if line.split()[-1:] == ["idle"])


def _wait(ok: Callable[[], bool], timeout: float, message: str, cluster: SlurmCluster | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ok():
            return
        if cluster is not None and any(os.waitpid(pid, os.WNOHANG)[0] for pid in cluster.pids):
            break  # a daemon exited: its log says why
        time.sleep(0.2)
    logs = (
        "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in sorted(Path(cluster.root).glob("*.out"))
        )
        if cluster
        else ""
    )
    raise RuntimeError(f"{message}\n{logs}")

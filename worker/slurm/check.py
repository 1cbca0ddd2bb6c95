"""`rankzero slurm-agent --check`: what the agent needs of the compute nodes, verified from them (run through `srun`):
the service's Python runs as the agent's user and imports rankzero and torch, the runs dir is writable, and the
ranks' rendezvous port (from RANKZERO_SLURM_PORT_RANGE) is open between nodes. `python -m worker.slurm.check` is the
node's side (one task per node); `verdict` turns what srun printed into one sentence per problem, saying what to do.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

OK_LINE = "rankzero-check ok:"
FAIL_LINE = "rankzero-check FAILED:"
WAIT_S = 60.0  # how long a node waits for the first node's port (both start together under srun)


@dataclass(frozen=True)
class Verdict:
    ok: bool
    lines: list[str]


def verdict(python: str, user: str, returncode: int, output: str, nodes: int) -> Verdict:
    """What `srun … python -m worker.slurm.check` said, as sentences (pure)."""
    problems: list[str] = []
    if re.search(r"execve\(\).*(Permission denied|No such file or directory)", output):
        why = "it is not there" if "No such file" in output else "permission denied"
        problems.append(
            f"the compute nodes cannot run the service's Python {python} as {user} ({why}): put it on the shared file "
            f"system with every folder on its path readable and searchable by {user} (chmod o+rx, or a group "
            f"{user} is in), or point RANKZERO_SLURM_PYTHON at one that is (docs/slurm.md 'The service's Python')"
        )
    problems += [line.split(FAIL_LINE, 1)[1].strip() for line in output.splitlines() if FAIL_LINE in line]
    oks = [line.split(OK_LINE, 1)[1].strip() for line in output.splitlines() if OK_LINE in line]
    if not problems and (returncode != 0 or len(oks) < nodes):
        tail = " | ".join(line.strip() for line in output.strip().splitlines()[-5:])
        problems.append(f"srun exited {returncode} with {len(oks)} of {nodes} nodes checked: {tail or 'no output'}")
    return Verdict(not problems, [f"ok: {o}" for o in oks] + [f"FAILED: {p}" for p in problems])


def srun_argv(
    python: str, runs_dir: Path, nodes: int, partition: str | None, port_base: int, port_span: int
) -> list[str]:
    argv = ["srun", f"--nodes={nodes}", "--ntasks-per-node=1", "--time=5", "--job-name=rankzero-check"]
    if partition:
        argv.append(f"--partition={partition}")
    return [*argv, python, "-m", "worker.slurm.check", "--runs-dir", str(runs_dir), "--port-base", str(port_base),
            "--port-span", str(port_span)]  # fmt: skip


# --- the node's side ------------------------------------------------------------------------------------------


def _fail(node: str, what: str) -> int:
    print(f"{FAIL_LINE} node {node}: {what}", flush=True)
    return 1


def _address(node: str) -> str:
    """The node's address as Slurm knows it (NodeAddr), as the batch script finds MASTER_ADDR."""
    try:
        out = subprocess.run(["scontrol", "show", "node", node, "-o"], capture_output=True, text=True, timeout=30,
                             check=True).stdout  # fmt: skip
        found = re.search(r"\bNodeAddr=(\S+)", out)
        if found:
            return found.group(1)
    except (OSError, subprocess.SubprocessError):
        pass
    return socket.gethostbyname(socket.gethostname())


def _ports(folder: Path, node: str, rank: int, ntasks: int, port: int) -> str | None:
    """Task 0 listens on `port` and publishes its address in the shared folder; every other task connects to it.
    None when the connections were made, else what failed."""
    published = folder / "first_node"
    if rank == 0:
        with socket.create_server(("", port)) as server:
            published.write_text(f"{_address(node)} {port}")
            server.settimeout(WAIT_S)
            for _ in range(ntasks - 1):
                try:
                    conn, _ = server.accept()
                    conn.close()
                except TimeoutError:
                    return f"no other node reached port {port} here within {WAIT_S:.0f} s (a firewall between nodes?)"
        return None
    deadline = time.monotonic() + WAIT_S
    while not published.exists():
        if time.monotonic() > deadline:
            return "the first node published no address in the shared runs dir (is it shared between nodes?)"
        time.sleep(0.2)
    address, _, first_port = published.read_text().partition(" ")
    try:
        socket.create_connection((address, int(first_port)), timeout=WAIT_S).close()
    except OSError as exc:
        where = f"{address}:{first_port}"
        return f"cannot reach the first node at {where} ({exc}): open RANKZERO_SLURM_PORT_RANGE between nodes"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.slurm.check")
    parser.add_argument("--runs-dir", required=True, type=Path)
    parser.add_argument("--port-base", required=True, type=int)
    parser.add_argument("--port-span", required=True, type=int)
    args = parser.parse_args(argv)
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    rank, ntasks, job = (int(os.environ.get(k) or d) for k, d in (("SLURM_PROCID", 0), ("SLURM_NTASKS", 1),
                                                                   ("SLURM_JOB_ID", 0)))  # fmt: skip
    # The trainer's imports, as a rank makes them, in a process of its own (the service imports no torch).
    probe_imports = "import torch, trainer.train; print(torch.__version__)"
    try:
        imported = subprocess.run([sys.executable, "-c", probe_imports], capture_output=True, text=True, timeout=600,
                                  check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _fail(node, f"{sys.executable} cannot import rankzero's trainer and torch: {exc}")
    if imported.returncode != 0:
        why = (imported.stderr.strip().splitlines() or ["no output"])[-1]
        return _fail(node, f"{sys.executable} cannot import rankzero's trainer and torch: {why}")
    torch_version = imported.stdout.strip()
    folder = args.runs_dir / ".slurm-check" / str(job)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f"node_{rank}"
        probe.write_text("written by rankzero slurm-agent --check\n")
    except OSError as exc:
        return _fail(node, f"the runs dir {args.runs_dir} is not writable here as {os.environ.get('USER', '?')}: {exc}")
    port = args.port_base + (job * 8) % args.port_span
    problem = _ports(folder, node, rank, ntasks, port) if ntasks > 1 else None
    if problem is not None:
        return _fail(node, problem)
    between = f", port {port} open between nodes" if ntasks > 1 else ""
    runs = f"{sys.executable} runs (torch {torch_version}), {args.runs_dir} writable"
    print(f"{OK_LINE} node {node}: {runs}{between}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

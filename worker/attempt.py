"""The values supervision passes around: one attempt, how it is laid out, what was seen, how it ended.

The bottom of worker/: it imports no other module of worker/ (node 0, the followers, the watcher and
the pure decisions all import it, so none of them needs another). No I/O here.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from core.placement_record import JobPlacement
from core.settings import Settings
from core.tables import JobStatus
from trainer.run_dir import RunDir
from trainer.spec import JobSpec


@dataclass(frozen=True)
class Layout:
    """How the scheduler placed this node of an attempt: its ranks, nodes, node rank and rendezvous (the
    torchrun topology, worker/launch_command.py `Topology`), the accumulation the ranks use (raised by elastic
    fit), the other nodes' hosts (node 0 watches them) and this node's leased GPUs."""

    nproc: int
    accumulation_steps: int
    nnodes: int = 1
    node_rank: int = 0
    endpoint: str | None = None  # host:port of node 0's c10d store (several nodes)
    peers: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()  # this node's leased GPUs (sampled as sys/gpu<i>/...)

    @classmethod
    def single(cls, spec: JobSpec) -> Layout:
        return cls(nproc=spec.nproc, accumulation_steps=spec.accumulation_steps)

    @classmethod
    def of(cls, spec: JobSpec, placed: JobPlacement | None, node_rank: int, endpoint: str | None) -> Layout:
        if placed is None:
            return cls.single(spec)
        node = placed.node(node_rank)
        return cls(
            nproc=placed.nproc,
            accumulation_steps=placed.accumulation_steps,
            nnodes=len(placed.nodes),
            node_rank=node_rank,
            endpoint=endpoint,
            peers=placed.peers(node_rank),
            gpus=node.gpus if node is not None else (),
        )

    def spec_for_ranks(self, spec_dict: dict[str, Any]) -> dict[str, Any]:
        """The spec the ranks read: with elastic fit, the ranks and accumulation they really run with
        (the global batch, and so the weights, unchanged). A script job gets the same two values, which the
        worker passes on as RANKZERO_WORLD_SIZE / RANKZERO_ACCUMULATION_STEPS (worker/launch_command.py `job_env`)."""
        if self.nproc != spec_dict.get("nproc"):
            return {**spec_dict, "nproc": self.nproc, "accumulation_steps": self.accumulation_steps,
                    "min_nproc": None}  # fmt: skip
        return spec_dict


@dataclass(frozen=True)
class Attempt:
    """One launched attempt of a job on node 0: what every step of its supervision needs."""

    engine: Engine
    settings: Settings
    job_id: int
    number: int  # 1 for the first attempt; the row's `attempt`
    spec: JobSpec
    run: RunDir
    proc: subprocess.Popen[bytes]  # the rank guard over torchrun (worker/launch.py `Launched`)
    mark: str  # RANKZERO_JOB_MARK of every process of the attempt
    launcher_log: Path
    layout: Layout
    restarts_used: int = 0  # failures already restarted (spec.max_restarts bounds them)
    host_losses: int = 0  # resumes after a lost host (settings.max_host_losses bounds them)


class StopReason(str, Enum):
    """Why the worker stopped the ranks itself (None: they exited on their own)."""

    replaced = "replaced"  # the row is a later attempt's: this supervisor was replaced; it writes nothing
    cancel = "cancel"  # the row went to `cancelling`
    drain = "drain"  # this worker is shutting down
    stall = "stall"  # no sign of life for stall_timeout_s (or startup_timeout_s before the first)
    gone = "gone"  # the row was deleted, finished or requeued under us: do not leave ranks behind
    memory = "memory"  # the job's processes use more memory than its limit (worker/resources.py)
    preempt = "preempt"  # the scheduler needs our place for a higher-priority job: checkpoint, requeue
    host_lost = "host_lost"  # another node's host went silent: stop every node, resume elsewhere
    limit = "limit"  # a quota broken (max_runtime_s, disk_limit_mb, an overlong event line): stop, checkpoint, fail
    lingered = "lingered"  # the trainer said `finished`, but its processes had not exited LINGER_S later


@dataclass(frozen=True)
class Ended:
    """How the ranks' processes ended: torchrun's exit code, and why we stopped them, if we did."""

    exit_code: int | None
    stopped_for: StopReason | None = None
    note: str = ""  # for a stall: what the watchdog saw (which phase, how long), in words


@dataclass(frozen=True)
class Seen:
    """What one look at an attempt found: the row, this host, the ranks' last sign of life.

    `status` None: the row is gone. A follower leaves the node-0-only fields (over_limit, lost_peer,
    quiet_s) at their defaults: it watches neither memory, peers nor stalls."""

    status: JobStatus | None
    attempt: int
    preempt_for: int | None = None  # the job the scheduler stops us for
    draining: bool = False  # this worker is shutting down
    over_limit: str | None = None  # the memory limit broken, in words (worker/resources.py)
    lost_peer: str | None = None  # another node's host that went silent
    started: bool = False  # this attempt's first sign of life was seen (it arms the stall watchdog)
    quiet_s: float = 0.0  # seconds since the last sign of life (an event, a heartbeat, a script's output)
    last_step: int | None = None
    broke_limit: str | None = None  # a quota broken, in words (worker/quota.py `breach`)
    finished_s: float | None = None  # seconds since the built-in trainer's `finished` (None: not seen yet)


@dataclass(frozen=True)
class Limits:
    """What an attempt is held to: its number (the row must stay its) and the stall watchdog's limits."""

    attempt: int
    stall_timeout_s: float | None = None  # spec.stall_timeout_s (None: no watchdog)
    startup_timeout_s: float | None = None  # settings.startup_timeout_s, before the first sign of life
    linger_s: float = 60.0  # how long ranks may outlive the trainer's `finished` (teardown, torchrun's exit barrier)

"""What a running job's processes use (CPU, memory, the GPUs it leased), sampled every few seconds as
`sys/...` points, and whether it is over its memory limit (issue 11 "System metrics", issue 12 item 5).

The supervisor calls `ResourceWatch.poll(now, step)` from its loop; a poll returns None until
`interval_s` has passed since the last sample, else a `Sample`:

Every point's `step` is the sample's unix time in milliseconds (`sample_key`), not the job's step: the
series have one point per sample for the whole job and every job kind, and the dashboard draws them on
wall-clock time (web/static/js/job_charts.js).

- ``sys/rank<N>/cpu_percent``, ``sys/rank<N>/rss_mb``: rank N's process and its children (DataLoader
  workers, which inherit its RANK). 100 = one core busy. No CPU points in the first sample (CPU percent
  is a rate: it needs a previous sample).
- ``sys/cpu_percent_total``, ``sys/rss_mb_total``: every process of the job (the rank guard, torchrun,
  the ranks, their workers and anything they start).
- ``sys/gpu<I>/util_percent``, ``sys/gpu<I>/memory_mb``, ``sys/gpu<I>/power_w``: each GPU the job leased
  (I: the host's index, as in the lease), through NVML (pynvml / nvidia-ml-py when importable), else
  ``nvidia-smi``; neither (or no lease): no GPU points, one log line, never an exception.

The job's processes are those that carry ``RANKZERO_JOB_MARK=<mark>`` (worker/launch.py gives it to the
rank guard, torchrun and every rank; worker/procs.py finds them); a rank is one of them with ``RANK``
and ``TORCHELASTIC_RUN_ID`` in its environment (torchrun sets both; a RANK the worker itself happened
to have, inherited by torchrun, does not make torchrun a rank). Everything is read from /proc: no
subprocess in a poll unless a GPU is sampled through nvidia-smi. The memory limit is never RLIMIT_AS
(CUDA reserves far more address space than it uses); the supervisor stops a job whose sample says
`over_limit`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.event_types import EventType
from worker import sandbox
from worker.ingest_handlers import TimedMetric
from worker.procs import pids_with_mark

log = logging.getLogger(__name__)

_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
PSS_BUDGET_S = 0.02  # reading smaps_rollup costs ~12 ms of CPU per GiB resident (measured): at most this in a poll
# ... and this share of a core on average (issue 29: re-reading every process every 5 s was most of the worker's
# CPU while a 2-rank job ran); between reads a process's PSS is carried forward by its change in RSS.
PSS_SHARE = 0.0005
LIMIT_SETTING = "job_memory_limit_mb"  # RANKZERO_JOB_MEMORY_LIMIT_MB, a server-wide default (core/settings.py)
NVIDIA_SMI_TIMEOUT_S = 2.0
NVIDIA_SMI_MAX_FAILURES = 3  # in a row: then GPU sampling stops for this job (a hung driver must not stall polls)


@dataclass(frozen=True)
class Sample:
    points: list[tuple[str, float]]
    over_limit: str | None  # None, or one line: why the job uses too much memory (numbers and the limit named)
    step: int = 0  # the training step the supervisor gave `poll` (for its log lines; the points are keyed by time)
    at: float = 0.0  # unix seconds when it was taken

    def events(self) -> list[TimedMetric]:
        """The points as `metric` events, the shape `Ingestor.ingest_metrics` takes (worker/ingest.py), keyed
        by `sample_key(at)`: one point per sample for the whole job, whatever step it reports (a script that
        reports none would otherwise collapse to one point at step 0), drawn on wall-clock time."""
        key = sample_key(self.at)
        return [
            TimedMetric(type=EventType.metric.value, time=self.at, step=key, name=name, value=value)
            for name, value in self.points
        ]


def job_pids(mark: str) -> list[int]:
    """An attempt's processes: its sandbox cgroup's list where it has one (one file read), else every process
    on the host whose environment holds the mark (an unsandboxed attempt: reading each process's environment
    was a third of the worker's CPU while a job ran, issue 29)."""
    listed = sandbox.cgroup_pids(mark)
    return listed if listed else pids_with_mark(mark)


def sample_key(at: float) -> int:
    """A system sample's `step`: its unix time in milliseconds (strictly increasing across samples, attempts
    and workers, as long as the hosts' clocks roughly agree; samples are seconds apart)."""
    return int(at * 1000)


@dataclass
class _Proc:
    """One process of the job, as read from /proc in this poll."""

    key: tuple[int, int]  # (pid, start time in ticks since boot): a reused pid is another process
    rank: int | None
    cpu_ticks: int  # utime + stime
    rss_kb: int


@dataclass
class _Pss:
    """The last PSS read of a process and its RSS then: PSS now ≈ pss_kb + (RSS now − rss_kb)."""

    pss_kb: int
    rss_kb: int
    read_at: int  # poll number


def _read_proc(pid: int) -> _Proc | None:
    """None when the process is gone, a zombie, or not ours to read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        statm = Path(f"/proc/{pid}/statm").read_text()
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    try:
        fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces and ')'
        if fields[0] in ("Z", "X"):
            return None
        ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
        started = int(fields[19])  # starttime (field 22)
        rss_kb = int(statm.split()[1]) * _PAGE_KB
    except (IndexError, ValueError):
        return None
    return _Proc(key=(pid, started), rank=_rank_of(environ), cpu_ticks=ticks, rss_kb=rss_kb)


def _rank_of(environ: bytes) -> int | None:
    pairs = (item.partition(b"=") for item in environ.split(b"\0") if b"=" in item)
    env = {name: value for name, _, value in pairs}
    if b"TORCHELASTIC_RUN_ID" not in env:
        # A Slurm task (worker/slurm/rank.py sets RANK in os.environ only) is rank SLURM_PROCID; the batch shell and
        # srun carry SLURM_PROCID too, but no SLURM_STEP_ID.
        if b"SLURM_STEP_ID" in env and env.get(b"SLURM_PROCID", b"").isdigit():
            return int(env[b"SLURM_PROCID"])
        return None
    try:
        return int(env[b"RANK"])
    except (KeyError, ValueError):
        return None


def _read_pss_kb(pid: int) -> int | None:
    """Proportional set size: each shared page split between the processes that map it, so the PSS of
    several processes adds up to what they hold together (RSS counts torch's libraries once per rank and a
    DataLoader worker's copy-on-write pages twice). None when smaps_rollup is unreadable (kernel < 4.14,
    another user's process)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Pss:"):
            with contextlib.suppress(IndexError, ValueError):
                return int(line.split()[1])
    return None


def _mib(kb: float) -> float:
    return round(kb / 1024, 1)


def _default_limit_mb(settings: Any) -> int | None:
    """The server-wide default limit, when core/settings.py has one (`job_memory_limit_mb`) and it is set."""
    if settings is None:
        from core.settings import get_settings

        settings = get_settings()
    value = getattr(settings, LIMIT_SETTING, None)
    return value if isinstance(value, int) and value > 0 else None


class ResourceWatch:
    """Samples one attempt's processes and GPUs; one per attempt, polled from the supervisor's loop.

    Memory is PSS (/proc/<pid>/smaps_rollup) where readable, else RSS (/proc/<pid>/statm), per process,
    summed: the sum of PSS counts each physical page once, as a cgroup's memory accounting does; a sum of
    RSS would count torch's shared libraries once per rank and a forked DataLoader worker's copy-on-write
    pages twice. Reading smaps_rollup walks the page tables (~12 ms of CPU per GiB resident, measured), so
    the reads are held to `pss_share` of a core on average (a credit refilled at that rate, at most
    `pss_budget_s` in one poll): each poll re-reads as many processes as the credit covers (never read
    first, then the longest unread) and carries the others forward by their change in RSS (free to read);
    a process not read yet counts its RSS, which is never less than its PSS.
    `over_limit` is decided on fresh figures only: when that estimate is over the limit, every process
    not read in this poll is read before deciding (so the limit costs nothing while a job is well under
    it). Between reads a process's PSS can rise without its RSS changing (a process it shared pages with
    exited), so a large job may pass its limit by that much until the process is read again.

    `memory_limit_mb`: the spec's (JobSpec.memory_limit_mb); None: the server's default
    (RANKZERO_JOB_MEMORY_LIMIT_MB, when core/settings.py has it), else no limit.
    `gpus`: the host GPU indices the job leased (GpuLease.gpus), None or [] for none.
    `nvml`: an object with pynvml's functions (tests pass a stand-in); None: pynvml if importable.
    `settings`: where the default limit is read; None: core.settings.get_settings().
    """

    def __init__(  # noqa: PLR0913 (keyword-only knobs with defaults)
        self,
        job_mark: str,
        *,
        memory_limit_mb: int | None,
        gpus: list[str] | None,
        interval_s: float = 5.0,
        nvml: Any = None,
        settings: Any = None,
        pss_budget_s: float = PSS_BUDGET_S,
        pss_share: float = PSS_SHARE,
    ) -> None:
        self.job_mark = job_mark
        self.interval_s = interval_s
        self.pss_budget_s = pss_budget_s
        self.pss_share = pss_share
        self._pss_credit = pss_budget_s  # CPU seconds the PSS reads may spend now: refilled at pss_share, capped
        if memory_limit_mb is not None:
            self.limit_mb, self.limit_name = memory_limit_mb, "its memory_limit_mb"
        else:
            self.limit_mb, self.limit_name = _default_limit_mb(settings), "the server's RANKZERO_JOB_MEMORY_LIMIT_MB"
        self.gpus = _GpuReader([str(g) for g in gpus or []], nvml)
        self._last_poll: float | None = None  # the caller's clock
        self._last_wall: float | None = None  # ours (monotonic), for CPU rates
        self._ticks: dict[tuple[int, int], int] = {}
        self._pss: dict[tuple[int, int], _Pss] = {}
        self._no_pss: set[tuple[int, int]] = set()  # smaps_rollup unreadable: RSS it is
        self._polls = 0

    def due(self) -> float:
        """When the next sample is due, on the clock `poll` is given (0: now, none taken yet)."""
        return 0.0 if self._last_poll is None else self._last_poll + self.interval_s

    def poll(self, now: float, step: int) -> Sample | None:
        """A sample when `interval_s` has passed (by `now`, any clock the caller keeps steady) since the last."""
        if self._last_poll is not None and now - self._last_poll < self.interval_s:
            return None
        self._last_poll = now
        self._polls += 1
        at = time.time()  # when the poll began: samples stay `interval_s` apart however long reading takes
        procs = [p for p in (_read_proc(pid) for pid in job_pids(self.job_mark)) if p is not None]
        wall = time.monotonic()
        if self._last_wall is not None:
            self._pss_credit = min(self.pss_budget_s, self._pss_credit + self.pss_share * (wall - self._last_wall))
        points = self._cpu_points(procs, wall)
        over = None
        if procs:  # none yet (launching) or any more (ended): no process points rather than zeros
            over = self._over_limit(procs, self._memory_kb(procs))
            memory = {p.key: self._estimate_kb(p) for p in procs}  # with what judging the limit read
            points += self._memory_points(procs, memory)
        points += self.gpus.read()
        return Sample(points=points, over_limit=over, step=step, at=at)

    def close(self) -> None:
        self.gpus.close()

    # --- CPU ---

    def _cpu_points(self, procs: list[_Proc], wall: float) -> list[tuple[str, float]]:
        """Ticks each process used since the last sample (all of them for one that was not there then)."""
        previous, self._ticks = self._ticks, {p.key: p.cpu_ticks for p in procs}
        elapsed = None if self._last_wall is None else wall - self._last_wall
        self._last_wall = wall
        if elapsed is None or elapsed <= 0 or not procs:
            return []
        used: dict[int | None, int] = {}
        for p in procs:
            used[p.rank] = used.get(p.rank, 0) + max(0, p.cpu_ticks - previous.get(p.key, 0))

        def percent(ticks: int) -> float:
            return round(100.0 * ticks / _TICKS_PER_S / elapsed, 1)

        ranks = sorted(r for r in used if r is not None)
        points = [(f"sys/rank{r}/cpu_percent", percent(used[r])) for r in ranks]
        return [*points, ("sys/cpu_percent_total", percent(sum(used.values())))]

    # --- memory ---

    def _memory_kb(self, procs: list[_Proc]) -> dict[tuple[int, int], int]:
        """Each process's PSS: read now while the budget lasts, else carried forward by its change in RSS."""
        live = {p.key for p in procs}
        self._pss = {k: v for k, v in self._pss.items() if k in live}
        self._no_pss &= live
        due = sorted(
            (p for p in procs if p.key not in self._no_pss),
            key=lambda p: self._pss[p.key].read_at if p.key in self._pss else -1,
        )
        started = time.thread_time()  # CPU time the reads cost us, not the wait for a core on a busy host
        for p in due:
            if time.thread_time() - started >= self._pss_credit:
                break
            self._read_pss(p)
        self._pss_credit -= time.thread_time() - started
        return {p.key: self._estimate_kb(p) for p in procs}

    def _read_pss(self, p: _Proc) -> None:
        pss = _read_pss_kb(p.key[0])
        if pss is None:
            self._no_pss.add(p.key)
        else:
            self._pss[p.key] = _Pss(pss_kb=pss, rss_kb=p.rss_kb, read_at=self._polls)

    def _estimate_kb(self, p: _Proc) -> int:
        known = self._pss.get(p.key)
        if known is None:
            return p.rss_kb  # not read yet (or unreadable): RSS, never less than PSS
        return max(0, min(p.rss_kb, known.pss_kb + p.rss_kb - known.rss_kb))

    def _over_limit(self, procs: list[_Proc], memory: dict[tuple[int, int], int]) -> str | None:
        if self.limit_mb is None or sum(memory.values()) <= self.limit_mb * 1024:
            return None
        for p in procs:  # the estimate says over: decide on fresh figures
            if p.key not in self._no_pss and self._pss.get(p.key, _Pss(0, 0, -1)).read_at != self._polls:
                self._read_pss(p)
        total_mb = sum(self._estimate_kb(p) for p in procs) / 1024
        if total_mb <= self.limit_mb:
            return None
        return (
            f"the job's processes use {math.ceil(total_mb):,} MiB resident memory, over {self.limit_name} "
            f"{self.limit_mb:,}: raise memory_limit_mb or lower batch_size"
        )

    def _memory_points(self, procs: list[_Proc], memory: dict[tuple[int, int], int]) -> list[tuple[str, float]]:
        per_rank: dict[int, int] = {}
        for p in procs:
            if p.rank is not None:
                per_rank[p.rank] = per_rank.get(p.rank, 0) + memory[p.key]
        points = [(f"sys/rank{r}/rss_mb", _mib(kb)) for r, kb in sorted(per_rank.items())]
        return [*points, ("sys/rss_mb_total", _mib(sum(memory.values())))]


@dataclass
class _GpuReader:
    """The leased GPUs' utilization, memory and power: NVML, else nvidia-smi, else nothing (said once)."""

    gpus: list[str]
    nvml: Any = None
    _mode: str | None = field(default=None, init=False)  # "nvml", "smi", "off"; None: not chosen yet
    _smi: str | None = field(default=None, init=False)
    _failures: int = field(default=0, init=False)
    _warned: set[str] = field(default_factory=set, init=False)

    def read(self) -> list[tuple[str, float]]:
        if not self.gpus:
            return []
        if self._mode is None:
            self._mode = self._choose()
        if self._mode == "nvml":
            return self._read_nvml()
        if self._mode == "smi":
            return self._read_smi()
        return []

    def close(self) -> None:
        if self._mode == "nvml":
            with contextlib.suppress(Exception):
                self.nvml.nvmlShutdown()
        self._mode = "off"

    def _choose(self) -> str:
        if self.nvml is None:
            try:
                # nvidia-ml-py; optional: not a dependency, so not installed where the checker runs
                import pynvml  # pyright: ignore[reportMissingImports]
            except ImportError:
                pynvml = None
            self.nvml = pynvml
        if self.nvml is not None:
            try:
                self.nvml.nvmlInit()
                return "nvml"
            except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...: no GPU to read
                log.warning("GPU sampling off: NVML did not start (%s)", exc)
                return "off"
        self._smi = shutil.which("nvidia-smi")
        if self._smi is not None:
            return "smi"
        log.warning("GPU sampling off for GPUs %s: neither NVML (pynvml) nor nvidia-smi is available", self.gpus)
        return "off"

    def _read_nvml(self) -> list[tuple[str, float]]:
        nvml, points = self.nvml, []
        for position, gpu in enumerate(self.gpus):
            label = gpu if gpu.isdigit() else str(position)
            try:
                handle = (
                    nvml.nvmlDeviceGetHandleByIndex(int(gpu)) if gpu.isdigit() else nvml.nvmlDeviceGetHandleByUUID(gpu)
                )
            except Exception as exc:
                self._warn_once(f"handle {gpu}", f"GPU {gpu}: no NVML handle ({exc})")
                continue
            readings = (
                ("util_percent", lambda h: nvml.nvmlDeviceGetUtilizationRates(h).gpu),
                ("memory_mb", lambda h: nvml.nvmlDeviceGetMemoryInfo(h).used / 2**20),
                ("power_w", lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0),  # milliwatts
            )
            for name, read in readings:
                try:
                    points.append((f"sys/gpu{label}/{name}", round(float(read(handle)), 1)))
                except Exception as exc:  # NVMLError_NotSupported (power on some boards), a GPU fallen off
                    self._warn_once(f"{gpu} {name}", f"GPU {gpu}: no {name} from NVML ({exc})")
        return points

    def _read_smi(self) -> list[tuple[str, float]]:
        query = "index,utilization.gpu,memory.used,power.draw"
        command = [self._smi or "nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"]
        command.append(f"--id={','.join(self.gpus)}")
        try:
            out = subprocess.run(
                command, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=True
            ).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            self._failures += 1
            if self._failures >= NVIDIA_SMI_MAX_FAILURES:
                log.warning("GPU sampling off: nvidia-smi failed %d times in a row (%s)", self._failures, exc)
                self._mode = "off"
            return []
        self._failures = 0
        return _parse_smi(out, set(self.gpus))

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("GPU sampling: %s", message)


def _parse_smi(out: str, wanted: set[str]) -> list[tuple[str, float]]:
    """nvidia-smi's CSV lines (index, util %, memory MiB, power W); "[N/A]" / "[Not Supported]" are left out."""
    points = []
    for line in out.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 4 or cells[0] not in wanted:
            continue
        for name, cell in zip(("util_percent", "memory_mb", "power_w"), cells[1:], strict=True):
            with contextlib.suppress(ValueError):
                points.append((f"sys/gpu{cells[0]}/{name}", round(float(cell), 1)))
    return points

"""The run directory's layout: the one place that names its files (trainer, worker and API use it).

Torch-free, so the worker and the API can import it.

    <run>/spec.json                         the spec the job was launched with
    <run>/events.jsonl                      rank 0's events, one JSON object per line
    <run>/heartbeat                         touched by rank 0 every step (at most once a second): a sign of life
    <run>/ranks/rank_N.json                 rank N's last step, phase and step times (trainer/rank_progress.py)
    <run>/checkpoints/step_XXXXXXXX.pt      checkpoints (written to a temp name, then renamed)
    <run>/logs/attempt_N/                   torchrun --log-dir of attempt N (per-rank stdout/stderr, error.json)
    <run>/tensorboard/                      RANKZERO_TENSORBOARD_DIR: a script's SummaryWriter files (ingested)
    <run>/console_series.json               the series read from a script's console (the chart says so)
    <run>/work/                             a script job's working folder: the bundle's files (links) + what it writes
    <run>/compile_cache/                    `compile: true`: torch.compile's caches (inductor/, triton/)
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from trainer import no_follow

SPEC_MAX_BYTES = 1 << 20  # spec.json is read this far at most (the job may link it to /dev/zero)
CHECKPOINT_NAME = re.compile(r"^step_(\d{8,})\.pt$")
NODE_DIR = re.compile(r"^node_(\d{1,4})$")


def _node_of(relative: Path) -> int:
    """The node whose torchrun wrote a log (0 unless the path goes through `node_<r>/`)."""
    for part in relative.parts:
        if m := NODE_DIR.match(part):
            return int(m.group(1))
    return 0


def job_run_dir(runs_dir: Path, job_id: int) -> Path:
    """Where job `job_id` runs: `<runs dir>/job_<id>`. The one place that names a job's directory."""
    return runs_dir / f"job_{int(job_id)}"


@dataclass(frozen=True)
class RunDir:
    root: Path

    @property
    def spec(self) -> Path:
        return self.root / "spec.json"

    @property
    def events(self) -> Path:
        return self.root / "events.jsonl"

    @property
    def heartbeat(self) -> Path:
        """Its mtime is the ranks' liveness for the stall watchdog, whatever log_every is."""
        return self.root / "heartbeat"

    @property
    def ranks(self) -> Path:
        """Every rank's progress record, `rank_<N>.json` (trainer/rank_progress.py)."""
        return self.root / "ranks"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

    @property
    def console_series(self) -> Path:
        """The series a script's console gave (`{"names": [...]}`; worker/console_feed.py writes it)."""
        return self.root / "console_series.json"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def compile_cache(self) -> Path:
        """`compile: true`: torch.compile's caches (inductor's kernels, Triton's), kept for a resumed attempt."""
        return self.root / "compile_cache"

    def checkpoint_path(self, step: int) -> Path:
        return self.checkpoints / f"step_{step:08d}.pt"

    def attempt_logs(self, attempt: int) -> Path:
        """torchrun's --log-dir for one attempt."""
        return self.logs / f"attempt_{attempt}"

    def environment_log(self, attempt: int, node_rank: int = 0) -> Path:
        """uv's output while the worker prepares an attempt's own packages (worker/environments/)."""
        node = "" if node_rank == 0 else f".node_{node_rank}"
        return self.logs / f"attempt_{attempt}{node}.environment.log"

    def rank_logs(self, stream: str = "stderr", attempt: int | None = None) -> dict[int, Path]:
        """Global rank → the newest `<local rank>/<stream>.log` torchrun wrote for it (it nests them under
        a run id and restart). Node r > 0 of a multi-node job logs under `node_<r>/` (worker/launch.py):
        its local rank l is global rank r × nproc + l, nproc being the ranks per node of spec.json."""
        if stream not in ("stdout", "stderr"):
            raise ValueError("stream must be 'stdout' or 'stderr'")
        base = self.attempt_logs(attempt) if attempt is not None else self.logs
        per_node = self._ranks_per_node()
        found: dict[int, Path] = {}
        for path, _ in sorted(_with_mtimes(base.glob(f"**/{stream}.log")), key=lambda f: f[1]):  # newest wins
            if path.parent.name.isdigit():
                found[_node_of(path.relative_to(base)) * per_node + int(path.parent.name)] = path
        return found

    def rank_log(self, rank: int, stream: str = "stderr", attempt: int | None = None) -> Path | None:
        """The newest log of global rank `rank` (see `rank_logs`)."""
        return self.rank_logs(stream, attempt).get(int(rank))

    def _ranks_per_node(self) -> int:
        """spec.json's `nproc`, read bounded and with no link followed (the job writes its run dir: a link to
        /dev/zero or the token, a FIFO, must neither exhaust the reader's memory, block it, nor be read)."""
        try:
            text = no_follow.read_text(self.spec, self.root, errors="strict", max_bytes=SPEC_MAX_BYTES)
            return max(1, int(json.loads(text).get("nproc", 1)))
        except (OSError, ValueError, TypeError, AttributeError):
            return 1

    def error_files(self, attempt: int | None = None) -> list[Path]:
        """torchrun's per-rank error files (written by @record), newest last."""
        base = self.attempt_logs(attempt) if attempt is not None else self.logs
        return [path for path, _ in sorted(_with_mtimes(base.glob("**/error.json")), key=lambda f: f[1])]


def _with_mtimes(paths: Iterable[Path]) -> list[tuple[Path, float]]:
    """(path, mtime) of each of `paths` as it is (a link's own mtime: nothing the job links to is stat'ed); a
    vanished file is skipped, not an error for the reader. Links and FIFOs stay listed: each reader refuses
    them when it opens (trainer/no_follow.py), and says so."""
    found = []
    for path in paths:
        try:
            found.append((path, os.lstat(path).st_mtime))
        except OSError:
            continue
    return found


def failure_note(root: Path, rank: int) -> Path:
    """Where rank `rank` notes its own error, so rank 0's `failed` event can name the rank that failed first."""
    return Path(root) / "failures" / f"rank_{int(rank)}.json"

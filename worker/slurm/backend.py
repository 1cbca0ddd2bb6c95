"""Slurm as a `core.backends.Backend`: the agent's Slurm commands (worker/slurm/commands.py) and state
mapper (worker/slurm/states.py) behind the interface a Kubernetes backend would implement too."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from core.backends import BackendKind, Observation, StopKind
from trainer.run_dir import RunDir
from worker.slurm import commands
from worker.slurm.states import Phase, read


class SlurmBackend:
    kind = BackendKind.slurm

    def __init__(self, run: commands.Runner, write_script: object) -> None:
        # write_script(job_id, attempt, spec) -> (Path, words): the agent's (worker/slurm/agent.py `_write_job_files`).
        self.run, self.write_script = run, write_script

    def submit(self, job_id: int, attempt: int, spec: Mapping[str, object]) -> str:
        script, _ = self.write_script(job_id, attempt, dict(spec))  # type: ignore[operator]
        return commands.sbatch(self.run, script)

    def poll(self, backend_job_ids: Sequence[str]) -> dict[str, Observation]:
        """One `squeue`, one `sacct` for the ids it does not list; still unknown ids are left out."""
        seen = commands.squeue(self.run)
        missing = [i for i in backend_job_ids if i not in seen]
        seen.update(commands.sacct(self.run, missing))
        out = {}
        for job_id in backend_job_ids:
            job = seen.get(job_id)
            if job is None:
                continue
            reading = read(job, 1, cancel_requested=False)
            status = reading.status if reading.phase is Phase.ended else None
            out[job_id] = Observation(job_id, status, reading.words, 1 + job.restarts, tuple(filter(None, [job.nodes])))
        return out

    def cancel(self, backend_job_id: str) -> None:
        commands.scancel(self.run, backend_job_id)

    def signal(self, backend_job_id: str, why: StopKind) -> None:
        """Preempt: USR1 to the ranks (they checkpoint, exit 75, and the batch script requeues the job)."""
        if why is StopKind.cancel:
            self.cancel(backend_job_id)
        else:
            commands.scancel(self.run, backend_job_id, signal="USR1")

    def requeue(self, backend_job_id: str) -> None:
        commands.requeue(self.run, backend_job_id)

    def logs(self, run_root: Path, attempt: int) -> dict[int, Path]:
        return RunDir(run_root).rank_logs("stderr", attempt)

"""`rankzero slurm-agent`: hands the queued jobs of one pool to Slurm and keeps their rows true.

Each period: submit queued jobs (claim → batch script → `sbatch --parsable` → the Slurm job id on the row),
one `squeue` for all of them (one `sacct` for those it does not list), then per job: Slurm's reading
(worker/slurm/states.py) → a row write through core/jobs.py; events.jsonl is ingested as a worker does
(worker/ingest.py, idempotent on seq); a cancel is a marker file and `scancel`. Everything it needs is
in the database and the run dirs: a restarted agent picks up where it was (a job it submitted but did not
record is found by its Slurm job name), and nothing is ingested twice.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from sqlalchemy.engine import Engine

from core import jobs
from core.backends import BackendStatus
from core.settings import Settings
from core.tables import JobStatus
from trainer.entrypoint import parse_entrypoint
from trainer.run_dir import RunDir, job_run_dir
from trainer.spec import JobSpec
from worker import bundles, environments, errors, run_record
from worker.launch_command import job_env, rank_env
from worker.script_jobs import entrypoint_values, script_workdir
from worker.slurm import commands, follow, people, rows, stops, watching
from worker.slurm import environment as slurm_environment
from worker.slurm.attempt_io import script_env
from worker.slurm.bounds import OutOfBounds, job_bounds, port_range
from worker.slurm.endings import ending, gpus_per_node, nice_for, stopped_resumably
from worker.slurm.follow import Step
from worker.slurm.prepare import BASE_SPEC
from worker.slurm.rank import LAUNCH_FILE
from worker.slurm.script import CANCEL_MARK, BatchJob, batch_log, job_name, render
from worker.slurm.states import INTERRUPTED_STATES, Phase, Reading, SlurmJob, base_state, read, settled, status_of

log = logging.getLogger("rankzero.slurm")
S = JobStatus
NODES_EVERY_S = 30.0  # how often the hosts page's picture of the cluster (`sinfo`) is refreshed


@dataclass
class Agent:
    engine: Engine
    settings: Settings
    run: commands.Runner = field(default_factory=commands.Runner)
    watched: dict[int, watching.Watched] = field(default_factory=dict)
    nodes_at: float = -NODES_EVERY_S  # when `sinfo` last ran (monotonic)
    registered: bool = False  # the pool is in table `pools` (core/pools.py), as of this agent's first period
    interrupted: dict[int, float] = field(default_factory=dict)  # job → when it was first seen PREEMPTED (monotonic)
    node_failed: dict[int, bool] = field(default_factory=dict)  # job → seen NODE_FAIL/BOOT_FAIL (True), PREEMPTED
    completing: dict[int, float] = field(default_factory=dict)  # job → when its requeue was first seen COMPLETING
    in_slurm: set[str] = field(default_factory=set)  # Slurm job ids of the rows followed last period
    shown: list[tuple[int, int, BackendStatus]] = field(default_factory=list)  # to write at the period's end
    site: people.SiteUsers = field(default_factory=people.SiteUsers)  # whose job: RANKZERO_SLURM_USER_MAP

    @property
    def pool(self) -> str:
        if self.settings.slurm_pool is None:
            raise ValueError("RANKZERO_SLURM_POOL is not set: name the pool this agent hands to Slurm")
        return self.settings.slurm_pool

    @property
    def runs_dir(self) -> Path:
        return self.settings.resolved_runs_dir

    @property
    def compute_runs_dir(self) -> Path:
        return self.settings.slurm_runs_dir or self.runs_dir

    def _submitter(self, owner_id: int | None) -> people.Submitter:
        """Whom the job of `owner_id` is submitted as (people.Unmapped / ValueError: nobody, saying why)."""
        mapped = self.site.users(self.settings) is not None
        return self.site.submitter(self.settings, rows.user_name(self.engine, owner_id) if mapped else None)

    def _as(self, unix_user: str | None) -> commands.Runner:
        return self.site.runner(self.settings, self.run, unix_user)

    # --- one period -------------------------------------------------------------------------

    def step(self) -> None:
        if not self.registered:  # before sinfo, which may fail: the API takes the pool's jobs at once
            rows.register_pool(self.engine, self.pool, self.settings.slurm_partition)
            self.registered = True
        self._submit_queued()
        live = rows.live(self.engine, self.pool)
        for row in live:
            if row.backend_job_id is None:
                self._adopt_or_resubmit(row)
        live = rows.live(self.engine, self.pool)  # with the requeued jobs waiting in Slurm's queue (`queued`)
        ids = [r.backend_job_id for r in live if r.backend_job_id]
        if ids or self.in_slurm:
            seen = commands.squeue(self.run, self.site.listed(self.settings))
            self._cancel_unfollowed(seen)
            missing = [i for i in ids if i not in seen]
            # squeue says CANCELLED but not by whom: Slurm's accounting does (a cancel rankzero did not ask for).
            outside = [r.backend_job_id for r in live if r.status is not S.cancelling and r.backend_job_id in seen
                       and base_state(seen[r.backend_job_id].state) == "CANCELLED"]  # fmt: skip
            seen.update(commands.sacct(self.run, [*missing, *outside]))
            for row in live:
                if row.backend_job_id:
                    try:
                        self._follow(row, seen.get(row.backend_job_id))
                    except jobs.FencedOut:
                        self.watched.pop(row.job_id, None)
        self.in_slurm = set(ids)
        rows.set_shown(self.engine, self.shown)
        self.shown.clear()
        rows.heartbeat(self.engine, [r.job_id for r in live], self.pool)
        if time.monotonic() - self.nodes_at >= NODES_EVERY_S:
            self.nodes_at = time.monotonic()
            nodes = commands.sinfo(self.run)
            rows.replace_nodes(self.engine, self.pool, nodes)
            # the partition a job goes to unless its spec names one: what the API checks its nnodes against
            rows.register_pool(
                self.engine, self.pool, self.settings.slurm_partition or commands.default_partition(nodes)
            )

    # --- submitting -------------------------------------------------------------------------

    def _submit_queued(self) -> None:
        if (unreadable := self.site.unreadable(self.settings)) is not None:  # never the wrong user: wait for it
            log.warning("submitting nothing until the user map reads: %s", unreadable)
            return
        for job_id in rows.queued(self.engine, self.pool):
            self._submit(job_id)

    def _submit(self, job_id: int) -> None:
        job = rows.claim(self.engine, job_id, None, self.runs_dir, self.pool, f"handed to Slurm (pool {self.pool})")
        if job is None:
            return
        self._sbatch(job_id, job.attempt, job.spec, job.priority, job.owner_id)

    def _adopt_or_resubmit(self, row: rows.Row) -> None:
        """A live row without a Slurm job id: the agent died between claim and record. Adopt the Slurm job
        of that name if there is one, else submit it now."""
        name = job_name(self.pool, row.job_id, row.attempt)
        found = commands.find_by_name(self.run, name, self.site.listed(self.settings))
        if found is not None:
            rows.record_submitted(self.engine, row.job_id, row.attempt, found, row.attempt)
            return
        if row.status is S.cancelling:
            jobs.finish(
                self.engine, row.job_id, S.cancelled, detail="cancelled before Slurm ran it", attempt=row.attempt
            )
            return
        self._sbatch(row.job_id, row.attempt, row.spec, int(row.spec.get("priority") or 0), row.owner_id)

    def _sbatch(self, job_id: int, attempt: int, raw_spec: dict, priority: int, owner_id: int | None) -> None:
        try:
            submitter = self._submitter(owner_id)
            script, summary = self._write_job_files(job_id, attempt, raw_spec, priority, submitter)
            slurm_id = commands.sbatch(self._as(submitter.unix_user), script)
        except people.Unmapped as exc:  # the site runs only its members' jobs: the error says whom to ask
            jobs.finish(self.engine, job_id, S.failed, detail="no Unix user on this Slurm pool", attempt=attempt,
                        error=str(exc)[:4000])  # fmt: skip
            return
        except environments.EnvironmentFailed as exc:  # the job's requirements: uv's message is its error
            jobs.finish(self.engine, job_id, S.failed, detail="preparing the environment failed", attempt=attempt,
                        error=str(exc)[:20000])  # fmt: skip
            return
        except OutOfBounds as exc:  # asked for more than its pool allows: the job's error says what to change
            jobs.finish(self.engine, job_id, S.failed, detail="outside its pool's Slurm bounds", attempt=attempt,
                        error=str(exc)[:4000])  # fmt: skip
            return
        except (ValueError, OSError, commands.SlurmError, bundles.BundleUnavailable) as exc:
            error = f"Slurm did not take the job: {exc}"
            jobs.finish(self.engine, job_id, S.failed, detail="sbatch refused", attempt=attempt, error=error[:4000])
            log.warning("job %s: %s", job_id, error)
            return
        rows.record_submitted(self.engine, job_id, attempt, slurm_id, attempt)
        rows.set_reason(self.engine, job_id, attempt, f"Slurm job {slurm_id}: submitted")
        # whom it was submitted as, where the pool maps users (without a map every job is the service account's)
        who = f", {submitter.words()}" if self.site.users(self.settings) is not None else ""
        words = f"submitted to Slurm as job {slurm_id}{who}" + (f"; {summary}" if summary else "")
        jobs.note(self.engine, job_id, words)
        log.info("job %s attempt %s: Slurm job %s", job_id, attempt, slurm_id)

    def _write_job_files(
        self, job_id: int, attempt: int, raw_spec: dict, priority: int, submitter: people.Submitter
    ) -> tuple[Path, str | None]:
        """spec.slurm.json, a script job's launch file, the job's environment, and the batch script, in the run
        dir; the script's path and what the timeline says of the environment. A job submitted as a site user gets
        its run dir shared through the runs dir's group and that user's HOME, USER and SHELL, not the agent's."""
        spec = JobSpec.model_validate(raw_spec)
        s = self.settings
        bounds = job_bounds(spec.slurm, s)  # the job's own limit and partition, within the pool's (ValueError)
        port_base, port_span = port_range(s)
        local = RunDir(job_run_dir(self.runs_dir, job_id))
        remote = RunDir(job_run_dir(self.compute_runs_dir, job_id))
        if submitter.unix_user is not None and (
            problem := people.shared_runs_problem(self.runs_dir, submitter.unix_user)
        ):
            raise people.Unmapped(problem)
        for folder in (local.root, local.logs, local.checkpoints, local.tensorboard):
            folder.mkdir(parents=True, exist_ok=True)
            if submitter.unix_user is not None:  # the job's user writes here through the runs dir's group
                folder.chmod(0o2770)
        spec_dict = spec.model_dump(mode="json")
        (local.root / BASE_SPEC).write_text(json.dumps(spec_dict, indent=2))
        env_fields = job_env(remote, spec_dict, job_id, attempt, s)
        code = bundles.code_dir(spec, s)
        if spec.is_script:
            entry = parse_entrypoint(str(spec.entrypoint))
            work = script_workdir(local, entry, code)
            argv = entry.expanded(entrypoint_values(remote, job_id, s)).argv()
            launch = {"argv": argv, "cwd": str(remote.root / work.relative_to(local.root))}
            (local.root / LAUNCH_FILE).write_text(json.dumps(launch))
            env_fields.update(script_env(spec_dict))
        env = bundles.pythonpath_first(rank_env(f"{job_id}-{attempt}-slurm", None, s, env_fields), code)
        env.pop("CUDA_VISIBLE_DEVICES", None)  # Slurm sets it for the GPUs it gives
        if submitter.unix_user is not None:  # the job's user's own login, never the agent's HOME
            env.update(people.login_environment(submitter.unix_user))
        # The job's own packages (issue 28), built by the agent in the shared runs dir; the ranks run its Python.
        own = slurm_environment.prepare(self.engine, s, job_id, attempt, spec, local, code, self.compute_runs_dir,
                                        keep_alive=self._heartbeat_all)  # fmt: skip
        if own is not None:
            env["VIRTUAL_ENV"] = own.root
        job = BatchJob(
            pool=self.pool, job_id=job_id, first_attempt=attempt, run_root=remote.root,
            python=own.python if own is not None else s.slurm_python or sys.executable,
            nnodes=spec.nnodes, ntasks_per_node=spec.nproc, gpus_per_node=gpus_per_node(spec, s),
            partition=bounds.partition, account=submitter.account, qos=submitter.qos,
            time_limit_min=bounds.time_limit_min, signal_margin_s=s.slurm_signal_margin_s,
            port_base=port_base, port_span=port_span,
            nice=nice_for(priority) if s.slurm_nice_for_priority else None,
            extra_options=tuple(s.slurm_sbatch_options.split()), env=env, script=spec.is_script,
            umask=0o007 if submitter.unix_user is not None else None,
        )  # fmt: skip
        path = local.root / f"slurm_attempt_{attempt}.sbatch"
        path.write_text(render(job))
        return path, own.summary if own is not None else None

    def _heartbeat_all(self) -> None:
        """While the agent builds an environment (minutes), its other jobs still look alive."""
        rows.heartbeat(self.engine, [r.job_id for r in rows.live(self.engine, self.pool)], self.pool)

    # --- following --------------------------------------------------------------------------

    def _follow(self, row: rows.Row, slurm: SlurmJob | None) -> None:
        """One period of a job, as worker/slurm/follow.py decides it from the row and Slurm's reading."""
        first = row.first_attempt or row.attempt
        if row.status is S.cancelling:
            self._cancel(row, slurm)
        reading = read(slurm, first, row.status is S.cancelling)
        reading = settled(slurm, reading, self._interrupted_for(row.job_id, slurm))
        state = base_state(slurm.state) if slurm is not None else ""
        if state in INTERRUPTED_STATES:
            self.node_failed[row.job_id] = state != "PREEMPTED"
        target = first + (slurm.restarts if slurm is not None else 0)
        todo = follow.steps(row.status, row.attempt, target, state, reading.phase, self._completing_for(row, state))
        if Step.hold in todo and slurm is not None:  # the old allocation completing: never "running"
            reading = Reading(Phase.pending, follow.completing_words(slurm, first))
        for step in todo:
            if (after := self._carry(step, row, slurm, reading, target)) is None:
                return
            row = after
        self._show(row, slurm, reading)
        if (Step.reason in todo or Step.hold in todo) and row.pending_reason != reading.words:
            rows.set_reason(self.engine, row.job_id, row.attempt, reading.words)

    def _carry(self, step: Step, row: rows.Row, slurm: SlurmJob | None, reading: Reading, target: int
               ) -> rows.Row | None:  # fmt: skip
        """One step of worker/slurm/follow.py's: the row as it is after it (None: nothing more this period)."""
        if step is Step.requeue:
            return self._requeued(row, target, reading)
        if step is Step.claim:  # None: cancelled meanwhile
            won = rows.claim(self.engine, row.job_id, target, self.runs_dir, self.pool, reading.words) is not None
            return replace(row, status=S.starting, attempt=target) if won else None
        if step is Step.start:
            rows.mark_running(self.engine, row.job_id, row.attempt, reading.words)
        elif step in (Step.wait, Step.follow) and row.status is not S.queued:
            self._ingest(row)
        elif step is Step.unstart:
            rows.unstart(self.engine, row.job_id, row.attempt, reading.words)
            return replace(row, status=S.queued, pending_reason=reading.words)
        elif step is Step.drop:
            rows.drop(self.engine, row.job_id, row.attempt, reading.words)
        elif step is Step.end:
            self._show(row, slurm, reading)
            self._end(row, reading, slurm)
            return None
        return None if step is Step.wait else row  # nothing concluded: the row keeps what it showed (its nodes)

    def _completing_for(self, row: rows.Row, state: str) -> float:
        """Seconds a requeued job's old allocation has been COMPLETING while the row follows that attempt."""
        if state != "COMPLETING" or row.status is S.queued:
            self.completing.pop(row.job_id, None)
            return 0.0
        return time.monotonic() - self.completing.setdefault(row.job_id, time.monotonic())

    def _interrupted_for(self, job_id: int, slurm: SlurmJob | None) -> float:
        """Seconds the job has been PREEMPTED (NODE_FAIL, BOOT_FAIL) without a requeue, as this agent saw it."""
        if slurm is None or base_state(slurm.state) not in INTERRUPTED_STATES:
            self.interrupted.pop(job_id, None)
            return 0.0
        return time.monotonic() - self.interrupted.setdefault(job_id, time.monotonic())

    def _show(self, row: rows.Row, slurm: SlurmJob | None, reading: Reading) -> None:
        """The partition, nodes and state on the row, when they changed (written together at the period's end;
        none in a period where nothing changed). An ended job keeps the nodes it ran on when Slurm no longer
        names them."""
        if slurm is None:
            return
        shown = status_of(slurm, reading)
        if reading.phase is Phase.ended and shown.nodes is None and row.shown is not None:
            shown = replace(shown, nodes=row.shown.nodes)
        if row.shown is None or row.shown.columns() != shown.columns():
            self.shown.append((row.job_id, row.attempt, shown))

    def _requeued(self, row: rows.Row, target: int, reading: Reading) -> rows.Row:
        """Slurm restarted the job (preemption, the time limit, `scontrol requeue`, a node failure: named by the
        batch step's stop record, or for a node failure by Slurm's accounting and `sinfo`): the attempt that ran
        ends as requeued (its events ingested), and the row goes back to rankzero's queue with Slurm's reason,
        its Slurm job id kept, until Slurm runs attempt `target` (worker/slurm/follow.py)."""
        self._ingest(row, final=True)
        self.watched.pop(row.job_id, None)
        self.completing.pop(row.job_id, None)
        restart = target - (row.first_attempt or row.attempt) - 1
        record = stops.read_record(job_run_dir(self.runs_dir, row.job_id), str(row.backend_job_id), restart)
        seen = self.node_failed.pop(row.job_id, None)  # no record: what the agent saw of it, if anything
        # a node failure is named from what Slurm says of the nodes (a batch step that outlived its peer's node
        # may have recorded the requeue as an admin's: the same `scontrol show job` picture)
        failed = self._failed_node(row, seen) if record is None or record[0] is stops.Cause.requeued else None
        fallback = None if seen is None else (stops.Cause.node_failure if seen else stops.Cause.preempted)
        if failed is not None:
            why = f"requeued by Slurm after {failed}"
        else:
            why = stops.requeue_words(*record) if record is not None else stops.requeue_words(fallback, unseen=True)
        words = f"{why}: resumes from its newest checkpoint as attempt {target}"
        jobs.requeue(self.engine, row.job_id, words, attempt=row.attempt, pending_reason=reading.words)
        return replace(row, status=S.queued, pending_reason=reading.words)

    def _failed_node(self, row: rows.Row, seen: bool | None) -> str | None:
        """Which node failed, in words (worker/slurm/follow.py `node_failure`; None: not a node failure)."""
        assert row.backend_job_id is not None
        allocation = follow.node_fail_allocation(commands.sacct_history(self.run, row.backend_job_id))
        try:
            nodes = commands.sinfo(self.run)
        except commands.SlurmError:
            nodes = []
        return follow.node_failure(allocation, bool(seen), (row.shown.nodes if row.shown else None) or "", nodes)

    def _cancel_unfollowed(self, seen: dict[str, SlurmJob]) -> None:
        """A job cancelled while queued in Slurm after a requeue (by the API, at once): its Slurm job goes too."""
        for job_id, slurm_id in rows.cancelled_in_slurm(self.engine, self.pool, follow.active(seen)):
            try:
                commands.scancel(self._as(seen[slurm_id].user), slurm_id)
                log.info("job %s: cancelled while queued; scancel %s", job_id, slurm_id)
            except commands.SlurmError as exc:
                log.warning("job %s: scancel %s: %s (retried next period)", job_id, slurm_id, exc)

    def _cancel(self, row: rows.Row, slurm: SlurmJob | None) -> None:
        """The marker tells the batch script not to requeue the checkpointed ranks; scancel, as the job's user,
        stops them."""
        assert row.backend_job_id is not None
        try:
            (job_run_dir(self.runs_dir, row.job_id) / CANCEL_MARK).touch()
            commands.scancel(self._as(slurm.user if slurm is not None else None), row.backend_job_id)
        except (OSError, commands.SlurmError) as exc:
            log.warning("job %s: scancel %s: %s (retried next period)", row.job_id, row.backend_job_id, exc)

    def _ingest(self, row: rows.Row, final: bool = False) -> None:
        watching.ingest(self.engine, self.runs_dir, self.watched, row, final)

    def _end(self, row: rows.Row, reading: Reading, slurm: SlurmJob | None) -> None:
        run = RunDir(job_run_dir(self.runs_dir, row.job_id))
        self._ingest(row, final=True)
        w = self.watched.pop(row.job_id, None)
        cancelling = row.status is S.cancelling
        restart = row.attempt - (row.first_attempt or row.attempt)
        record = stops.read_record(run.root, str(row.backend_job_id), restart)
        cause = record[0] if record is not None else None
        resumable = stopped_resumably(list(run_record.read_events(run)))
        if stops.resubmits(slurm.state if slurm else "", cause, resumable, cancelling):
            self._resubmit(row, reading)
            return
        if not cancelling and cause is stops.Cause.signalled:  # the site stopped it: final, as a cancel
            reading = Reading(Phase.ended, f"Slurm job {row.backend_job_id}: {stops.stop_words(cause)}", S.cancelled)
        finished = bool(w and w.ingestor.seen.finished) or any(
            e.get("type") == "finished" for e in run_record.read_events(run)
        )
        script = bool(row.spec.get("entrypoint"))
        exit_code = slurm.exit_code if slurm is not None else None
        failure = None
        if reading.status is S.failed or exit_code not in (None, 0):
            failure = errors.diagnose(run, row.attempt, batch_log(run.root), exit_code)
        whole_needed = reading.status is S.succeeded or (finished and reading.status is S.failed)
        hole = run_record.hole_in_record(run, expect_finished=not script) if whole_needed else None
        status, words, cols = ending(reading, finished=finished, script=script, hole=hole, failure=failure,
                                     exit_code=exit_code)  # fmt: skip
        if status is S.cancelled and row.status is S.running:  # the site's cancel: running → cancelling → cancelled
            rows.site_cancelling(self.engine, row.job_id, row.attempt, words)
        jobs.finish(self.engine, row.job_id, status, detail=words, attempt=row.attempt, **cols)
        log.info("job %s: %s (%s)", row.job_id, status.value, words)

    def _resubmit(self, row: rows.Row, reading: Reading) -> None:
        """The attempt checkpointed on a stop signal but Slurm ended the job instead of requeueing it (with
        GraceTime a preempted job that exits is recorded as finished; a failed self-requeue): rankzero
        submits it again, so no job is lost. The new Slurm job resumes from the checkpoint."""
        words = f"{reading.words}; it had checkpointed on a stop signal: submitted again to resume"
        jobs.requeue(self.engine, row.job_id, words, attempt=row.attempt, backend_job_id=None)
        job = rows.claim(self.engine, row.job_id, None, self.runs_dir, self.pool, "handed to Slurm again")
        if job is not None:
            self._sbatch(row.job_id, job.attempt, job.spec, job.priority, job.owner_id)

    # --- the loop ---------------------------------------------------------------------------

    def run_forever(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.step()
            except commands.SlurmError as exc:
                log.warning("Slurm unavailable this period: %s", exc)
            except Exception:
                log.exception("slurm agent period failed; retrying")
            stop.wait(self.settings.slurm_poll_s)

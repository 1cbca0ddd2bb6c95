"""The training run, top to bottom: build, (resume,) loop over optimizer steps, log, validate, save.

Every rank runs this code; rank 0 alone writes events and checkpoints. One optimizer step =
`accumulation_steps` micro-batches per rank; with DDP only the last one all-reduces gradients.

`build` makes everything once and returns it frozen (`Built`). The loop then trains a step, asks the
`Schedule` what is due after it (`Due`: log, validate, save, stop), lets every rank agree on a stop,
and does what is due: one path for the last step, a periodic step and a SIGTERM stop alike.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset

from trainer import checkpoint as ckpt_io
from trainer.control import RunControl, StopSignal
from trainer.data.datasets import build_concurrently, build_datasets, sized
from trainer.data.layout import BatchLayout
from trainer.data.loaders import batch_length, to_device, train_loader, val_loader
from trainer.dist import DistContext, barrier, setup, teardown
from trainer.event_types import EventType
from trainer.events import EventLog
from trainer.exit_codes import EXIT_OK, EXIT_STOPPED
from trainer.failures import report_failure
from trainer.losses import build_loss, count_correct
from trainer.metrics import LossMeter
from trainer.models import build_model
from trainer.optim import build_optimizer, build_scheduler
from trainer.rank_progress import RankProgress
from trainer.run_dir import RunDir
from trainer.spec import JobSpec
from trainer.spec_file import dump_spec
from trainer.startup import Startup
from trainer.strategy import Strategy, build_strategy, compile_model

# Steps between stop / non-finite agreement checks (each an async all-reduce, waited a step later).
# Each costs a gloo round trip (~0.1 ms of CPU): every 16 steps keeps it under 1 % of a small CPU
# step, and still stops a job with 1 s steps well inside torchrun's 30 s SIGTERM grace.
CONTROL_EVERY = 16
# Rank 0 touches <run>/heartbeat after a step at most this often: the watchdog's sign of life, whatever log_every is.
HEARTBEAT_EVERY_S = 1.0


def total_steps_for(spec: JobSpec, steps_per_epoch: int) -> int:
    limits = [n for n in (spec.epochs and spec.epochs * steps_per_epoch, spec.max_steps) if n]
    return min(limits)


def train(spec: JobSpec, root: str | Path, on_strategy: Callable[[Strategy], None] | None = None) -> int:
    """Run `spec` into run directory `root`; returns EXIT_OK or EXIT_STOPPED, raises on failure.

    `on_strategy` is called with the built strategy before the first step (tests use it to install a
    DDP comm hook). Reuses a process group that is already initialized (and then leaves it up)."""
    startup = Startup()
    startup.mark("imports")  # torch and the trainer are imported by the time this runs
    run = RunDir(Path(root))
    rank = int(os.environ.get("RANK", "0"))
    started_at = time.time()
    events = EventLog(run.events, enabled=rank == 0)
    stop = StopSignal()
    if threading.current_thread() is threading.main_thread():
        stop.install()
    ctx: DistContext | None = None
    runner: _Run | None = None
    try:
        ctx = setup(spec)
        startup.mark("rendezvous")
        runner = _Run(spec, run, ctx, events, stop, build(spec, run, ctx, on_strategy, startup), startup)
        return runner.execute()
    except Exception as exc:
        if runner is not None:
            runner.abandon()
        report_failure(run.root, rank, ctx.world_size if ctx else spec.world_size, exc, events, since=started_at)
        raise
    finally:
        stop.uninstall()
        events.close()
        if runner is not None:
            runner.rank_progress.close()
        if ctx is not None:
            teardown(ctx)


# --------------------------------------------------------------------------------------------- build
@dataclass(frozen=True)
class Built:
    """What a run trains with, made once by `build`."""

    layout: BatchLayout
    total_steps: int
    start_step: int  # optimizer steps already done (a resumed run's checkpoint step, else 0)
    strategy: Strategy
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    loss_fn: Callable[[nn.Module, Any], torch.Tensor]
    has_accuracy: bool
    autocast: Callable[[], contextlib.AbstractContextManager[Any]]
    train_loader: Iterable[Any]  # this rank's micro-batches for steps [start_step, total_steps)
    val_loader: Iterable[Any] | None  # this rank's validation shard; None: no validation set

    @property
    def steps_per_epoch(self) -> int:
        return self.layout.steps_per_epoch


def build(
    spec: JobSpec,
    run: RunDir,
    ctx: DistContext,
    on_strategy: Callable[[Strategy], None] | None,
    startup: Startup | None = None,
) -> Built:
    """Data, model, strategy, optimizer, and (resuming) their saved states and this rank's RNG stream."""
    startup = startup or Startup()
    if ctx.is_main:
        _write_spec(spec, run)
    train_set, val_set = _datasets(spec, ctx)
    startup.mark("data")
    layout = BatchLayout(
        sized(train_set), spec.batch_size, spec.accumulation_steps, ctx.world_size, spec.seed, spec.data.shuffle
    )
    total_steps = total_steps_for(spec, layout.steps_per_epoch)

    torch.manual_seed(spec.seed)  # same initial weights on every rank (DDP/manual also broadcast them)
    module = build_model(spec.model).to(ctx.device)
    resume = ckpt_io.unpack(ckpt_io.load(spec.resume_from)) if spec.resume_from else None
    if resume is not None:
        _check_resumable(spec, resume, layout)
        module.load_state_dict(resume.model)
    strategy = build_strategy(spec, module, ctx)
    if on_strategy is not None:
        on_strategy(strategy)
    if spec.compile:
        compile_model(strategy, run, ctx)
    optimizer = build_optimizer(strategy.module, spec.optimizer)
    scheduler = build_scheduler(optimizer, spec.scheduler, total_steps)
    scaler = torch.amp.GradScaler(ctx.device.type, enabled=spec.precision == "fp16")
    loss_fn, has_accuracy = build_loss(spec.loss)
    if resume is not None:
        optimizer.load_state_dict(resume.optimizer)
        scheduler.load_state_dict(resume.scheduler)
        scaler.load_state_dict(resume.scaler)
    _seed_rank_stream(spec, ctx, resume)
    start_step = resume.step if resume is not None else 0
    del resume  # free the host copy
    startup.mark("build")
    return Built(
        layout=layout,
        total_steps=total_steps,
        start_step=start_step,
        strategy=strategy,
        optimizer=optimizer,
        scheduler=scheduler,
        scaler=scaler,
        loss_fn=loss_fn,
        has_accuracy=has_accuracy,
        autocast=_autocast(spec.precision, ctx.device),
        train_loader=train_loader(
            train_set, layout, ctx.rank, start_step, total_steps, spec.data.num_workers, ctx.device
        ),
        val_loader=(
            val_loader(val_set, ctx.rank, ctx.world_size, spec.batch_size, spec.data.num_workers, ctx.device)
            if val_set is not None and sized(val_set) > 0
            else None
        ),
    )


def _write_spec(spec: JobSpec, run: RunDir) -> None:
    run.root.mkdir(parents=True, exist_ok=True)
    tmp = run.spec.with_name(".spec.json.tmp")
    tmp.write_text(dump_spec(spec))
    os.replace(tmp, run.spec)


def _datasets(spec: JobSpec, ctx: DistContext) -> tuple[Dataset, Dataset | None]:
    """A download happens on local rank 0 while the others wait, then they read the files; data sets
    built without writing anything (digits, synthetic, files already there) are built by all at once."""
    if build_concurrently(spec.data):
        return build_datasets(spec.data, spec.seed)
    if ctx.local_rank != 0:
        barrier(ctx)
    train_set, val_set = build_datasets(spec.data, spec.seed)
    if ctx.local_rank == 0:
        barrier(ctx)
    return train_set, val_set


def _check_resumable(spec: JobSpec, resume: ckpt_io.TrainingState, layout: BatchLayout) -> None:
    if resume.global_batch_size != layout.global_batch or resume.num_train_samples != layout.num_samples:
        raise ValueError(
            f"cannot resume exactly from {spec.resume_from}: it was trained with global batch "
            f"{resume.global_batch_size} on {resume.num_train_samples} samples, "
            f"this spec gives {layout.global_batch} on {layout.num_samples}; "
            "keep batch_size × accumulation_steps × nproc × nnodes and the data the same"
        )


def _seed_rank_stream(spec: JobSpec, ctx: DistContext, resume: ckpt_io.TrainingState | None) -> None:
    """Per-rank streams for dropout and augmentation (weights were drawn before, identically)."""
    if resume is None:
        torch.manual_seed(spec.seed + 100_003 * (ctx.rank + 1))
    elif resume.world_size == ctx.world_size:
        ckpt_io.restore_rng(resume.rng[ctx.rank], ctx.device)
    else:  # another world size: a fresh, deterministic stream per rank
        torch.manual_seed(spec.seed + 100_003 * (ctx.rank + 1) + resume.step)


def _autocast(precision: str, device: torch.device) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    if precision == "fp32":
        return contextlib.nullcontext
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return lambda: torch.autocast(device.type, dtype=dtype)


# ------------------------------------------------------------------------------------------ schedule
@dataclass(frozen=True)
class Due:
    """What to do after an optimizer step, in this order: log, validate, save, then stop (or go on)."""

    last: bool  # the final step of the run
    log: bool
    eval: bool
    save: bool
    stop: bool = False  # every rank agreed to stop here (SIGTERM)

    def stopping(self) -> Due:
        """Stopping at this step, which was trained and after which the resumed run starts: log the
        partial interval (or its loss is lost), validate if due anyway, and save."""
        return replace(self, log=True, save=True, stop=True)


@dataclass(frozen=True)
class Schedule:
    """When each "every so often" action falls due (0: never)."""

    total_steps: int
    log_every: int
    eval_every: int
    save_every_steps: int
    save_every_epochs_steps: int

    @classmethod
    def of(cls, spec: JobSpec, built: Built) -> Schedule:
        c = spec.checkpoint
        return cls(
            total_steps=built.total_steps,
            log_every=spec.log_every,
            eval_every=(spec.eval_every or built.steps_per_epoch) if built.val_loader is not None else 0,
            save_every_steps=c.every_steps or 0,
            save_every_epochs_steps=(c.every_epochs or 0) * built.steps_per_epoch,
        )

    def at(self, done: int) -> Due:
        """What is due after step `done` (1-based); the last step logs, validates and saves."""
        last = done == self.total_steps
        return Due(
            last=last,
            log=last or _every(done, self.log_every),
            eval=bool(self.eval_every) and (last or _every(done, self.eval_every)),
            save=last or _every(done, self.save_every_steps) or _every(done, self.save_every_epochs_steps),
        )


def _every(done: int, n: int) -> bool:
    return n > 0 and done % n == 0


# ------------------------------------------------------------------------------------------------ run
class Throughput:
    """Steps per second over a log interval, not counting the time spent validating and saving."""

    def __init__(self) -> None:
        self._first, self._t0 = 0, time.perf_counter()

    def start(self, step: int) -> None:
        """The first interval starts now, after step `step`."""
        self._first, self._t0 = step, time.perf_counter()

    def lap(self, done: int) -> float:
        """Steps per second since the last lap (or the start); the next interval starts now."""
        now = time.perf_counter()
        steps_per_s = (done - self._first) / max(now - self._t0, 1e-9)
        self._first, self._t0 = done, now
        return steps_per_s

    def exclude(self, seconds: float) -> None:
        """Validation and checkpoint time is not training throughput: move the interval's start forward."""
        self._t0 += seconds


class _Run:
    """The loop over optimizer steps and what falls due after each; rank 0 alone writes."""

    def __init__(  # noqa: PLR0913 (the run's parts, made by train())
        self,
        spec: JobSpec,
        run: RunDir,
        ctx: DistContext,
        events: EventLog,
        stop: StopSignal,
        built: Built,
        startup: Startup | None = None,
    ) -> None:
        self.spec, self.run, self.ctx, self.events, self.built = spec, run, ctx, events, built
        self.startup = startup or Startup()
        self.device = ctx.device
        self.schedule = Schedule.of(spec, built)
        self.control = RunControl(stop, ctx.rank, ctx.world_size, ctx.device, CONTROL_EVERY)
        self.meter = LossMeter(ctx.device, spec.accumulation_steps)
        self.throughput = Throughput()
        self.saver = ckpt_io.AsyncCheckpointWriter(run, spec.checkpoint.keep_last)
        self._beat_at = 0.0
        self._first_step_s: float | None = None  # reported once, in the attempt's first progress event
        # Every rank's own record (issue 38: which rank is stuck or slow); a daemon thread writes it.
        self.rank_progress = RankProgress(run.ranks, ctx.rank).start()

    def execute(self) -> int:
        spec, ctx, b = self.spec, self.ctx, self.built
        self.events.emit(
            EventType.started,
            world_size=ctx.world_size,
            nproc=spec.nproc,
            nnodes=spec.nnodes,
            strategy=spec.strategy,
            device=str(self.device),
            backend=ctx.backend or "none",
            precision=spec.precision,
            total_steps=b.total_steps,
            global_batch_size=b.layout.global_batch,
            start_step=b.start_step,
            resumed_from=spec.resume_from,
            startup=dict(self.startup.marks),  # seconds since process start at the end of each phase
        )
        batches = iter(b.train_loader)
        b.strategy.model.train()
        self.throughput.start(b.start_step)
        for step in range(b.start_step, b.total_steps):
            if step == b.start_step:
                self._first_step(batches)
            else:
                self._train_step(batches)
            done = step + 1
            self.meter.end_step(done)
            due = self._agree(done, self.schedule.at(done))
            self._act(done, due)
            self.rank_progress.step_done(done)
            self._beat()
            self._record_saves(self.saver.poll())  # a finished background save's event; a failed one raises
            if due.stop:
                return EXIT_STOPPED
        self.events.emit(EventType.finished, step=b.total_steps)
        return EXIT_OK

    def _first_step(self, batches: Iterator[Any]) -> None:
        """The first step, stamped; with `compile` it compiles, so a thread keeps the heartbeat going."""
        beating = _Beating(self._beat_now) if self.spec.compile and self.ctx.is_main else contextlib.nullcontext()
        with beating:
            self._train_step(batches)
        self._first_step_s = self.startup.mark("first_step")
        if self.spec.compile:  # compile time is not steady-state throughput
            self.throughput.start(self.built.start_step + 1)

    def abandon(self) -> None:
        """The run is failing: let a save in flight finish and record it if it is whole (a restart
        resumes from it); its own error, if any, is not the one to report."""
        with contextlib.suppress(Exception):
            self._record_saves(self.saver.wait())

    def _beat(self) -> None:
        """A step was done: rank 0 updates the heartbeat file's mtime (one utime a second at most; no event)."""
        now = time.monotonic()
        if not self.ctx.is_main or now - self._beat_at < HEARTBEAT_EVERY_S:
            return
        self._beat_at = now
        self._beat_now()

    def _beat_now(self) -> None:
        try:
            os.utime(self.run.heartbeat)
        except FileNotFoundError:
            with contextlib.suppress(OSError):
                self.run.heartbeat.touch()
        except OSError:
            pass  # the watchdog notices a run dir that is gone; the beat itself never fails a run

    def _train_step(self, batches: Iterator[Any]) -> None:
        """One optimizer step: `accumulation_steps` micro-batches, gradient sync, (clip,) update."""
        b, device, meter = self.built, self.device, self.meter
        A = self.spec.accumulation_steps
        strategy, model, optimizer, scaler, loss_fn = b.strategy, b.strategy.model, b.optimizer, b.scaler, b.loss_fn
        mark = self.rank_progress
        for a in range(A):
            # This rank's own work (data, forward): what its peers wait for at the gradient sync in backward.
            mark.work_began()
            batch = to_device(next(batches), device)
            with strategy.micro_step(last=a == A - 1):
                with b.autocast():
                    loss = loss_fn(model, batch)
                mark.work_ended()
                scaler.scale(loss / A if A > 1 else loss).backward()
            meter.add(loss, batch_length(batch))
        strategy.sync_gradients()
        clip = self.spec.grad_clip_norm
        if clip is not None:
            scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(strategy.module.parameters(), clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        b.scheduler.step()

    def _agree(self, done: int, due: Due) -> Due:
        """Every rank settles the stop / non-finite check the same way: blockingly before a save and at
        the end (both sync anyway; no nan weights get saved), else the cheap async check."""
        control, first_bad = self.control, self.meter.first_bad_step
        if due.last:
            control.settle(first_bad)  # the run ends here anyway: only a non-finite loss matters
            return due
        stop = control.settle(first_bad) if due.save else control.check(done, first_bad)
        return due.stopping() if stop else due

    def _act(self, done: int, due: Due) -> None:
        if due.log:
            self._log(done)
        if due.eval:
            self._validate(done)
        if due.save:
            path = self._save(done)
            if due.last or due.stop:  # the final save is waited for: recorded before `finished` / `stopped`
                self._record_saves(self.saver.wait())
            if due.stop:  # a stop always saves first
                checkpoint = str(path.relative_to(self.run.root))
                self.events.emit(EventType.stopped, step=done, checkpoint=checkpoint, reason="SIGTERM")

    # ------------------------------------------------------------------------------ interval actions
    def _log(self, done: int) -> None:
        mean_loss = self.meter.reduce_mean(self.ctx.distributed)  # the one collective + host sync per interval
        if not self.ctx.is_main:
            return
        b = self.built
        global_batch = b.layout.global_batch
        steps_per_s = self.throughput.lap(done)
        samples_per_s = steps_per_s * global_batch
        eta = (b.total_steps - done) / steps_per_s if steps_per_s > 0 else None
        emit = self.events.emit
        if mean_loss is not None:
            emit(EventType.metric, step=done, name="train/loss", value=mean_loss)
        emit(EventType.metric, step=done, name="lr", value=float(b.scheduler.get_last_lr()[0]))
        emit(EventType.metric, step=done, name="throughput/samples_per_s", value=samples_per_s)
        first = {"first_step_s": self._first_step_s} if self._first_step_s is not None else {}
        self._first_step_s = None
        emit(
            EventType.progress,
            step=done,
            total_steps=b.total_steps,
            epoch=done // b.steps_per_epoch,
            samples=done * global_batch,
            samples_per_s=samples_per_s,
            eta_s=eta,
            **first,
        )
        print(progress_line(done, b.total_steps, mean_loss, samples_per_s, eta), flush=True)

    @torch.no_grad()
    def _validate(self, done: int) -> None:
        """Each rank scores its shard with the unwrapped module (no collectives inside forward, so
        uneven shards cannot deadlock); one all-reduce of [loss sum, correct, count] gives the exact means."""
        began = time.perf_counter()
        b = self.built
        module = b.strategy.module
        module.eval()
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)
        assert b.val_loader is not None  # validation is only due with a validation set
        for raw in b.val_loader:
            batch = to_device(raw, self.device)
            n = batch_length(batch)
            with b.autocast():
                if b.has_accuracy:
                    loss_sum, correct = count_correct(module, batch)
                    sums[0] += loss_sum.double()
                    sums[1] += correct
                else:
                    sums[0] += b.loss_fn(module, batch).double() * n
            sums[2] += n
        module.train()
        if self.ctx.distributed:
            dist.all_reduce(sums, op=dist.ReduceOp.SUM)
        if self.ctx.is_main:
            loss_sum, correct, count = sums.tolist()
            if count:
                self.events.emit(EventType.metric, step=done, name="val/loss", value=loss_sum / count)
                if b.has_accuracy:
                    self.events.emit(EventType.metric, step=done, name="val/accuracy", value=correct / count)
        self.throughput.exclude(time.perf_counter() - began)

    def _save(self, done: int) -> Path:
        """Gather every rank's RNG state; rank 0 snapshots the state to host memory (all a step waits
        for) and hands it to the background writer (serialize, write atomically, prune)."""
        began = time.perf_counter()
        rng = ckpt_io.capture_rng(self.device)
        if self.ctx.distributed:
            all_rng: list[Any] = [None] * self.ctx.world_size
            dist.all_gather_object(all_rng, rng)
        else:
            all_rng = [rng]
        path = self.run.checkpoint_path(done)
        if self.ctx.is_main:
            self._start_checkpoint(path, done, all_rng)
        stood = time.perf_counter() - began
        self.throughput.exclude(stood)
        if self.ctx.is_main:  # seconds the loop stood still (the job's time breakdown: core/time_breakdown.py)
            self.events.emit(EventType.metric, step=done, name="time/checkpoint_s", value=stood)
        return path

    def _start_checkpoint(self, path: Path, done: int, all_rng: list[Any]) -> None:
        b = self.built
        epoch = done // b.steps_per_epoch
        state = ckpt_io.TrainingState(
            model=b.strategy.module.state_dict(),
            optimizer=b.optimizer.state_dict(),
            scheduler=b.scheduler.state_dict(),
            scaler=b.scaler.state_dict(),
            step=done,
            epoch=epoch,
            rng=all_rng,
            world_size=self.ctx.world_size,
            global_batch_size=b.layout.global_batch,
            num_train_samples=b.layout.num_samples,
            spec=json.dumps(self.spec.model_dump(mode="json")),
        )
        self._record_saves(self.saver.submit(path, ckpt_io.pack(state), meta=(done, epoch)))

    def _record_saves(self, saves: list[tuple[ckpt_io.SavedCheckpoint, Any]]) -> None:
        """The `checkpoint` event of each save that finished (whole, renamed into place)."""
        for saved, (done, epoch) in saves:
            self.events.emit(
                EventType.checkpoint,
                step=done,
                epoch=epoch,
                path=str(saved.path.relative_to(self.run.root)),
                bytes=saved.bytes,
                sha256=saved.sha256,
            )


def progress_line(done: int, total: int, loss: float | None, samples_per_s: float, eta: float | None) -> str:
    """Rank 0's stdout line per log interval, e.g. `step 40/300 (13%)  loss 0.4123  1,234 samples/s  ETA 0:02:05`."""
    loss_text = f"{loss:.4g}" if loss is not None else "n/a"
    eta_text = _clock(eta) if eta is not None else "n/a"
    return (
        f"step {done}/{total} ({100 * done // max(total, 1)}%)  loss {loss_text}  "
        f"{samples_per_s:,.0f} samples/s  ETA {eta_text}"
    )


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class _Beating:
    """A thread that calls `beat` every HEARTBEAT_EVERY_S while a long first step (compiling) runs."""

    def __init__(self, beat: Callable[[], None]) -> None:
        self._beat, self._done = beat, threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def _loop(self) -> None:
        while not self._done.wait(HEARTBEAT_EVERY_S):
            self._beat()

    def __enter__(self) -> _Beating:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

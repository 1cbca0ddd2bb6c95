"""The training run, top to bottom: build, (resume,) loop over optimizer steps, log, validate, save.

Every rank runs this code; rank 0 alone writes events and checkpoints. One optimizer step =
`accumulation_steps` micro-batches per rank; with DDP only the last one all-reduces gradients.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from trainer import checkpoint as ckpt_io
from trainer.control import RunControl, StopSignal
from trainer.data.datasets import build_datasets
from trainer.data.layout import BatchLayout
from trainer.data.loaders import batch_length, to_device, train_loader, val_loader
from trainer.dist import DistContext, barrier, setup, teardown
from trainer.events import EventLog
from trainer.failures import report_failure
from trainer.losses import build_loss, count_correct
from trainer.metrics import LossMeter
from trainer.models import build_model
from trainer.optim import build_optimizer, build_scheduler
from trainer.run_dir import RunDir
from trainer.spec import JobSpec
from trainer.spec_file import dump_spec
from trainer.strategy import Strategy, build_strategy

EXIT_OK = 0
EXIT_STOPPED = 75  # EX_TEMPFAIL: stopped on SIGTERM after saving a checkpoint; resumable
# Steps between stop / non-finite agreement checks (each an async all-reduce, waited a step later).
# Each costs a gloo round trip (~0.1 ms of CPU): every 16 steps keeps it under 1 % of a small CPU
# step, and still stops a job with 1 s steps well inside torchrun's 30 s SIGTERM grace.
CONTROL_EVERY = 16


def total_steps_for(spec: JobSpec, steps_per_epoch: int) -> int:
    limits = [n for n in (spec.epochs and spec.epochs * steps_per_epoch, spec.max_steps) if n]
    return min(limits)


def train(spec: JobSpec, root: str | Path, on_strategy: Callable[[Strategy], None] | None = None) -> int:
    """Run `spec` into run directory `root`; returns EXIT_OK or EXIT_STOPPED, raises on failure.

    `on_strategy` is called with the built strategy before the first step (tests use it to install a
    DDP comm hook). Reuses a process group that is already initialized (and then leaves it up)."""
    run = RunDir(Path(root))
    rank = int(os.environ.get("RANK", "0"))
    started_at = time.time()
    events = EventLog(run.events, enabled=rank == 0)
    stop = StopSignal()
    if threading.current_thread() is threading.main_thread():
        stop.install()
    ctx: DistContext | None = None
    try:
        ctx = setup(spec)
        return _Run(spec, run, ctx, events, stop, on_strategy).execute()
    except Exception as exc:
        report_failure(run.root, rank, ctx.world_size if ctx else spec.world_size, exc, events, since=started_at)
        raise
    finally:
        stop.uninstall()
        events.close()
        if ctx is not None:
            teardown(ctx)


class _Run:
    def __init__(
        self, spec: JobSpec, run: RunDir, ctx: DistContext, events: EventLog, stop: StopSignal, on_strategy
    ) -> None:
        self.spec, self.run, self.ctx, self.events, self.stop, self.on_strategy = (
            spec,
            run,
            ctx,
            events,
            stop,
            on_strategy,
        )
        self.device = ctx.device

    # ----------------------------------------------------------------------------------------- build
    def _build(self) -> None:
        spec, ctx = self.spec, self.ctx
        if ctx.is_main:
            self.run.root.mkdir(parents=True, exist_ok=True)
            tmp = self.run.spec.with_name(".spec.json.tmp")
            tmp.write_text(dump_spec(spec))
            os.replace(tmp, self.run.spec)

        # Data sets: a download happens on local rank 0 while the others wait, then they read the files.
        if ctx.local_rank != 0:
            barrier(ctx)
        train_set, self.val_set = build_datasets(spec.data, spec.seed)
        if ctx.local_rank == 0:
            barrier(ctx)
        self.layout = BatchLayout(
            len(train_set), spec.batch_size, spec.accumulation_steps, ctx.world_size, spec.seed, spec.data.shuffle
        )
        self.steps_per_epoch = self.layout.steps_per_epoch
        self.total_steps = total_steps_for(spec, self.steps_per_epoch)
        self.train_set = train_set

        torch.manual_seed(spec.seed)  # same initial weights on every rank (DDP/manual also broadcast them)
        module = build_model(spec.model).to(self.device)
        self.checkpoint = ckpt_io.load(spec.resume_from) if spec.resume_from else None
        if self.checkpoint is not None:
            self._check_resumable(self.checkpoint)
            module.load_state_dict(self.checkpoint["model"])
        self.strategy = build_strategy(spec, module, ctx)
        if self.on_strategy is not None:
            self.on_strategy(self.strategy)
        self.optimizer = build_optimizer(self.strategy.module, spec.optimizer)
        self.scheduler = build_scheduler(self.optimizer, spec.scheduler, self.total_steps)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=spec.precision == "fp16")
        self.loss_fn, self.has_accuracy = build_loss(spec.loss)
        self.start_step = 0
        if self.checkpoint is not None:
            c = self.checkpoint
            self.optimizer.load_state_dict(c["optimizer"])
            self.scheduler.load_state_dict(c["scheduler"])
            self.scaler.load_state_dict(c["scaler"])
            self.start_step = int(c["step"])
            if int(c["world_size"]) == ctx.world_size:
                ckpt_io.restore_rng(c["rng"][ctx.rank], self.device)
            else:  # another world size: a fresh, deterministic stream per rank
                torch.manual_seed(spec.seed + 100_003 * (ctx.rank + 1) + self.start_step)
            self.checkpoint = None  # free the host copy
        else:
            # Per-rank streams for dropout and augmentation (weights were drawn above, identically).
            torch.manual_seed(spec.seed + 100_003 * (ctx.rank + 1))
        self.val_loader = (
            val_loader(self.val_set, ctx.rank, ctx.world_size, spec.batch_size, spec.data.num_workers, self.device)
            if self.val_set is not None and len(self.val_set) > 0
            else None
        )
        if spec.precision == "fp32":
            self.autocast: Callable[[], Any] = contextlib.nullcontext
        else:
            dtype = torch.bfloat16 if spec.precision == "bf16" else torch.float16
            self.autocast = lambda: torch.autocast(self.device.type, dtype=dtype)

    def _check_resumable(self, c: dict[str, Any]) -> None:
        if (
            int(c["global_batch_size"]) != self.layout.global_batch
            or int(c["num_train_samples"]) != self.layout.num_samples
        ):
            raise ValueError(
                f"cannot resume exactly from {self.spec.resume_from}: it was trained with global batch "
                f"{c['global_batch_size']} on {c['num_train_samples']} samples, this spec gives {self.layout.global_batch} "
                f"on {self.layout.num_samples}; keep batch_size × accumulation_steps × nproc × nnodes and the data the same"
            )

    # ------------------------------------------------------------------------------------------ loop
    def execute(self) -> int:
        self._build()
        spec, ctx, strategy = self.spec, self.ctx, self.strategy
        A = spec.accumulation_steps
        G = self.layout.global_batch
        self.events.emit(
            "started",
            world_size=ctx.world_size,
            nproc=spec.nproc,
            nnodes=spec.nnodes,
            strategy=spec.strategy,
            device=str(self.device),
            backend=ctx.backend or "none",
            precision=spec.precision,
            total_steps=self.total_steps,
            global_batch_size=G,
            start_step=self.start_step,
            resumed_from=spec.resume_from,
        )
        meter = LossMeter(self.device)
        control = RunControl(self.stop, ctx.rank, ctx.world_size, self.device, CONTROL_EVERY)
        loader = train_loader(
            self.train_set, self.layout, ctx.rank, self.start_step, self.total_steps, spec.data.num_workers, self.device
        )
        batches = iter(loader)
        model, optimizer, scheduler, scaler, loss_fn = (
            strategy.model,
            self.optimizer,
            self.scheduler,
            self.scaler,
            self.loss_fn,
        )
        clip = spec.grad_clip_norm
        model.train()
        self._interval_start = (self.start_step, time.perf_counter())
        last_saved = -1

        for step in range(self.start_step, self.total_steps):
            for a in range(A):
                batch = to_device(next(batches), self.device)
                with strategy.micro_step(last=a == A - 1):
                    with self.autocast():
                        loss = loss_fn(model, batch)
                    scaler.scale(loss / A if A > 1 else loss).backward()
                meter.add(loss, batch_length(batch))
            strategy.sync_gradients()
            if clip is not None:
                scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(strategy.module.parameters(), clip)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()

            done = step + 1
            meter.end_step(done)
            save_due = self._checkpoint_due(done)
            if done == self.total_steps:
                control.settle(meter.first_bad_step)
                stop = False
            elif save_due:
                stop = control.settle(meter.first_bad_step)
            else:
                stop = control.check(done, meter.first_bad_step)
            if stop:
                # Step `done` was trained and the resumed run starts after it: log the partial interval now
                # or its loss is lost (every rank stops at this step, so the reduce lines up).
                self._log(done, meter, G)
                if self.val_loader is not None and self._eval_due(done):
                    self._validate(done)
                path = self._save(done) if last_saved != done else self.run.checkpoint_path(done)
                self.events.emit(
                    "stopped", step=done, checkpoint=str(path.relative_to(self.run.root)), reason="SIGTERM"
                )
                return EXIT_STOPPED
            if done % spec.log_every == 0 or done == self.total_steps:
                self._log(done, meter, G)
            if self.val_loader is not None and self._eval_due(done):
                self._validate(done)
            if save_due:
                self._save(done)
                last_saved = done

        self.events.emit("finished", step=self.total_steps)
        return EXIT_OK

    # ------------------------------------------------------------------------------ interval actions
    def _log(self, done: int, meter: LossMeter, global_batch: int) -> None:
        mean_loss = meter.reduce_mean(self.ctx.distributed)  # the one collective + host sync per interval
        if not self.ctx.is_main:
            return
        first, t0 = self._interval_start
        now = time.perf_counter()
        self._interval_start = (done, now)
        steps_per_s = (done - first) / max(now - t0, 1e-9)
        samples_per_s = steps_per_s * global_batch
        eta = (self.total_steps - done) / steps_per_s if steps_per_s > 0 else None
        epoch = done // self.steps_per_epoch
        emit = self.events.emit
        if mean_loss is not None:
            emit("metric", step=done, name="train/loss", value=mean_loss)
        emit("metric", step=done, name="lr", value=self.scheduler.get_last_lr()[0])
        emit("metric", step=done, name="throughput/samples_per_s", value=samples_per_s)
        emit(
            "progress",
            step=done,
            total_steps=self.total_steps,
            epoch=epoch,
            samples=done * global_batch,
            samples_per_s=samples_per_s,
            eta_s=eta,
        )

    def _eval_due(self, done: int) -> bool:
        every = self.spec.eval_every or self.steps_per_epoch
        return done % every == 0 or done == self.total_steps

    def _checkpoint_due(self, done: int) -> bool:
        c = self.spec.checkpoint
        if done == self.total_steps:
            return True
        if c.every_steps and done % c.every_steps == 0:
            return True
        return bool(c.every_epochs) and done % (c.every_epochs * self.steps_per_epoch) == 0

    @torch.no_grad()
    def _validate(self, done: int) -> None:
        """Each rank scores its shard with the unwrapped module (no collectives inside forward, so
        uneven shards cannot deadlock); one all-reduce of [loss sum, correct, count] gives the exact means."""
        began = time.perf_counter()
        module = self.strategy.module
        module.eval()
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)
        for raw in self.val_loader:
            batch = to_device(raw, self.device)
            n = batch_length(batch)
            with self.autocast():
                if self.has_accuracy:
                    loss_sum, correct = count_correct(module, batch)
                    sums[0] += loss_sum.double()
                    sums[1] += correct
                else:
                    sums[0] += self.loss_fn(module, batch).double() * n
            sums[2] += n
        module.train()
        if self.ctx.distributed:
            dist.all_reduce(sums, op=dist.ReduceOp.SUM)
        if self.ctx.is_main:
            loss_sum, correct, count = sums.tolist()
            if count:
                self.events.emit("metric", step=done, name="val/loss", value=loss_sum / count)
                if self.has_accuracy:
                    self.events.emit("metric", step=done, name="val/accuracy", value=correct / count)
        self._exclude_from_throughput(time.perf_counter() - began)

    def _exclude_from_throughput(self, seconds: float) -> None:
        """Validation and checkpoint time is not training throughput: move the interval's start forward."""
        first, t0 = self._interval_start
        self._interval_start = (first, t0 + seconds)

    def _save(self, done: int) -> Path:
        """Gather every rank's RNG state, then rank 0 writes the checkpoint atomically and prunes old ones."""
        began = time.perf_counter()
        rng = ckpt_io.capture_rng(self.device)
        if self.ctx.distributed:
            all_rng: list[Any] = [None] * self.ctx.world_size
            dist.all_gather_object(all_rng, rng)
        else:
            all_rng = [rng]
        path = self.run.checkpoint_path(done)
        if self.ctx.is_main:
            payload = {
                "model": self.strategy.module.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(),
                "step": done,
                "epoch": done // self.steps_per_epoch,
                "rng": all_rng,
                "world_size": self.ctx.world_size,
                "global_batch_size": self.layout.global_batch,
                "num_train_samples": self.layout.num_samples,
                "spec": json.dumps(self.spec.model_dump(mode="json")),
            }
            saved = ckpt_io.write_atomic(path, payload)
            self.events.emit(
                "checkpoint",
                step=done,
                epoch=done // self.steps_per_epoch,
                path=str(path.relative_to(self.run.root)),
                bytes=saved.bytes,
                sha256=saved.sha256,
            )
            ckpt_io.prune(self.run, self.spec.checkpoint.keep_last)
        self._exclude_from_throughput(time.perf_counter() - began)
        return path

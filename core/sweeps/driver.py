"""The sweep driver: for each active sweep, load its rows → decide (pure, core/sweeps/decide.py) → apply.

Run by the active scheduler at every pass (worker/scheduler.py), so exactly one driver acts at a time
and a sweep survives any restart: everything it knows is in the rows. Each write is its own
transaction; a trial's job and its link row are written together (core/jobs.py `create`'s
before_commit), and the (sweep, number) unique key refuses a second trial with the same number.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from core import audit, jobs, quota_gate
from core.db import get_engine
from core.settings import Settings
from core.sweeps import store
from core.sweeps.decide import Decision, Prune, decide
from core.sweeps.space import SweepSpec, trial_spec
from core.tables import Sweep, SweepTrial

log = logging.getLogger("rankzero.sweeps")


class Driven(NamedTuple):
    active: int  # sweeps running or paused: their trials' pruning is judged each pass
    started: int  # trials started by this pass


def drive_once(settings: Settings) -> Driven:
    """One pass over every running or paused sweep."""
    engine = get_engine(settings.resolved_database_url)
    with Session(engine) as session:
        ids = session.execute(select(col(Sweep.id)).where(col(Sweep.status).in_(store.ACTIVE))).scalars().all()
    started = 0
    for sweep_id in ids:
        try:
            started += _drive(engine, int(sweep_id), settings)
        except Exception:  # one broken sweep must not stop the others (or the scheduler's pass)
            log.exception("sweep %s: the driver's pass failed", sweep_id)
    return Driven(active=len(ids), started=started)


def _drive(engine: Any, sweep_id: int, settings: Settings) -> int:
    with Session(engine) as session:
        sweep = session.get(Sweep, sweep_id)
        if sweep is None or sweep.status not in store.ACTIVE:
            return 0
        spec = SweepSpec.model_validate(sweep.spec)
        views = [view for _, _, view in store.trials(session, sweep)]
        decision = decide(spec, sweep.status, views, name=f"sweep-{sweep_id}")
        return _apply(session, sweep, spec, decision, settings)


def _apply(session: Session, sweep: Sweep, spec: SweepSpec, decision: Decision, settings: Settings) -> int:
    assert sweep.id is not None
    for prune in decision.prune:
        _prune(session, sweep.id, spec, prune)
    for number, rungs in decision.rungs.items():
        session.execute(
            update(SweepTrial)
            .where(col(SweepTrial.sweep_id) == sweep.id, col(SweepTrial.number) == number)
            .values(rungs=rungs)
        )
    session.commit()
    if decision.finished is not None:
        if store.set_status(session, sweep.id, "finished", store.ACTIVE, note=decision.finished):
            log.info("sweep %s finished: %s", sweep.id, decision.finished)
        session.commit()
        return 0
    started = 0
    for new in decision.new:
        try:
            body = trial_spec(spec, new.values, new.number)
        except ValueError as exc:  # a sampled point the spec refuses (a bound validated, a combination not)
            store.set_status(session, sweep.id, "paused", ("running",), note=f"trial {new.number}: {exc}")
            session.commit()
            return started
        link = {"sweep_id": sweep.id, "number": new.number, "params": new.values}
        try:  # the owner's queued quota, decided under her lock like a submit's (core/quota_gate.py)
            quota_gate.admit(session, settings, sweep.owner_id)
        except quota_gate.OverQuota as exc:  # the trial waits for a later pass; the sweep's page says why
            log.info("sweep %s: trial %s waits: %s", sweep.id, new.number, exc)
            _note(session, sweep.id, f"{WAITING}{exc}")
            return started
        try:
            job = jobs.create(
                session,
                body["name"],
                body,
                sweep.queue,
                owner_id=sweep.owner_id,
                before_commit=lambda j, link=link: _link_trial(session, sweep, j, link),
            )
        except IntegrityError:  # another driver made this number meanwhile (a lease handed over mid-pass)
            session.rollback()
            return started
        log.info("sweep %s: trial %s is job %s (%s)", sweep.id, new.number, job.id, new.values)
        started += 1
    return started


WAITING = "new trials wait: "  # the note of a sweep whose next trial is past its owner's quota


def _note(session: Session, sweep_id: int, note: str | None) -> None:
    """Set (or, with None, clear) the quota note; any other note (a pause's reason) is left alone."""
    current = session.execute(select(col(Sweep.note)).where(col(Sweep.id) == sweep_id)).scalar_one_or_none()
    if (note is None and not (current or "").startswith(WAITING)) or current == note:
        return
    if note is not None and current and not current.startswith(WAITING):
        return
    session.execute(update(Sweep).where(col(Sweep.id) == sweep_id).values(note=note[:2000] if note else None))
    session.commit()


def _link_trial(session: Session, sweep: Sweep, job: Any, link: dict[str, Any]) -> None:
    """The trial's link row and its audit entry, in the transaction that makes its job (and the quota note
    goes: a trial started)."""
    session.add(SweepTrial(job_id=job.id, **link))
    if (sweep.note or "").startswith(WAITING):
        session.execute(update(Sweep).where(col(Sweep.id) == sweep.id).values(note=None))
    audit.record_for(
        session,
        sweep.owner_id,
        "job.submit",
        f"job {job.id}",
        f"trial {link['number']} of sweep {sweep.id}: {job.name}",
    )


def _prune(session: Session, sweep_id: int, spec: SweepSpec, prune: Prune) -> None:
    method = spec.early_stopping.method if spec.early_stopping else "pruner"
    detail = (
        f"pruned by sweep {sweep_id} ({method}): {spec.metric} {prune.value:.6g} at step {prune.step} fell "
        "behind the other trials; stopped gracefully, its checkpoint kept"
    )
    if not store.stop_trial(session, prune.job_id, detail):
        return  # it ended meanwhile: it finished on its own, not pruned
    session.execute(
        update(SweepTrial)
        .where(col(SweepTrial.job_id) == prune.job_id)
        .values(pruned=True, pruned_step=prune.step, rungs=prune.rungs)
    )
    log.info("sweep %s: trial %s (job %s) pruned at step %s", sweep_id, prune.number, prune.job_id, prune.step)


__all__ = ["Driven", "drive_once"]

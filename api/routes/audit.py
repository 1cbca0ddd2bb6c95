"""The audit log (issue 23): who did what, when; admins only."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import MAX_ID, Admin, SessionDep
from api.models_team import AuditPublic
from core import audit

router = APIRouter(tags=["audit"])


@router.get("/audit", response_model=list[AuditPublic])
def list_audit(
    session: SessionDep,
    _who: Admin,
    limit: Annotated[int, Query(ge=1, le=audit.MAX_PAGE)] = 100,
    before_id: Annotated[int | None, Query(ge=1, le=MAX_ID, description="Older than this event (paging).")] = None,
    action: Annotated[str | None, Query(max_length=40, pattern=r"^[a-z._]+$")] = None,
    actor: Annotated[str | None, Query(max_length=40, pattern=r"^[a-z][a-z0-9._-]*$")] = None,
) -> list[AuditPublic]:
    """Events, newest first (page back with before_id = the last id seen)."""
    rows = audit.events(session, limit=limit, before_id=before_id, action=action, actor=actor)
    return [AuditPublic.from_row(r) for r in rows]

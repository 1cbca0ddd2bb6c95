"""REST shapes of users, tokens, the audit log and job housekeeping (issue 23)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from core.tables import ApiToken, AuditEvent, User
from core.users import HOST_PATTERN, NAME_PATTERN, TOKEN_NAME_PATTERN, WORKER_PREFIX

RoleName = Literal["viewer", "member", "admin"]
QuotaLimit = Field(None, ge=0, le=1_000_000)
TAG_PATTERN = r"^[A-Za-z0-9._:-]{1,40}$"
MAX_TAGS = 20
MAX_NOTE_CHARS = 10_000
Tag = Annotated[str, Field(pattern=TAG_PATTERN)]


class QuotaPublic(BaseModel):
    max_gpus: int = Field(description="Most GPUs her jobs hold at once.")
    max_cpu_slots: int = Field(description="Most CPU rank slots her jobs hold at once.")
    max_queued: int = Field(description="Most jobs she has queued at once.")
    max_priority: int = Field(100, description="The highest priority she may give a job (her ceiling).")


class UserPublic(BaseModel):
    id: int
    name: str
    role: RoleName
    created_at: datetime
    # Her own limits; null: the member default (RANKZERO_QUOTA_*). Admins have none.
    max_gpus: int | None
    max_cpu_slots: int | None
    max_queued: int | None
    max_priority: int | None = Field(None, description="Her priority ceiling; null: the default (100). Admins: none.")

    @classmethod
    def from_row(cls, user: User) -> UserPublic:
        assert user.id is not None
        return cls(
            id=user.id,
            name=user.name,
            role=user.role,  # pyright: ignore[reportArgumentType]  (validated by pydantic)
            created_at=user.created_at,
            max_gpus=user.max_gpus,
            max_cpu_slots=user.max_cpu_slots,
            max_queued=user.max_queued,
            max_priority=user.max_priority,
        )


class Me(UserPublic):
    quota: QuotaPublic | None = Field(description="The limits in force (null for an admin: none).")


class TokenPublic(BaseModel):
    id: int
    user: str
    name: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None

    @classmethod
    def from_row(cls, row: ApiToken, user: str) -> TokenPublic:
        assert row.id is not None
        return cls(
            id=row.id,
            user=user,
            name=row.name,
            created_at=row.created_at,
            last_used_at=row.last_used_at,
            revoked_at=row.revoked_at,
        )


class NewToken(TokenPublic):
    token: str = Field(description="The token itself: shown this once, stored only as a hash.")


class UserCreate(BaseModel):
    model_config = {"extra": "forbid"}
    name: str = Field(pattern=NAME_PATTERN, description="Lowercase letters, digits, '.', '_', '-'.")
    role: RoleName = "member"
    token_name: str = Field("default", pattern=TOKEN_NAME_PATTERN, description="Name of her first token.")


class UserCreated(BaseModel):
    user: UserPublic
    token: NewToken


class UserChange(BaseModel):
    """Only the fields sent change; a quota sent as null goes back to the member default."""

    model_config = {"extra": "forbid"}
    role: RoleName | None = None
    max_gpus: int | None = QuotaLimit
    max_cpu_slots: int | None = QuotaLimit
    max_queued: int | None = QuotaLimit
    max_priority: int | None = Field(
        None, ge=-1000, le=1000, description="Her priority ceiling (null: the default); above it needs an admin."
    )


class TokenCreate(BaseModel):
    model_config = {"extra": "forbid"}
    name: str = Field(pattern=TOKEN_NAME_PATTERN)


class AuditPublic(BaseModel):
    id: int
    at: datetime
    actor: str
    action: str
    target: str
    detail: str | None

    @classmethod
    def from_row(cls, row: AuditEvent) -> AuditPublic:
        assert row.id is not None
        return cls(id=row.id, at=row.at, actor=row.actor, action=row.action, target=row.target, detail=row.detail)


class JobAnnotations(BaseModel):
    """Tags and note of a job; only the fields sent change."""

    model_config = {"extra": "forbid"}
    tags: list[Tag] | None = Field(None, max_length=MAX_TAGS, description=f"At most {MAX_TAGS}, each {TAG_PATTERN}.")
    note: str | None = Field(None, max_length=MAX_NOTE_CHARS)


class WorkerCreate(BaseModel):
    """A worker host's credential (issue 34): named by the host's RANKZERO_HOST_NAME."""

    model_config = {"extra": "forbid"}
    host: str = Field(pattern=HOST_PATTERN, description="The host's name (RANKZERO_HOST_NAME).")


class WorkerPublic(BaseModel):
    host: str
    token_id: int | None = Field(description="Its newest token (GET /api/workers never shows a token).")
    created_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None = Field(description="Set once revoked: the host is refused from then on.")

    @classmethod
    def from_rows(cls, user: User, token: ApiToken | None) -> WorkerPublic:
        return cls(
            host=user.name.removeprefix(WORKER_PREFIX),
            token_id=token.id if token else None,
            created_at=token.created_at if token else None,
            last_used_at=token.last_used_at if token else None,
            revoked_at=token.revoked_at if token else None,
        )


class WorkerCreated(WorkerPublic):
    token: str = Field(description="Shown once: set it as RANKZERO_WORKER_TOKEN on that host.")


class WorkerMe(BaseModel):
    host: str

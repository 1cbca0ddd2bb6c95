"""Users and their tokens (issue 23): admins add users and set roles and quotas; everyone sees herself,
and lists, adds and revokes her own tokens. A token is shown once, when made."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, status
from sqlmodel import Session, col, select

from api.auth import forbidden, forget_tokens, permit
from api.deps import MAX_ID, Admin, CurrentUser, SessionDep, SettingsDep, UserAdmin, UserChanger
from api.models_team import (
    Me,
    NewToken,
    QuotaPublic,
    TokenCreate,
    TokenPublic,
    UserChange,
    UserCreate,
    UserCreated,
    UserPublic,
)
from core import audit, quotas, team_pass, users
from core.tables import ApiToken, User
from core.users import NAME_PATTERN, Principal

router = APIRouter(tags=["users"])
UserName = Annotated[str, Path(pattern=NAME_PATTERN, description="The user's name.")]
TokenId = Annotated[int, Path(ge=1, le=MAX_ID, description="Token id (GET /api/users/{name}/tokens).")]


def _user_or_404(session: Session, name: str) -> User:
    user = users.by_name(session, name)
    if user is None or user.role == users.WORKER_ROLE:  # a worker host's credential: /api/workers only
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no user {name!r}: list users with GET /api/users (admin)")
    return user


def _self_or_admin(who: Principal, user: User, what: str) -> None:
    if who.role != "admin" and who.user_id != user.id:
        raise forbidden("admin", who, f"{what} of another user")


def _new_token(session: Session, user: User, name: str) -> NewToken:
    try:
        row, plaintext = users.add_token(session, user, name)
    except users.UserError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    return NewToken(**TokenPublic.from_row(row, user.name).model_dump(), token=plaintext)


@router.get("/me", response_model=Me)
def me(session: SessionDep, settings: SettingsDep, who: CurrentUser) -> Me:
    """Who the credentials are, and the quota in force."""
    user = session.get(User, who.user_id)
    assert user is not None
    quota = team_pass.quota_of(user, settings)
    limits = (
        None
        if user.role == "admin"
        else QuotaPublic(
            max_gpus=quota.max_gpus,
            max_cpu_slots=quota.max_slots,
            max_queued=quota.max_queued,
            max_priority=quotas.ceiling_of(user.role, user.max_priority) or 0,
        )
    )
    return Me(**UserPublic.from_row(user).model_dump(), quota=limits)


@router.get("/users", response_model=list[UserPublic])
def list_users(session: SessionDep, _who: Admin) -> list[UserPublic]:
    rows = session.exec(select(User).where(User.role != users.WORKER_ROLE).order_by(col(User.id))).all()
    return [UserPublic.from_row(u) for u in rows]  # worker hosts' credentials: GET /api/workers


@router.post("/users", status_code=status.HTTP_201_CREATED, response_model=UserCreated)
def add_user(body: UserCreate, session: SessionDep, who: UserAdmin) -> UserCreated:
    """Add a user and her first token (shown once: hand it over privately)."""
    try:
        user = users.add_user(session, body.name, body.role)
    except users.UserError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    token = _new_token(session, user, body.token_name)
    audit.record(session, who, "user.add", f"user {user.name}", f"role {user.role}")
    audit.record(session, who, "token.add", f"token {token.id} of {user.name}", token.name)
    session.commit()
    session.refresh(user)
    return UserCreated(user=UserPublic.from_row(user), token=token)


@router.patch("/users/{name}", response_model=UserPublic)
def change_user(name: UserName, body: UserChange, session: SessionDep, who: UserChanger) -> UserPublic:
    """Set a user's role or quotas (only the fields sent; a quota sent as null: the member default)."""
    user = _user_or_404(session, name)
    changes = body.model_dump(exclude_unset=True)
    if "role" in changes and changes["role"] is None:
        raise HTTPException(422, "role cannot be null: send viewer, member or admin")
    if user.id == users.FIRST_ADMIN_ID and changes.get("role", "admin") != "admin":
        raise HTTPException(status.HTTP_409_CONFLICT, "the first admin (the server token's user) stays admin")
    for field, value in changes.items():
        setattr(user, field, value)
    session.add(user)
    action = "user.role" if "role" in changes else "user.quota"
    audit.record(session, who, action, f"user {user.name}", ", ".join(f"{k}={v}" for k, v in changes.items()))
    session.commit()
    session.refresh(user)
    return UserPublic.from_row(user)


@router.get("/users/{name}/tokens", response_model=list[TokenPublic])
def list_tokens(name: UserName, session: SessionDep, who: CurrentUser) -> list[TokenPublic]:
    """A user's tokens, revoked ones included (never the tokens themselves). Admins, or the user herself."""
    user = _user_or_404(session, name)
    _self_or_admin(who, user, "listing the tokens")
    rows = session.exec(select(ApiToken).where(ApiToken.user_id == user.id).order_by(col(ApiToken.id))).all()
    return [TokenPublic.from_row(r, user.name) for r in rows]


@router.post("/users/{name}/tokens", status_code=status.HTTP_201_CREATED, response_model=NewToken)
def add_token(name: UserName, body: TokenCreate, session: SessionDep, who: CurrentUser) -> NewToken:
    """A new token (shown once). Admins, or a member for herself."""
    user = _user_or_404(session, name)
    permit(who, "token.add", user.id, f"a token of {user.name}")
    token = _new_token(session, user, body.name)
    audit.record(session, who, "token.add", f"token {token.id} of {user.name}", token.name)
    session.commit()
    return token


@router.post("/tokens/{token_id}/revoke", response_model=TokenPublic)
def revoke_token(token_id: TokenId, session: SessionDep, who: CurrentUser) -> TokenPublic:
    """Revoke a token: refused from now on, and every dashboard session opened with it ends."""
    row = session.get(ApiToken, token_id)
    owner = session.get(User, row.user_id) if row is not None else None
    if row is None or owner is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no token {token_id}: GET /api/users/{{name}}/tokens")
    permit(who, "token.revoke", owner.id, f"token {token_id} of {owner.name}")
    users.revoke_token(session, token_id)
    audit.record(session, who, "token.revoke", f"token {token_id} of {owner.name}", row.name)
    session.commit()
    forget_tokens()
    session.refresh(row)
    return TokenPublic.from_row(row, owner.name)

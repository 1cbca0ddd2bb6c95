"""Users, their API tokens and their dashboard sessions (issue 23). Database reads and writes only;
the HTTP side (which credential a request carries, which role a route needs) is api/auth.py.

Roles, weakest first: viewer (reads), member (submits; changes only her own jobs), admin
(everything: users, hosts, anyone's jobs). The server's own token is the first admin's (id 1, made
by migration 0105), so an upgraded instance keeps working exactly as before.

Tokens are 256 random bits (`secrets.token_urlsafe(32)`), shown once and stored only as their
SHA-256: a table leak gives no usable token, and with that much entropy a salted slow hash would
add nothing but cost to every request.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Literal

from sqlalchemy import delete, update
from sqlmodel import Session, col, select

from core.tables import ApiToken, User, WebSession, utcnow

Role = Literal["viewer", "member", "admin", "worker"]
ROLES: tuple[Role, ...] = ("viewer", "member", "admin")  # a user's roles, weakest first
WORKER_ROLE: Role = "worker"  # a worker host's credential (issue 34): below every user role, scoped to its routes
FIRST_ADMIN_ID = 1
NAME_PATTERN = r"^[a-z][a-z0-9._-]{0,39}$"
TOKEN_NAME_PATTERN = r"^[A-Za-z0-9._ -]{1,60}$"
MAX_TOKENS_PER_USER = 50
# last_used_at is written at most this often per token: a busy CLI must not turn every read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class UserError(ValueError):
    """A request about users or tokens that cannot be done; the message says why and what to do."""


@dataclass(frozen=True)
class Principal:
    """Who is calling: the user, her role, and the token she used (None: the server token or a session
    opened with it)."""

    user_id: int
    name: str
    role: Role
    token_id: int | None = None

    def at_least(self, role: Role) -> bool:
        if self.role not in ROLES or role not in ROLES:  # a worker credential is no user: it holds no user role
            return self.role == role
        return ROLES.index(self.role) >= ROLES.index(role)


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.strip().encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


def check_name(name: str) -> str:
    if not re.fullmatch(NAME_PATTERN, name):
        raise UserError(
            f"user name {name!r} refused: 1-40 characters, lowercase letters, digits, '.', '_' or '-', "
            "starting with a letter"
        )
    return name


def principal_of(user: User, token_id: int | None = None) -> Principal:
    assert user.id is not None
    role = user.role if user.role in (*ROLES, WORKER_ROLE) else "viewer"  # an unknown role reads only
    return Principal(user.id, user.name, role, token_id)  # pyright: ignore[reportArgumentType]  (checked above)


def first_admin(session: Session) -> Principal:
    user = session.get(User, FIRST_ADMIN_ID)
    if user is None:  # the migration makes it; a hand-edited database may lack it
        user = User(id=FIRST_ADMIN_ID, name="admin", role="admin")
        session.add(user)
        session.commit()
    return principal_of(user)


def by_name(session: Session, name: str) -> User | None:
    return session.exec(select(User).where(User.name == name)).first()


def add_user(session: Session, name: str, role: Role) -> User:
    """A new user (not committed). UserError when the name is taken or malformed."""
    check_name(name)
    if role not in ROLES:
        raise UserError(f"role {role!r} refused: one of {', '.join(ROLES)}")
    if by_name(session, name) is not None:
        raise UserError(f"user {name!r} exists already: add a token with `rankzero tokens add {name}`")
    user = User(name=name, role=role)
    session.add(user)
    session.flush()
    return user


def add_token(session: Session, user: User, name: str) -> tuple[ApiToken, str]:
    """A new token for `user` (not committed) and its plaintext, which is never stored."""
    if not re.fullmatch(TOKEN_NAME_PATTERN, name):
        raise UserError(f"token name {name!r} refused: 1-60 letters, digits, spaces, '.', '_' or '-'")
    live = session.exec(select(ApiToken).where(ApiToken.user_id == user.id, col(ApiToken.revoked_at).is_(None))).all()
    if len(live) >= MAX_TOKENS_PER_USER:
        raise UserError(f"user {user.name!r} has {len(live)} live tokens already: revoke one first")
    plaintext = new_token()
    assert user.id is not None
    row = ApiToken(user_id=user.id, name=name, token_sha256=token_sha256(plaintext))
    session.add(row)
    session.flush()
    return row, plaintext


def authenticate(session: Session, token: str) -> Principal | None:
    """The user a (non-server) token belongs to, None when it is unknown or revoked. Records its use."""
    found = session.exec(
        select(ApiToken, User)
        .join(User, col(User.id) == col(ApiToken.user_id))
        .where(ApiToken.token_sha256 == token_sha256(token), col(ApiToken.revoked_at).is_(None))
    ).first()
    if found is None:
        return None
    row, user = found
    now = utcnow()
    last = row.last_used_at
    if last is not None and last.tzinfo is None:  # SQLite hands back naive UTC
        last = last.replace(tzinfo=timezone.utc)
    if last is None or now - last > LAST_USED_RESOLUTION:
        session.execute(update(ApiToken).where(col(ApiToken.id) == row.id).values(last_used_at=now))
        session.commit()
    return principal_of(user, row.id)


def revoke_token(session: Session, token_id: int) -> ApiToken:
    """Revoke a token and end every dashboard session opened with it (not committed)."""
    row = session.get(ApiToken, token_id)
    if row is None:
        raise UserError(f"no token {token_id}: list them with `rankzero users list`")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        session.add(row)
    session.execute(delete(WebSession).where(col(WebSession.token_id) == token_id))
    return row


# --- worker hosts' credentials (issue 34) ------------------------------------------------------------

HOST_PATTERN = r"^[a-z0-9][a-z0-9.-]{0,31}$"
WORKER_PREFIX = "worker."  # a worker credential's user is `worker.<host>`: no person's name has a dot there


def worker_user_name(host: str) -> str:
    if not re.fullmatch(HOST_PATTERN, host):
        raise UserError(f"host name {host!r} refused: 1-32 lowercase letters, digits, '.' or '-' (RANKZERO_HOST_NAME)")
    return WORKER_PREFIX + host


def add_worker(session: Session, host: str) -> tuple[User, ApiToken, str]:
    """A new credential for worker host `host` (not committed): its user (made on first use, role worker),
    the token row and its plaintext. A host has one live credential: adding one revokes the host's others."""
    name = worker_user_name(host)
    user = by_name(session, name)
    if user is None:
        user = User(name=name, role=WORKER_ROLE)
        session.add(user)
        session.flush()
    elif user.role != WORKER_ROLE:
        raise UserError(f"{name!r} is a user's name, not a worker's: pick another host name")
    revoke_worker(session, host)
    row, plaintext = add_token(session, user, f"host {host}")
    return user, row, plaintext


def revoke_worker(session: Session, host: str) -> int:
    """Revoke every live token of worker host `host` (not committed); how many."""
    user = by_name(session, worker_user_name(host))
    if user is None or user.role != WORKER_ROLE:
        return 0
    live = session.exec(select(ApiToken).where(ApiToken.user_id == user.id, col(ApiToken.revoked_at).is_(None))).all()
    for row in live:
        assert row.id is not None
        revoke_token(session, row.id)
    return len(live)


def workers(session: Session) -> list[tuple[User, ApiToken | None]]:
    """Each worker host's user and its newest token (None: never given one)."""
    out = []
    for user in session.exec(select(User).where(User.role == WORKER_ROLE).order_by(col(User.name))).all():
        newest = session.exec(
            select(ApiToken).where(ApiToken.user_id == user.id).order_by(col(ApiToken.id).desc())
        ).first()
        out.append((user, newest))
    return out


# --- dashboard sessions ---------------------------------------------------------------------------------


def open_session(session: Session, who: Principal, max_age_s: float) -> tuple[str, str]:
    """A new sign-in of `who`: (session id, CSRF secret), committed. Expired sessions are dropped here,
    so the table holds about as many rows as there are signed-in browsers."""
    cutoff = datetime.now(timezone.utc) - timedelta(seconds=max_age_s)
    session.execute(delete(WebSession).where(col(WebSession.created_at) < cutoff))
    sid, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    session.add(WebSession(id=sid, user_id=who.user_id, token_id=who.token_id, csrf=csrf))
    session.commit()
    return sid, csrf


def session_user(session: Session, sid: str, max_age_s: float) -> tuple[Principal, str] | None:
    """The user and CSRF secret of a live session, None when it ended, expired or never was."""
    found = session.exec(
        select(WebSession, User).join(User, col(User.id) == col(WebSession.user_id)).where(WebSession.id == sid)
    ).first()
    if found is None:
        return None
    row, user = found
    created = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=timezone.utc)
    if datetime.now(timezone.utc) - created > timedelta(seconds=max_age_s):
        return None
    return principal_of(user, row.token_id), row.csrf


def close_session(session: Session, sid: str) -> None:
    session.execute(delete(WebSession).where(col(WebSession.id) == sid))
    session.commit()

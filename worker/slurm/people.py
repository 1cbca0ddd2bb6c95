"""Whose job it is on the Slurm cluster: the site's map from rankzero users to its Unix users (and Slurm
accounts/QOS), read from the TOML file RANKZERO_SLURM_USER_MAP names, and the decision (pure) of whom a job is
submitted as.

    [users.alice]            # the rankzero user name
    unix_user = "alice"      # who submits it: Slurm's accounting, fair share and limits see this user
    account = "ml-vision"    # optional: sbatch --account (else the pool's RANKZERO_SLURM_ACCOUNT)
    qos = "normal"           # optional: sbatch --qos (else the pool's RANKZERO_SLURM_QOS)

A mapped job is submitted, cancelled and requeued through `slurm_submit_as` (default `sudo -n -u {user} --`: the
site's sudo rule lets the agent's user run sbatch, scancel and scontrol as the job's users, as Determined's launcher
does); its ranks run as that user. An owner the map does not name runs as the agent's own user, or is refused
(RANKZERO_SLURM_UNMAPPED). The file is read again when it changes: a new member needs no agent restart.
"""

from __future__ import annotations

import grp
import os
import pwd
import shlex
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.settings import Settings
from worker.slurm.commands import Runner, SlurmError, user_name

UNIX_NAME = r"^[a-z_][a-z0-9_.-]{0,31}$"  # useradd's portable names (no '$': no machine accounts)
SLURM_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class Unmapped(ValueError):
    """The job's owner has no Unix user on this pool and the pool refuses unmapped owners (the message says whom to
    ask), or the map names a Unix user this login node does not know."""


class SiteUser(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    unix_user: str = Field(pattern=UNIX_NAME)
    account: str | None = Field(None, pattern=SLURM_NAME)
    qos: str | None = Field(None, pattern=SLURM_NAME)


class UserMapFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    users: dict[str, SiteUser] = Field(default_factory=dict, max_length=100_000)


def parse(text: str, where: str) -> dict[str, SiteUser]:
    """The map in `text` (TOML); ValueError naming the file and the entry that is wrong."""
    if sys.version_info < (3, 11):  # pragma: no cover (the service runs 3.11+; the trainer never reads the map)
        raise ValueError(f"{where}: reading the user map needs Python 3.11 for the agent")
    import tomllib

    try:
        loaded = UserMapFile.model_validate(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{where}: not TOML: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"{where}: {at}: {first['msg']} (see docs/slurm.md 'Jobs that belong to people')") from None
    return loaded.users


@dataclass(frozen=True)
class Submitter:
    """Whom a job is submitted as: `unix_user` None is the agent's own user (the service account)."""

    unix_user: str | None
    account: str | None
    qos: str | None

    def words(self) -> str:
        """For the job's timeline: "as alice (account ml-vision)"."""
        who = f"as {self.unix_user}" if self.unix_user else "as the service account"
        extra = ", ".join(f"{k} {v}" for k, v in (("account", self.account), ("qos", self.qos)) if v)
        return f"{who} ({extra})" if extra else who


def submitter_for(owner: str | None, users: dict[str, SiteUser] | None, settings: Settings) -> Submitter:
    """Whom the job of `owner` (a rankzero user name; None: a row without an owner) is submitted as. Unmapped
    when the pool refuses owners its map does not name."""
    service = Submitter(None, settings.slurm_account, settings.slurm_qos)
    if users is None:  # no map: every job is the service account's (the documented default)
        return service
    found = users.get(owner) if owner is not None else None
    if found is None:
        if settings.slurm_unmapped == "service":
            return service
        who = f"rankzero user {owner!r}" if owner is not None else "a job without an owner"
        raise Unmapped(
            f"{who} has no Unix user on Slurm pool {settings.slurm_pool}, which runs only its members' jobs: ask the "
            f"pool's admin to add [users.{owner or 'NAME'}] to {settings.slurm_user_map} (RANKZERO_SLURM_USER_MAP)"
        )
    return Submitter(found.unix_user, found.account or settings.slurm_account, found.qos or settings.slurm_qos)


def prefix(submit_as: str, unix_user: str) -> tuple[str, ...]:
    """The words that run a command as `unix_user` ('sudo -n -u {user} --' → sudo -n -u alice --)."""
    return tuple(word.replace("{user}", unix_user) for word in shlex.split(submit_as))


def login_environment(unix_user: str) -> dict[str, str]:
    """HOME, USER, LOGNAME and SHELL of `unix_user` as this login node knows it: the batch script's, instead of the
    agent's (Unmapped when the node does not know the user)."""
    try:
        entry = pwd.getpwnam(unix_user)
    except KeyError:
        raise Unmapped(
            f"the Slurm pool's user map names Unix user {unix_user!r}, which this login node does not know: create "
            "the account or correct RANKZERO_SLURM_USER_MAP"
        ) from None
    if entry.pw_uid == 0:  # a job is never root on the cluster because of a line in a file
        raise Unmapped(f"the Slurm pool's user map names {unix_user!r}, which is uid 0: map people to their own users")
    shell = entry.pw_shell or "/bin/sh"
    return {"HOME": entry.pw_dir, "USER": unix_user, "LOGNAME": unix_user, "SHELL": shell}


@dataclass
class UserMap:
    """The map file, read again when its modification time or size changes (a site adds a member: no restart)."""

    path: Path
    _stamp: tuple[int, int] | None = None
    _users: dict[str, SiteUser] | None = None

    def current(self) -> dict[str, SiteUser]:
        """The map as the file says now; ValueError when it is missing or wrong (nothing is submitted then: a job
        must never run as the wrong user because the file was being edited)."""
        try:
            stat = self.path.stat()
        except OSError as exc:
            raise ValueError(f"RANKZERO_SLURM_USER_MAP {self.path}: {exc.strerror}") from None
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp or self._users is None:
            self._users = parse(self.path.read_text(encoding="utf-8"), str(self.path))
            self._stamp = stamp
        return self._users

    def unix_users(self) -> list[str]:
        """Every Unix user the map names, sorted (whose jobs the agent's `squeue` lists)."""
        try:
            return sorted({u.unix_user for u in self.current().values()})
        except (OSError, ValueError):
            return sorted({u.unix_user for u in (self._users or {}).values()})


def shared_runs_words(
    runs_dir: Path, unix_user: str, mode: int, group: str, user_in: bool, agent_in: bool
) -> str | None:
    """Why a job of `unix_user` could not share the runs dir with the agent (None: it can), pure: the dir must be a
    setgid folder, group-writable, of a group both are in (the job's files then belong to that group, and umask 0007
    keeps them group-writable: the agent reads and cleans them up)."""
    missing = [
        what
        for what, ok in (
            ("setgid", mode & stat.S_ISGID),
            ("group-writable", mode & stat.S_IWGRP and mode & stat.S_IXGRP),
            (f"of a group {unix_user} is in", user_in),
            ("of a group the agent's user is in", agent_in),
        )
        if not ok
    ]
    if not missing:
        return None
    return (
        f"the runs dir {runs_dir} (group {group}) is not shared with {unix_user}: it is not {', '.join(missing)}. Make "
        f"it a setgid folder of a group both are in: `chgrp rankzero-jobs {runs_dir} && chmod 2770 {runs_dir}` and "
        f"`usermod -aG rankzero-jobs {unix_user}` (docs/slurm.md 'Jobs that belong to people')"
    )


def shared_runs_problem(runs_dir: Path, unix_user: str) -> str | None:
    """`shared_runs_words` for the runs dir as it is on this login node."""
    try:
        st = runs_dir.stat()
        entry = pwd.getpwnam(unix_user)
    except KeyError:
        return f"Unix user {unix_user!r} is not known on this login node"
    except OSError as exc:
        return f"the runs dir {runs_dir}: {exc.strerror}"
    try:
        group = grp.getgrgid(st.st_gid)
        name, members = group.gr_name, set(group.gr_mem)
    except KeyError:
        name, members = str(st.st_gid), set()
    user_in = entry.pw_gid == st.st_gid or unix_user in members
    agent_in = os.geteuid() == 0 or st.st_gid in (os.getegid(), *os.getgroups())
    return shared_runs_words(runs_dir, unix_user, st.st_mode, name, user_in, agent_in)


@dataclass
class SiteUsers:
    """The agent's side of the map: whose jobs it lists, whom a job is submitted as, and the runner of Slurm's
    commands for a job of a given user (the settings are read at each call: a test or a reload may change them)."""

    map: UserMap | None = None

    def users(self, settings: Settings) -> UserMap | None:
        path = settings.slurm_user_map
        if path is None:
            return None
        if self.map is None or self.map.path != path:
            self.map = UserMap(path)
        return self.map

    def unreadable(self, settings: Settings) -> str | None:
        """Why the map cannot be read now (None: no map, or it reads): the agent submits nothing meanwhile."""
        users = self.users(settings)
        try:
            if users is not None:
                users.current()
        except ValueError as exc:
            return str(exc)
        return None

    def listed(self, settings: Settings) -> list[str]:
        """Whose jobs `squeue` lists: the agent's own only (`--me`) without a map; with one, every mapped user's."""
        users = self.users(settings)
        return [] if users is None else sorted({user_name(os.geteuid()), *users.unix_users()})

    def submitter(self, settings: Settings, owner: str | None) -> Submitter:
        users = self.users(settings)
        return submitter_for(owner, users.current() if users is not None else None, settings)

    def runner(self, settings: Settings, run: Runner, unix_user: str | None) -> Runner:
        """`run` as `unix_user` (through settings.slurm_submit_as); the agent's own for its own user or no map."""
        if not unix_user or self.users(settings) is None or unix_user == user_name(os.geteuid()):
            return run
        return run.as_user(prefix(settings.slurm_submit_as, unix_user))


def check_lines(settings: Settings, run: Runner) -> list[str]:
    """`rankzero slurm-agent --check` with a map: per mapped Unix user, whether the agent can submit as that user
    (`slurm_submit_as` + `sbatch --version`, what the sudo rule must allow) and whether the runs dir is shared with
    it; "ok: …" / "FAILED: …" lines, each failure saying what to change."""
    if settings.slurm_user_map is None:
        return []
    try:
        users = UserMap(settings.slurm_user_map).current()
    except ValueError as exc:
        return [f"FAILED: {exc}"]
    lines = []
    for unix_user in sorted({u.unix_user for u in users.values()}):
        problems = []
        try:
            run.as_user(prefix(settings.slurm_submit_as, unix_user))(["sbatch", "--version"])
        except SlurmError as exc:  # what sudo or sbatch said is the sentence
            problems.append(
                f"the agent cannot run sbatch as {unix_user} through {settings.slurm_submit_as!r} ({exc}): add the "
                "sudo rule of docs/slurm.md 'Jobs that belong to people'"
            )
        if (shared := shared_runs_problem(settings.resolved_runs_dir, unix_user)) is not None:
            problems.append(shared)
        lines += [f"FAILED: {p}" for p in problems] or [f"ok: submits as {unix_user}; the runs dir is shared with it"]
    return lines

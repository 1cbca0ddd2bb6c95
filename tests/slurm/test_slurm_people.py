"""Jobs that belong to people (worker/slurm/people.py): the site's map from rankzero users to Unix users and Slurm
accounts, by tables, and on the real test cluster: a mapped member's job is submitted through the documented
`sudo -n -u {user}` prefix, `squeue` shows it under her Unix user with her account, its ranks run as that user with
her HOME, and the files it writes stay readable by the agent; rankzero's cancel reaches it through the same prefix;
an owner the map does not name is refused, saying whom to ask."""

from __future__ import annotations

import grp
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session

from core import jobs
from core.settings import Settings
from core.tables import JobStatus
from core.users import add_user
from tests.slurm.cluster import SlurmCluster
from tests.slurm.conftest import run_dir
from tests.slurm.driving import TERMINAL, drive, timeline
from tests.support.deadlines import deadline_in
from worker.slurm import commands, people
from worker.slurm.agent import Agent
from worker.slurm.script import BatchJob, render

pytestmark = pytest.mark.xdist_group("slurm")
S = JobStatus
POOL = Settings.model_validate({"slurm_pool": "gpu", "slurm_account": "pool-acct", "slurm_qos": "pool-qos"})
MAP = """
[users.alice]
unix_user = "alice"
account = "ml-vision"

[users.bob]
unix_user = "bsmith"
qos = "long"
"""


@pytest.mark.parametrize(
    ("owner", "unmapped", "got"),
    [
        ("alice", "service", people.Submitter("alice", "ml-vision", "pool-qos")),  # her account, the pool's QOS
        ("bob", "refuse", people.Submitter("bsmith", "pool-acct", "long")),
        ("carol", "service", people.Submitter(None, "pool-acct", "pool-qos")),  # the documented default
        (None, "service", people.Submitter(None, "pool-acct", "pool-qos")),
    ],
)
def test_whom_a_job_is_submitted_as(owner: str | None, unmapped: str, got: people.Submitter) -> None:
    settings = POOL.model_copy(update={"slurm_unmapped": unmapped})
    assert people.submitter_for(owner, people.parse(MAP, "map.toml"), settings) == got


def test_without_a_map_every_job_is_the_service_accounts() -> None:
    assert people.submitter_for("alice", None, POOL) == people.Submitter(None, "pool-acct", "pool-qos")
    assert people.Submitter(None, None, None).words() == "as the service account"
    assert people.Submitter("alice", "ml", None).words() == "as alice (account ml)"


@pytest.mark.parametrize("owner", ["carol", None])
def test_a_pool_that_refuses_unmapped_owners_says_whom_to_ask(owner: str | None) -> None:
    settings = POOL.model_copy(update={"slurm_unmapped": "refuse", "slurm_user_map": Path("/etc/rz/users.toml")})
    with pytest.raises(people.Unmapped, match=r"has no Unix user on Slurm pool gpu.*ask the pool's admin to add") as e:
        people.submitter_for(owner, people.parse(MAP, "map.toml"), settings)
    assert "/etc/rz/users.toml" in str(e.value)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[users.alice]\nunix_user = 'root; rm -rf /'\n", "users.alice.unix_user: String should match pattern"),
        ("[users.alice]\nunix_user = 'alice'\naccount = '--uid=0'\n", "users.alice.account"),
        ("[users.alice]\nunix_user = 'alice'\nshell = 'x'\n", "users.alice.shell: Extra inputs"),
        ("[users.alice]\n", "users.alice.unix_user: Field required"),
        ("[users\n", "not TOML"),
        ("[groups.a]\n", "groups: Extra inputs"),
    ],
)
def test_a_wrong_map_is_refused_naming_the_file_and_the_entry(text: str, words: str) -> None:
    with pytest.raises(ValueError, match="map.toml") as e:
        people.parse(text, "map.toml")
    assert words in str(e.value)


@pytest.mark.parametrize(
    ("mode", "user_in", "agent_in", "words"),
    [
        (0o2770, True, True, None),
        (0o2775, True, True, None),
        (0o0770, True, True, "it is not setgid"),
        (0o2750, True, True, "it is not group-writable"),
        (0o2770, False, True, "it is not of a group alice is in"),
        (0o2770, True, False, "it is not of a group the agent's user is in"),
    ],
)
def test_the_runs_dir_must_be_shared_through_a_group(mode: int, user_in: bool, agent_in: bool, words: str) -> None:
    got = people.shared_runs_words(Path("/runs"), "alice", stat.S_IFDIR | mode, "jobs", user_in, agent_in)
    if words is None:
        assert got is None
    else:
        assert got is not None and words in got and "chmod 2770 /runs" in got


def test_a_map_entry_is_never_root_and_names_a_user_the_login_node_knows() -> None:
    with pytest.raises(people.Unmapped, match="uid 0"):
        people.login_environment("root")
    with pytest.raises(people.Unmapped, match="does not know"):
        people.login_environment("nosuchuser-rz")
    assert people.login_environment("nobody")["USER"] == "nobody"


def test_the_map_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "users.toml"
    path.write_text(MAP)
    users = people.UserMap(path)
    assert users.unix_users() == ["alice", "bsmith"]
    path.write_text(MAP + "\n[users.dave]\nunix_user = 'dave'\n")
    assert users.unix_users() == ["alice", "bsmith", "dave"]
    path.write_text("[users\n")  # being edited: nothing is submitted, the users already known are still listed
    with pytest.raises(ValueError, match="not TOML"):
        users.current()
    site = people.SiteUsers(users)
    assert "not TOML" in str(site.unreadable(POOL.model_copy(update={"slurm_user_map": path})))
    assert site.unreadable(POOL) is None
    assert users.unix_users() == ["alice", "bsmith", "dave"]
    path.unlink()
    with pytest.raises(ValueError, match="RANKZERO_SLURM_USER_MAP"):
        users.current()


def test_slurm_commands_run_as_the_jobs_user_and_squeue_lists_every_mapped_user(tmp_path: Path) -> None:
    path = tmp_path / "users.toml"
    path.write_text(MAP)
    settings = POOL.model_copy(update={"slurm_user_map": path})
    site, run = people.SiteUsers(), commands.Runner()
    assert site.runner(settings, run, "alice").prefix == ("sudo", "-n", "-u", "alice", "--")
    assert site.runner(settings, run, commands.user_name(os.geteuid())) is run  # the agent's own jobs
    assert site.runner(POOL, run, "alice") is run  # no map: everything is the agent's
    assert commands.whose([]) == ["--me"]
    assert commands.whose(site.listed(settings)) == [f"--user=alice,bsmith,{commands.user_name(os.geteuid())}"]
    with pytest.raises(ValueError, match="naming \\{user\\}"):
        Settings.model_validate({"slurm_submit_as": "sudo -n --"})


def test_squeue_says_whose_job_it_is_and_a_shared_job_keeps_its_files_group_writable() -> None:
    line = "41|RUNNING|None|n1|low|0|2026-12-07T10:00:00|0|alice|"
    assert commands.parse_squeue(line)["41"].user == "alice"
    assert commands.parse_squeue("41|RUNNING|None|n1|low|0|now|0|")["41"].user == ""  # an older squeue's line
    job = BatchJob(pool="gpu", job_id=7, first_attempt=1, run_root=Path("/runs/job_7"), python="/py", nnodes=1,
                   ntasks_per_node=1)  # fmt: skip
    assert "umask" not in render(job)
    assert "\nset -u\numask 0007\n" in render(BatchJob(**{**job.__dict__, "umask": 0o007}))


# --- on the real cluster -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SiteAccounts:
    group: str
    mapped: str  # the Unix user of rankzero user "alice"
    home: Path
    runs: Path
    map_file: Path


def _traverse_for(group: str, paths: list[Path]) -> list[Path]:
    """Give `group` search (x) on every folder above `paths` that others cannot search (the service's Python lives
    under /root here): the folders changed, for the teardown to take the ACL entries back."""
    changed: list[Path] = []
    for path in paths:
        for folder in reversed(path.resolve().parents):
            if folder.stat().st_mode & stat.S_IXOTH or folder in changed:
                continue
            subprocess.run(["setfacl", "-m", f"g:{group}:x", str(folder)], check=True, timeout=30)
            changed.append(folder)
    return changed


def _untraverse(group: str, folder: Path) -> None:
    """Take this test's ACL entry back; with no named entry left, the ACL goes whole (the mode as it was)."""
    subprocess.run(["setfacl", "-x", f"g:{group}", str(folder)], check=False, timeout=30)
    acl = subprocess.run(["getfacl", "-c", "-p", str(folder)], capture_output=True, text=True, check=False).stdout
    if not any(line.split(":")[1] for line in acl.splitlines() if line.startswith(("user:", "group:"))):
        subprocess.run(["setfacl", "-b", str(folder)], check=False, timeout=30)


def _end_processes_of(user: str) -> None:
    """Every process of this test's own Unix user ended (SIGKILL), waited for until none is left."""
    deadline = deadline_in(60)
    while subprocess.run(["pgrep", "-u", user], capture_output=True, check=False).returncode == 0:
        subprocess.run(["pkill", "-KILL", "-u", user], capture_output=True, check=False)
        assert time.monotonic() < deadline, f"processes of {user} outlived SIGKILL"
        time.sleep(0.1)


@pytest.fixture
def site_accounts() -> Iterator[SiteAccounts]:
    """A group and a Unix user of this test's own (random names: two runs on one machine never meet), a shared
    runs dir (setgid, 2770, that group) and the map; all removed afterwards."""
    if os.geteuid() != 0 or not shutil.which("sudo") or not shutil.which("setfacl"):
        pytest.fail("needs root with sudo and setfacl (make test-machine installs them)")
    tag = secrets.token_hex(3)
    group, user = f"rzt{tag}g", f"rzt{tag}a"
    shared = Path(tempfile.mkdtemp(prefix="rankzero-people-"))
    shared.chmod(0o755)
    home, runs = shared / "home", shared / "runs"
    changed: list[Path] = []
    try:
        subprocess.run(["groupadd", group], check=True, timeout=60)
        subprocess.run(["useradd", "-M", "-N", "-g", group, "-d", str(home), "-s", "/bin/sh", user], check=True,
                       timeout=60)  # fmt: skip
        home.mkdir()
        shutil.chown(home, user, group)
        runs.mkdir()
        shutil.chown(runs, "root", group)
        runs.chmod(0o2770)
        changed = _traverse_for(group, [Path(sys.executable), Path(__file__)])
        map_file = shared / "users.toml"
        map_file.write_text(f'[users.alice]\nunix_user = "{user}"\naccount = "ml-vision"\n')
        yield SiteAccounts(group, user, home, runs, map_file)
    finally:
        subprocess.run(["scancel", "-u", user], capture_output=True, timeout=60, check=False)
        for folder in changed:
            _untraverse(group, folder)
        _end_processes_of(user)  # a cancelled job's ranks may still be exiting: userdel refuses a user in use
        gone = [subprocess.run([cmd, name], capture_output=True, text=True, timeout=60, check=False)
                for cmd, name in (("userdel", user), ("groupdel", group))]  # fmt: skip
        shutil.rmtree(shared, ignore_errors=True)
        assert all(g.returncode == 0 for g in gone), [g.stderr for g in gone]


def _submit_as(agent: Agent, owner: str, spec: dict[str, Any]) -> int:
    with Session(agent.engine) as s:
        user = add_user(s, owner, "member")
        job = jobs.create(s, spec["name"], spec, agent.pool, owner_id=user.id)
        assert job.id is not None
        return job.id


def _map_users(agent: Agent, accounts: SiteAccounts, **extra: Any) -> None:
    """The agent's pool maps users through the fixture's map, in the shared runs dir, with the documented prefix
    (plus SLURM_CONF: the test cluster's configuration is not /etc/slurm's)."""
    agent.settings = agent.settings.model_copy(update={
        "runs_dir": accounts.runs, "slurm_user_map": accounts.map_file,
        "slurm_submit_as": "sudo -n -u {user} --preserve-env=SLURM_CONF --", **extra,
    })  # fmt: skip


TINY = {"name": "mine", "nproc": 2, "max_steps": 4, "batch_size": 16, "device": "cpu", "data": {"name": "digits"},
        "model": {"name": "mlp"}, "checkpoint": {"every_steps": 2}}  # fmt: skip


@pytest.mark.slow
def test_a_members_job_runs_as_her_unix_user_and_an_unmapped_one_is_refused(
    agent: Agent, slurm_cluster: SlurmCluster, site_accounts: SiteAccounts
) -> None:
    a = site_accounts
    _map_users(agent, a, slurm_unmapped="refuse")
    job_id = _submit_as(agent, "alice", TINY)
    refused = _submit_as(agent, "carol", {**TINY, "name": "not-mapped"})
    job = drive(agent, job_id, lambda j: j.backend_job_id is not None)
    shown = slurm_cluster.run("scontrol", "show", "job", "-o", str(job.backend_job_id))
    assert f" UserId={a.mapped}(" in shown and " Account=ml-vision " in shown, shown
    job = drive(agent, job_id, lambda j: j.status in TERMINAL)
    assert job.status is S.succeeded, (job.error, timeline(agent, job_id))
    assert any(f"as {a.mapped} (account ml-vision)" in words for _, _, words in timeline(agent, job_id))
    root = run_dir(agent.settings, job_id)
    checkpoints = sorted((root / "checkpoints").glob("step_*.pt"))
    assert checkpoints, list(root.rglob("*"))
    owner = checkpoints[-1].stat()
    assert pwd.getpwuid(owner.st_uid).pw_name == a.mapped and grp.getgrgid(owner.st_gid).gr_name == a.group
    assert owner.st_mode & stat.S_IRGRP  # the agent's user reads it through the group (umask 0007)
    script = (root / "slurm_attempt_1.sbatch").read_text()
    assert f"export HOME={a.home}\n" in script and f"export USER={a.mapped}\n" in script
    # `rankzero slurm-agent --check`'s lines for the map: the prefix works, and a runs dir not shared is named
    run = commands.Runner(env=slurm_cluster.env)
    assert people.check_lines(agent.settings, run) == [f"ok: submits as {a.mapped}; the runs dir is shared with it"]
    private = agent.settings.model_copy(update={"runs_dir": a.home.parent})  # 0755, root's group
    (failed,) = people.check_lines(private, run)
    assert failed.startswith(f"FAILED: the runs dir {a.home.parent} (group root) is not shared with {a.mapped}")
    not_mapped = drive(agent, refused, lambda j: j.status in TERMINAL)
    assert not_mapped.status is S.failed and not_mapped.backend_job_id is None
    assert not_mapped.error is not None and "rankzero user 'carol' has no Unix user" in not_mapped.error


@pytest.mark.slow
def test_rankzero_cancels_a_members_job_through_the_same_prefix(
    agent: Agent, slurm_cluster: SlurmCluster, site_accounts: SiteAccounts
) -> None:
    a = site_accounts
    _map_users(agent, a, slurm_partition="solo")  # one node: its own queue, whatever else the suite runs
    job_id = _submit_as(agent, "alice", {**TINY, "max_steps": 100_000})
    job = drive(agent, job_id, lambda j: j.backend_job_id is not None)
    with Session(agent.engine) as s:
        assert jobs.transition(s, job_id, S.cancelling, detail="cancel requested by the test")
        s.commit()
    job = drive(agent, job_id, lambda j: j.status in TERMINAL, timeout=120)
    assert job.status is S.cancelled, job.error
    out = slurm_cluster.run("squeue", "-h", "-t", "all", "-j", str(job.backend_job_id), "-o", "%T %u")
    assert out.split() == ["CANCELLED", a.mapped], out

"""Issue 34's pure parts, table-driven, no job: what bwrap is told (the job's ids, /proc, the tmpfs sizes, a
read-only root), the memory and disk decisions, the modes given to the job's group, the probe's explanations,
and the seccomp filter's contents."""

from __future__ import annotations

import os
import resource
import stat
from pathlib import Path

import pytest

from worker import sandbox, sandbox_ids, sandbox_limits, sandbox_probe, sandbox_seccomp

SYSTEM = (("/usr", None), ("/bin", "usr/bin"), ("/etc", None))


def _view(**fields) -> sandbox.View:
    base = {"run_dir": Path("/srv/rz/runs/job_1"), "cwd": Path("/srv/rz/runs/job_1"), "system": SYSTEM}
    return sandbox.View(**{**base, **fields})


def _after(args: list[str], flag: str) -> list[list[str]]:
    return [args[i + 1 : i + 3] for i, a in enumerate(args) if a == flag]


def test_a_root_workers_job_keeps_only_what_it_needs_to_switch_ids() -> None:
    args = sandbox.bwrap_args(_view(run_as=(65533, 65533)))
    assert args[args.index("--cap-drop") + 1] == "ALL"
    assert [a[0] for a in _after(args, "--cap-add")] == ["CAP_SETUID", "CAP_SETGID"]
    assert [sandbox_ids.RUN_AS_ENV, "65533:65533"] in _after(args, "--setenv")
    assert "--unshare-user" not in args  # bwrap as root would map the job to the host's uid 0
    plain = sandbox.bwrap_args(_view(as_root=False))
    assert "--cap-add" not in plain and "--setenv" not in plain and "--unshare-user" in plain


def test_proc_sys_is_read_only_and_kernel_files_are_masked() -> None:
    args = sandbox.bwrap_args(_view(proc_masked=("/proc/kcore", "/proc/sysrq-trigger")))
    assert ["/proc/sys", "/proc/sys"] in _after(args, "--ro-bind")
    assert ["/dev/null", "/proc/kcore"] in _after(args, "--ro-bind")
    assert ["/dev/null", "/proc/sysrq-trigger"] in _after(args, "--ro-bind")
    assert args.index("/proc/sys") > args.index("--proc")  # over the job's own /proc
    assert ["/sys", "/sys"] in _after(args, "--ro-bind")
    assert args[-4:-2] == ["--remount-ro", "/"]  # last mount op: the sandbox's root read-only


@pytest.mark.parametrize("size", [None, 512 * 2**20])
def test_tmp_and_shm_are_sized_and_open_to_a_non_root_job(size: int | None) -> None:
    args = sandbox.bwrap_args(_view(tmp_bytes=size))
    for where in ("/tmp", "/dev/shm"):
        i = args.index(where)
        assert args[i - 1] == "--tmpfs"
        before = args[i - 5 : i - 1] if size is not None else args[i - 3 : i - 1]
        assert before[:2] == ["--perms", "1777"]
        assert (before[2:] == ["--size", str(size)]) if size is not None else True


def test_every_bind_gets_its_parent_folders_made_open() -> None:
    args = sandbox.bwrap_args(_view(runtime_dirs=(Path("/root/.pyenv/versions/3.11.7"),)))
    i = args.index("/root/.pyenv/versions/3.11.7")
    assert args[i - 3 : i] == ["--dir", "/root/.pyenv/versions", "--ro-bind"]


@pytest.mark.parametrize(
    ("requested", "host", "fraction", "limit", "noted"),
    [
        (None, 24000, 0.75, 18000, False),  # no limit asked: the ceiling
        (0, 24000, 0.75, 18000, False),
        (1024, 24000, 0.75, 1024, False),  # within it: as asked
        (30000, 24000, 0.75, 18000, True),  # over it: the ceiling, said
        (None, 64, 0.5, 64, False),  # never under 64 MiB
    ],
)
def test_the_memory_limit(requested: int | None, host: int, fraction: float, limit: int, noted: bool) -> None:
    decided = sandbox_limits.memory_mb(requested, host, fraction)
    assert decided.limit_mb == limit and (decided.note is not None) == noted
    assert sandbox_limits.tmpfs_bytes(decided.limit_mb) == limit * 2**20


@pytest.mark.parametrize(
    ("spec", "default", "limit"),
    [(50, 51200, 50), (None, 51200, 51200), (None, 0, None), (True, 0, None), (0, 100, 100)],
)
def test_the_disk_limit_and_file_size_ceiling(spec: object, default: int, limit: int | None) -> None:
    assert sandbox_limits.disk_limit_mb(spec, default) == limit
    expect = resource.RLIM_INFINITY if limit is None else 2 * limit * 2**20  # twice: the sample stops it first
    assert sandbox_limits.file_size_limit(limit) == expect


@pytest.mark.parametrize(
    ("mode", "expect"),
    [
        (stat.S_IFREG | 0o600, 0o640),
        (stat.S_IFREG | 0o700, 0o750),
        (stat.S_IFDIR | 0o700, 0o750),
        (stat.S_IFREG | 0o644, 0o644),
        (stat.S_IFREG | 0o200, 0o200),  # the owner cannot read it: nor can the group
        (stat.S_IFREG | 0o660, 0o660),  # group write is kept, never added
    ],
)
def test_what_the_jobs_group_may_read(mode: int, expect: int) -> None:
    assert sandbox_ids.group_readable(mode) == expect


def test_sharing_follows_no_link(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "spec.json").write_text("{}")
    outside = tmp_path / "outside"
    outside.write_text("the worker's")
    (run / "link").symlink_to(outside)
    gid = 64999
    sandbox_ids.share_run_dir(run, 64999, gid)
    assert (run / "spec.json").stat().st_uid == 64999 and (run / "logs").stat().st_gid == gid
    assert os.lstat(run / "link").st_uid == 64999 and outside.stat().st_uid == os.getuid()  # the link, not its target
    tree = tmp_path / "bundle"
    tree.mkdir(mode=0o700)
    (tree / "train.py").write_text("x")
    (tree / "train.py").chmod(0o600)
    (tree / "away").symlink_to(outside)
    sandbox_ids.share_read_only(tree, gid)
    assert stat.S_IMODE((tree / "train.py").stat().st_mode) == 0o640 and (tree / "train.py").stat().st_gid == gid
    assert stat.S_IMODE(tree.stat().st_mode) == 0o750
    assert outside.stat().st_gid != gid


@pytest.mark.parametrize("value", ["0:0", "65533:0", "0:65533", "x:1", "65533:65533:0", "65533:65533:44:1"])
def test_a_job_never_runs_as_root(value: str) -> None:
    with pytest.raises(ValueError):
        sandbox_ids.parse_run_as(value)


@pytest.mark.parametrize(
    ("value", "ids"),
    [("65533:65533", (65533, 65533, ())), ("1000:1001:44,109", (1000, 1001, (44, 109)))],
)
def test_the_ids_a_job_runs_as(value: str, ids: tuple) -> None:
    assert sandbox_ids.parse_run_as(value) == ids
    assert sandbox_ids.run_as_value(*ids) == value


def test_a_gpu_node_closed_to_others_gives_its_group(tmp_path: Path) -> None:
    open_node, closed, roots = tmp_path / "nvidia0", tmp_path / "nvidia1", tmp_path / "nvidiactl"
    for node, mode, gid in ((open_node, 0o666, 44), (closed, 0o660, 44), (roots, 0o660, 0)):
        node.touch()
        node.chmod(mode)
        os.chown(node, 0, gid)
    assert sandbox_ids.device_groups((open_node,)) == ()
    assert sandbox_ids.device_groups((open_node, closed, roots)) == (44,)  # never root's group


@pytest.mark.parametrize(
    ("stderr", "root", "sysctls", "names"),
    [
        ("bwrap: No permissions to create new namespace", False, {"user/max_user_namespaces": "0"},
         "sysctl user.max_user_namespaces=0"),
        ("bwrap: setting up uid map: Permission denied", False, {"kernel/unprivileged_userns_clone": "0"},
         "sysctl kernel.unprivileged_userns_clone=0"),
        ("bwrap: No permissions to create new namespace", False,
         {"kernel/apparmor_restrict_unprivileged_userns": "1"}, "kernel.apparmor_restrict_unprivileged_userns=1"),
        ("bwrap: seccomp: Invalid argument", True, {}, "seccomp:"),
        ("the job's user cannot read /opt/venv (Permission denied)", True, {}, "RANKZERO_SANDBOX_UID"),
        ("bwrap: Creating new namespace failed: Operation not permitted", True, {}, "CAP_SYS_ADMIN"),
    ],
)  # fmt: skip
def test_the_probe_names_the_setting(stderr: str, root: bool, sysctls: dict, names: str) -> None:
    assert names in sandbox_probe.why(stderr, 1, root=root, sysctls=sysctls)


def test_the_filter_holds_the_issues_calls() -> None:
    denied = set(sandbox_seccomp.denied_names())
    for name in ("add_key", "keyctl", "request_key", "io_uring_setup", "bpf", "perf_event_open", "userfaultfd",
                 "kexec_load", "mount", "umount2", "pivot_root", "fsopen", "fsmount", "move_mount", "open_tree",
                 "unshare", "setns", "ptrace"):  # fmt: skip
        assert name in denied
    assert len(sandbox_seccomp.program()) % 8 == 0 and sandbox_seccomp.program()  # BPF: 8-byte instructions

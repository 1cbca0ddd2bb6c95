"""worker/environments/: the pure parts (requirements, lock, key, eviction, uv's headline), by table."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.spec import EnvironmentSpec
from worker.environments import cache, lock, requirements, uv


@pytest.mark.parametrize(
    ("found", "in_use", "cap", "evicted"),
    [
        ([("a", 10, 1), ("b", 10, 2), ("c", 10, 3)], set(), 30, []),  # fits
        ([("a", 10, 1), ("b", 10, 2), ("c", 10, 3)], set(), 25, ["a"]),  # least recently used first
        ([("a", 10, 1), ("b", 10, 2), ("c", 10, 3)], set(), 5, ["a", "b", "c"]),
        ([("a", 10, 1), ("b", 10, 2), ("c", 10, 3)], {"a"}, 25, ["b"]),  # never one in use
        ([("a", 10, 1), ("b", 10, 2)], {"a", "b"}, 5, []),  # all in use: stays over the cap
        ([("a", 1, 3), ("b", 50, 1)], set(), 30, ["b"]),  # the oldest, however big
    ],
)
def test_eviction_picks_least_recently_used_not_in_use(found, in_use, cap, evicted) -> None:
    entries = [cache.Entry(k, size, used) for k, size, used in found]
    assert cache.to_evict(entries, in_use, cap) == evicted


def test_eviction_counts_what_is_not_an_entry() -> None:
    """`total`: the folder's disk use (uv's download cache, lock files): the entries go until it fits."""
    entries = [cache.Entry("a", 10, 1), cache.Entry("b", 10, 2)]
    assert cache.to_evict(entries, set(), 25) == []  # the entries alone fit
    assert cache.to_evict(entries, set(), 25, total=30) == ["a"]  # with 10 more that is no entry they do not


def test_lock_parse_install_set_and_key() -> None:
    pins = lock.parse("Six==1.16.0\n# comment\npyjokes==0.8.3 ; python_version >= '3'\n\nsix==1.16.0\n")
    assert [p.line() for p in pins] == ["pyjokes==0.8.3", "six==1.16.0"]
    service = {"six": "1.17.0", "pyjokes": "0.8.3"}
    assert [p.line() for p in lock.to_install(pins, service)] == ["six==1.16.0"]  # the same version is seen
    key = lock.cache_key(lock.text(pins), "3.11.7", "2.14.1", pins, ["/venv/site"])
    assert key != lock.cache_key(lock.text(pins), "3.11.7", "2.15.0", pins, ["/venv/site"])  # another torch
    assert key == lock.cache_key(lock.text(pins), "3.11.7", "2.14.1", pins, ["/venv/site"])
    with pytest.raises(ValueError, match="not a pin"):
        lock.parse("pyjokes>=0.8\n")


def test_requirements_from_bundle_file_and_list(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("# ours\npyjokes==0.8.3  # jokes\n\nsix\n")
    spec = EnvironmentSpec(requirements="requirements.txt", packages=["einops", "six"])
    assert requirements.gather(spec, tmp_path) == ["einops", "pyjokes==0.8.3", "six"]
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["timm==1.0.9"]\n')
    assert requirements.gather(EnvironmentSpec(requirements="pyproject.toml"), tmp_path) == ["timm==1.0.9"]
    assert requirements.names_own_torch(["torch==2.3.0", "six"]) and not requirements.names_own_torch(["timm"])
    assert requirements.is_torch_family("nvidia-cublas") and not requirements.is_torch_family("numpy")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("--index-url https://evil.example/simple\npyjokes\n", "options are not taken"),
        ("-r other.txt\n", "options are not taken"),
        ("pkg @ https://example.com/pkg.whl\n", "URLs and paths are not taken"),
        ("not a requirement!!\n", "is not a requirement"),
    ],
)
def test_requirements_file_refuses_options_and_urls(tmp_path: Path, text: str, says: str) -> None:
    (tmp_path / "requirements.txt").write_text(text)
    with pytest.raises(requirements.RequirementsError, match=says):
        requirements.gather(EnvironmentSpec(requirements="requirements.txt"), tmp_path)


def test_requirements_file_must_be_inside_the_bundle(tmp_path: Path) -> None:
    (tmp_path / "bundle").mkdir()
    (tmp_path / "requirements.txt").write_text("six\n")
    (tmp_path / "bundle" / "link.txt").symlink_to(tmp_path / "requirements.txt")
    with pytest.raises(requirements.RequirementsError, match="not a file in the code bundle"):
        requirements.gather(EnvironmentSpec(requirements="link.txt"), tmp_path / "bundle")


def test_uv_headline_is_its_error_not_the_noise() -> None:
    output = (
        "$ uv pip compile requirements.in\nResolved 3 packages in 20ms\n"
        "error: No solution found when resolving dependencies\n"
        "  cause: Because nonexistent-pkg was not found in the package registry ...\n"
    )
    assert uv.headline(output).startswith("error: No solution found when resolving dependencies\ncause: Because")
    assert uv.headline("") == "uv failed without a message"


def test_sandbox_shows_the_jobs_entry_read_only_and_hides_the_rest() -> None:
    from worker.sandbox import View, bwrap_args

    root, entry = Path("/data/environments"), Path("/data/environments/" + "a" * 64)
    args = bwrap_args(View(run_dir=Path("/runs/job_1"), cwd=Path("/runs/job_1"), runtime_dirs=(Path("/data"),),
                           hidden=(root,), environment_dir=entry))  # fmt: skip
    masked = args.index("--tmpfs", args.index(str(root)) - 1)
    shown = [i for i in range(len(args) - 2) if args[i : i + 3] == ["--ro-bind", str(entry), str(entry)]]
    assert shown and shown[0] > masked  # bound after the mask that hides every other entry
    assert ["--bind", str(entry), str(entry)] not in [args[i : i + 3] for i in range(len(args) - 2)]


@pytest.mark.parametrize(
    ("files", "environment", "says"),
    [
        ({"requirements.txt": "six\n"}, None, "is not installed: the spec names no environment"),
        ({"requirements.txt": "six\n"}, {"requirements": "requirements.txt"}, None),
        ({"requirements.txt": "six\n"}, {"requirements": "deps/prod.txt"}, "is not the file the spec names"),
        ({}, None, None),
    ],
)
def test_submit_notices_an_unnamed_requirements_txt(tmp_path: Path, files, environment, says) -> None:
    from cli.code import requirements_notice

    for name, text in files.items():
        (tmp_path / name).write_text(text)
    notice = requirements_notice(tmp_path, {"environment": environment} if environment else {})
    assert (notice is None) if says is None else (notice is not None and says in notice)


def test_submit_refuses_an_environment_when_the_admin_turned_them_off(api_settings) -> None:
    from api.submit_policy import SpecRefused, check_environment
    from trainer.spec import JobSpec

    spec = JobSpec.model_validate({"max_steps": 1, "environment": {"packages": ["six"]}})
    check_environment(spec, api_settings())  # on by default
    with pytest.raises(SpecRefused, match="RANKZERO_ENVIRONMENTS=off"):
        check_environment(spec, api_settings(environments="off"))
    check_environment(JobSpec.model_validate({"max_steps": 1}), api_settings(environments="off"))

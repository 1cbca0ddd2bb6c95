"""Issue 19 item 6: a size cap on each host's unpacked-bundle cache, least recently used first, never a bundle
the unpack just made or a live job names (worker/bundle_cache.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from worker import bundle_cache

A, B, C, D = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)


@pytest.mark.parametrize(
    ("keep", "cap", "removed"),
    [
        (set(), 400, []),  # fits
        (set(), 300, [A]),  # the least recently used goes first
        (set(), 150, [A, B, C]),
        ({A}, 300, [B]),  # a kept one is skipped, the next goes
        ({A, B, C, D}, 0, []),  # all in use: the cache stays over its cap, no job loses its code
    ],
)
def test_which_bundles_go(keep: set[str], cap: int, removed: list[str]) -> None:
    entries = [(C, 3.0, 100), (A, 1.0, 100), (D, 4.0, 100), (B, 2.0, 100)]
    assert bundle_cache.to_remove(entries, keep, cap) == removed


def test_enforce_removes_the_least_recently_used_but_never_a_live_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.settings import Settings

    root = tmp_path / "bundles"
    for i, sha in enumerate((A, B, C, D)):
        (root / sha).mkdir(parents=True)
        (root / sha / "blob.bin").write_bytes(os.urandom(300_000))
        os.utime(root / sha, (1000.0 + i, 1000.0 + i))
    monkeypatch.setattr(bundle_cache, "live_codes", lambda settings: {A})  # a queued job names A
    settings = Settings(data_dir=tmp_path / "data", bundle_cache_max_bytes=1_000_000)
    gone: list[str] = []

    def remove(sha: str) -> None:
        gone.append(sha)
        (root / sha / "blob.bin").unlink()
        (root / sha).rmdir()

    assert bundle_cache.enforce(settings, root, {D}, remove) == [B]
    assert gone == [B] and sorted(p.name for p in root.iterdir()) == [A, C, D]
    assert bundle_cache.enforce(settings, root, {D}, remove) == []  # it fits now

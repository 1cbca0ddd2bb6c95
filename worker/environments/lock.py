"""A lock (uv's `name==version` lines), what of it the service already has, and the cache key. Pure."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from packaging.utils import canonicalize_name

LAYOUT = "1"  # bump when an entry's layout changes: old entries are then never matched


@dataclass(frozen=True)
class Pin:
    name: str  # canonical
    version: str

    def line(self) -> str:
        return f"{self.name}=={self.version}"


def parse(lock: str) -> list[Pin]:
    """The pins of a lock, sorted by name (comments, blank lines and hashes ignored)."""
    pins = {}
    for raw in lock.splitlines():
        line = raw.split("#", 1)[0].split(" \\", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise ValueError(f"not a pin in the lock: {line!r}")
        name = canonicalize_name(name.split("[", 1)[0].strip())
        pins[name] = Pin(name, version.split(";", 1)[0].strip())
    return [pins[n] for n in sorted(pins)]


def text(pins: list[Pin]) -> str:
    return "".join(f"{p.line()}\n" for p in pins)


def to_install(pins: list[Pin], service: dict[str, str]) -> list[Pin]:
    """The pins the environment installs itself: those the service's environment lacks at that exact version
    (the rest it sees through the overlay, unchanged)."""
    return [p for p in pins if service.get(p.name) != p.version]


def cache_key(lock: str, python: str, torch: str, install: list[Pin], overlay: list[str]) -> str:
    """The cache entry of a lock on this host: the same lock over a different Python, torch or service
    environment (what the overlay shows) is another entry."""
    blob = json.dumps(
        {"layout": LAYOUT, "lock": lock, "python": python, "torch": torch,
         "install": [p.line() for p in install], "overlay": overlay},
        sort_keys=True,
    )  # fmt: skip
    return hashlib.sha256(blob.encode()).hexdigest()

"""Does a host see the API's runs dir? The API leaves a marker in its runs dir when it starts; a worker
whose runs dir holds it shares the API's (one machine, or a network file system). Any other worker
ships what its jobs write to the API's artifact store, over RANKZERO_API_URL.

A host's storage, as its row records it (`hosts.storage`) and the Hosts page shows it:
- `shared`: it sees the marker: its jobs' files are the API's;
- `store`: it does not, and has RANKZERO_API_URL and a token: it uploads to the store;
- `unknown`: neither (no API has started on its runs dir yet, or it cannot reach one): it runs jobs as
  before this existed, and the Hosts page says what to set.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

MARKER = ".rankzero-api"
Storage = Literal["shared", "store", "unknown"]
# The key multi-node placement groups hosts by (core/placement.py `storage_id`): every host that reaches
# the API's files, shared or uploaded, can hold a node of the same job.
REACHES_API = "api-artifact-store"


def mark_api_runs_dir(runs_dir: Path, store_where: str) -> None:
    """Called by the API at start: the marker a sharing worker finds (its text: the store, for people)."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    path = runs_dir / MARKER
    tmp = path.with_name(f"{MARKER}.{os.getpid()}")
    tmp.write_text(f"this runs dir is a rankzero API's; artifact store: {store_where}\n")
    os.replace(tmp, path)


def decide(sees_marker: bool, can_upload: bool) -> Storage:
    """A host's storage from what it sees (pure)."""
    if sees_marker:
        return "shared"
    return "store" if can_upload else "unknown"


def host_storage(runs_dir: Path, api_url: str | None, token: str | None) -> Storage:
    return decide((runs_dir / MARKER).is_file(), bool(api_url and token))


def known(storage: str) -> Storage:
    """A row's storage as one of the three (an unexpected value reads as unknown)."""
    return "shared" if storage == "shared" else "store" if storage == "store" else "unknown"


def placement_group(storage: str, storage_id: str) -> str:
    """What multi-node placement groups a host by: hosts that reach the API's files form one group."""
    return REACHES_API if storage in ("shared", "store") else storage_id


DESCRIPTION: dict[str, str] = {
    "shared": "shares the API's runs dir",
    "store": "uploads to the store",
    "unknown": "own runs dir, cannot upload: set RANKZERO_API_URL on its worker",
}

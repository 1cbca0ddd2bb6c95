"""The placement as it crosses the database: where the scheduler put a job, typed (issue 18).

worker/scheduler.py writes it into `jobs.placement` (a JSON column) when it places a job; node 0 and
the followers (worker/), the GPU leases, the API (`JobPublic.placement`, so /openapi.json carries the
shape) and the CLI read it back. Everyone reads it through `read_placement` and writes it through
`JobPlacement.to_json`: no one re-parses the dict by hand.

The stored shape is the one the scheduler has written since placements exist, key for key:

    {"nodes": [{"host", "node_rank", "gpus": ["0", ...], "slots", "address"}, ...],
     "nproc": <ranks per node>, "accumulation_steps": <per rank>}

Rows written by hand (tests, old tools) may lack `address` or `gpus`; GPU indices stored as numbers read
back as strings. Unknown keys are ignored. Pure: no database, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from core.placement import NodeUse, Placement


def _gpu_names(value: Any) -> Any:
    # GPU indices are names ("0", "1"): a row that stored them as numbers reads back the same.
    if isinstance(value, (list, tuple)):
        return tuple(str(g) for g in value)
    return value


class PlacedNode(BaseModel):
    """One node of a placed job: the host it runs on and what it holds there."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    host: str = Field(description="The host's name (GET /api/hosts).")
    node_rank: int = Field(ge=0, description="0 runs the rendezvous store and watches the other nodes.")
    gpus: Annotated[tuple[str, ...], BeforeValidator(_gpu_names)] = Field(
        default=(), description="The GPUs its ranks use (CUDA_VISIBLE_DEVICES); empty for a CPU (slot) node."
    )
    slots: int = Field(default=0, ge=0, description="CPU rank slots it takes (0 for a GPU node).")
    address: str | None = Field(
        default=None, description="Where the other nodes reach it (the host's registered address)."
    )

    def use(self) -> NodeUse:
        """What this node holds, as the scheduler's pure plan counts it."""
        return NodeUse(host=self.host, gpus=self.gpus, slots=self.slots)


class JobPlacement(BaseModel):
    """Where the scheduler put a job: its nodes (node_rank 0 first), ranks per node, accumulation."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    nodes: tuple[PlacedNode, ...] = Field(description="One per host, node_rank 0 first.")
    nproc: int = Field(ge=1, description="Ranks per node; below spec.nproc when elastic fit started it smaller.")
    accumulation_steps: int = Field(
        ge=1, description="Raised by elastic fit so nproc × accumulation_steps × nnodes stays the spec's."
    )

    @classmethod
    def of(cls, placed: Placement, addresses: Mapping[str, str]) -> JobPlacement:
        """The record of one plan entry (core/placement.py), with each host's address (its name if unknown)."""
        return cls(
            nodes=tuple(
                PlacedNode(
                    host=n.host,
                    node_rank=n.node_rank,
                    gpus=n.gpus,
                    slots=n.slots,
                    address=addresses.get(n.host, n.host),
                )
                for n in placed.nodes
            ),
            nproc=placed.nproc,
            accumulation_steps=placed.accumulation_steps,
        )

    def to_json(self) -> dict[str, Any]:
        """The dict stored in `jobs.placement` (key order and types as the scheduler always wrote them)."""
        out = self.model_dump(mode="json")
        for node in out["nodes"]:
            if node["address"] is None:  # a row read without one is written back without one
                del node["address"]
        return out

    @property
    def hosts(self) -> list[str]:
        """The hosts of the job, node_rank 0 first."""
        return [n.host for n in self.nodes]

    def node(self, node_rank: int) -> PlacedNode | None:
        """The node of that rank, or None when the placement has no such node."""
        for n in self.nodes:
            if n.node_rank == node_rank:
                return n
        return None

    def peers(self, node_rank: int) -> tuple[str, ...]:
        """The hosts of every other node (node 0 watches them)."""
        return tuple(n.host for n in self.nodes if n.node_rank != node_rank)


class BadPlacement(ValueError):
    """A stored placement that is not of the shape above (written by hand, or damaged)."""


def read_placement(source: Any) -> JobPlacement | None:
    """The placement of a job row (anything with a `placement` attribute), or of the stored JSON itself
    (a dict, JSON text, or a JobPlacement). None when there is none (an unplaced job: null or {}).

    Raises BadPlacement when it is there but not a placement; callers that only show it may treat that as
    none, callers that act on it (the scheduler, a node) must not guess."""
    raw = source
    if hasattr(source, "placement") and not isinstance(source, (Mapping, JobPlacement)):
        raw = source.placement
    if raw is None or isinstance(raw, JobPlacement):
        return raw
    if isinstance(raw, (str, bytes, bytearray)):
        try:
            raw = json.loads(raw) if raw.strip() else None
        except ValueError as exc:
            raise BadPlacement(f"the stored placement is not JSON: {exc}") from exc
        if raw is None:
            return None
    if not isinstance(raw, Mapping):
        raise BadPlacement(f"the stored placement is a {type(raw).__name__}, not an object")
    if not raw:
        return None
    try:
        return JobPlacement.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "placement"
        raise BadPlacement(f"the stored placement is malformed at {where}: {first['msg']}") from exc


def write_placement(placement: JobPlacement | None) -> dict[str, Any] | None:
    """What to store in `jobs.placement` (None clears it)."""
    return None if placement is None else placement.to_json()

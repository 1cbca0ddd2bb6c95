"""core/placement_record.py: the placement as stored in jobs.placement, read and written through one accessor
(no service, no I/O)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from core.placement import NodePlacement, NodeUse, Placement
from core.placement_record import BadPlacement, JobPlacement, PlacedNode, read_placement, write_placement

# A row as worker/scheduler.py has always written it (two nodes, GPUs, elastic accumulation).
STORED = {
    "nodes": [
        {"host": "host-a", "node_rank": 0, "gpus": ["0", "1"], "slots": 0, "address": "10.0.0.1"},
        {"host": "host-b", "node_rank": 1, "gpus": ["2", "3"], "slots": 0, "address": "host-b"},
    ],
    "nproc": 2,
    "accumulation_steps": 4,
}


def test_a_stored_row_reads_and_writes_back_byte_for_byte() -> None:
    placed = read_placement(STORED)
    assert placed is not None
    assert placed.hosts == ["host-a", "host-b"]
    assert placed.node(1) == PlacedNode(host="host-b", node_rank=1, gpus=("2", "3"), slots=0, address="host-b")
    assert json.dumps(placed.to_json()) == json.dumps(STORED)  # same keys, same order, same types
    assert write_placement(placed) == STORED and write_placement(None) is None


def test_the_plan_entry_becomes_the_record_the_scheduler_stores() -> None:
    plan_entry = Placement(
        job_id=7,
        nodes=(NodePlacement("host-a", 0, ("0", "1"), 0), NodePlacement("host-b", 1, ("2", "3"), 0)),
        nproc=2,
        accumulation_steps=4,
        requested_nproc=4,
    )
    assert JobPlacement.of(plan_entry, {"host-a": "10.0.0.1"}).to_json() == STORED  # unknown address: the name


@pytest.mark.parametrize(
    ("raw", "node"),
    [
        # written by hand (tests, older tools): no address, no gpus, GPU indices as numbers
        ({"host": "h", "node_rank": 0, "slots": 2}, PlacedNode(host="h", node_rank=0, gpus=(), slots=2)),
        ({"host": "h", "node_rank": 0, "gpus": [0, 1], "slots": 0}, PlacedNode(host="h", node_rank=0, gpus=("0", "1"))),
        (
            {"host": "h", "node_rank": 0, "gpus": [], "slots": 1, "extra": True},
            PlacedNode(host="h", node_rank=0, slots=1),
        ),
    ],
)
def test_old_and_hand_written_nodes_still_read(raw: dict, node: PlacedNode) -> None:
    placed = read_placement({"nodes": [raw], "nproc": 1, "accumulation_steps": 1})
    assert placed is not None and placed.nodes == (node,)


def test_a_node_written_without_an_address_is_written_back_without_one() -> None:
    raw = {"nodes": [{"host": "h", "node_rank": 0, "gpus": [], "slots": 1}], "nproc": 1, "accumulation_steps": 1}
    assert read_placement(raw).to_json() == raw  # type: ignore[union-attr]


@pytest.mark.parametrize("empty", [None, {}, "", "null", b"  "])
def test_no_placement_reads_as_none(empty: object) -> None:
    assert read_placement(empty) is None


def test_it_reads_a_job_row_json_text_or_a_record() -> None:
    placed = read_placement(STORED)
    assert read_placement(SimpleNamespace(placement=STORED)) == placed
    assert read_placement(SimpleNamespace(placement=None)) is None
    assert read_placement(json.dumps(STORED)) == placed
    assert read_placement(json.dumps(STORED).encode()) == placed
    assert read_placement(placed) is placed


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "a list, not an object"),
        (42, "not an object"),
        ({"nodes": [{"node_rank": 0, "slots": 1}], "nproc": 1, "accumulation_steps": 1}, "nodes.0.host"),
        ({"nodes": [{"host": "h", "node_rank": 0, "slots": "many"}], "nproc": 1, "accumulation_steps": 1}, "slots"),
        ({"nodes": [], "accumulation_steps": 1}, "at nproc"),
        ({"nodes": "host-a", "nproc": 1, "accumulation_steps": 1}, "at nodes"),
    ],
)
def test_a_damaged_placement_is_refused_with_where(raw: object, says: str) -> None:
    with pytest.raises(BadPlacement, match=says):
        read_placement(raw)


def test_nodes_count_for_the_plan_as_what_they_hold() -> None:
    placed = read_placement(STORED)
    assert placed is not None
    assert [n.use() for n in placed.nodes] == [NodeUse("host-a", ("0", "1"), 0), NodeUse("host-b", ("2", "3"), 0)]
    assert placed.peers(0) == ("host-b",) and placed.node(5) is None


def test_the_record_is_frozen() -> None:
    placed = read_placement(STORED)
    with pytest.raises(ValueError):
        placed.nproc = 3  # type: ignore[misc,union-attr]

"""Which interface a multi-node job's ranks talk on (worker/rank_network.py): the one holding the host's
registered address, set as GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME unless the operator set them."""

from __future__ import annotations

import pytest

from worker.rank_network import interface_holding, pinned_env

ADDRESSES = {"lo": "127.0.0.1", "eth0": "172.17.0.4", "veth1": "10.231.7.2"}


@pytest.mark.parametrize(
    ("address", "expect"),
    [
        ("10.231.7.2", "veth1"),  # an IP held by an interface
        ("host-b.lan", "veth1"),  # a name: resolved first
        ("10.9.9.9", None),  # held by no interface here: nothing is pinned (gloo's own choice stands)
        ("nowhere.invalid", None),  # a name that does not resolve
    ],
)
def test_the_interface_holding_the_registered_address(address: str, expect: str | None) -> None:
    def resolve(name: str) -> str:
        if name == "host-b.lan":
            return "10.231.7.2"
        raise OSError("no such name")

    found = interface_holding(address, names=list(ADDRESSES), ipv4_of=ADDRESSES.get, resolve=resolve)
    assert found == expect


def test_this_machines_loopback_is_found_by_the_kernels_own_answer() -> None:
    assert interface_holding("127.0.0.1") == "lo"


@pytest.mark.parametrize(
    ("env", "expect"),
    [
        ({}, {"GLOO_SOCKET_IFNAME": "veth1", "NCCL_SOCKET_IFNAME": "veth1"}),
        ({"GLOO_SOCKET_IFNAME": "bond0"}, {"NCCL_SOCKET_IFNAME": "veth1"}),  # the operator's choice stands
        ({"GLOO_SOCKET_IFNAME": "bond0", "NCCL_SOCKET_IFNAME": "ib0"}, {}),
    ],
)
def test_the_ranks_are_pinned_unless_the_operator_chose(env: dict[str, str], expect: dict[str, str]) -> None:
    assert pinned_env("10.231.7.2", env, find=lambda a: "veth1") == expect
    assert pinned_env("10.9.9.9", {}, find=lambda a: None) == {}

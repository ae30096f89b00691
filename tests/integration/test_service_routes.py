"""The real node's Service routes (e2e/cluster/serviceroutes.py) against the real iptables.

`make demo` routes the `kubernetes` Service for the operator it installs in-cluster and leaves the
route in place while the cluster runs; `localcluster down` then removes every route of the node's
bridge, and only those: another cluster's (the test suite's, a second checkout's) stay. Needs root
and iptables, as the kubelet node does; the bridges are throwaway names no cluster uses.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from e2e.cluster import serviceroutes

MINE, OTHER = "vgltest1", "vgltest2"


def rules() -> str:
    listed = subprocess.run(["iptables", "-t", "nat", "-S", "PREROUTING"], capture_output=True, text=True, check=True)
    return listed.stdout


@pytest.fixture
def bridges() -> Iterator[None]:
    yield
    for bridge in (MINE, OTHER):
        serviceroutes.remove_all(bridge)
        subprocess.run(["ip", "link", "delete", bridge], capture_output=True, check=False)


def test_remove_all_takes_every_route_of_its_bridge_and_no_other(bridges: None) -> None:
    serviceroutes.forward(serviceroutes.Route(MINE, "10.96.0.1", 443, 16443))
    serviceroutes.forward(serviceroutes.Route(MINE, "10.96.0.20", 5432, 15432))
    serviceroutes.forward(serviceroutes.Route(MINE, "10.96.0.20", 5432, 15432))  # idempotent
    serviceroutes.forward(serviceroutes.Route(OTHER, "10.96.0.1", 443, 26443))
    assert rules().count(f"-i {MINE} ") == 2
    serviceroutes.remove_all(MINE)
    assert f"-i {MINE} " not in rules()
    assert rules().count(f"-i {OTHER} ") == 1
    serviceroutes.remove_all(MINE)  # nothing left: no error

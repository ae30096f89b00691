"""The long variant of e2e/test_chart.py's probe test (issue 37): every replica's API held for two minutes.

The chart installed for real on the kubelet node (the e2e module's own fixtures: `make image`'s
image, `helm install`, two replicas), then 500 idle sockets and 50 slow TLS writers held against
each replica's API port for two minutes: every probe the kubelet sends (on the probes' own
listener) answers 200, both pods stay Ready, and no container restarts.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from e2e.test_chart import (
    OperatorLogs,
    api_route,
    history_db,
    hold_every_replica,
    node_files,
    operator_image,
    release,
)
from tests.integration.conftest import KubeCluster, kubelet_cluster

pytestmark = [pytest.mark.stress, pytest.mark.kubelet, pytest.mark.docker]
__all__ = ["api_route", "history_db", "kubelet_cluster", "node_files", "operator_image", "release"]  # fixtures

LONG_HOLD = timedelta(minutes=2)
IDLE, SLOW = 500, 50


def test_readiness_stays_200_and_no_container_restarts_while_every_replica_is_held_for_two_minutes(
    kubelet_cluster: KubeCluster, release: OperatorLogs
) -> None:
    hold_every_replica(kubelet_cluster, hold=LONG_HOLD, idle=IDLE, slow=SLOW)

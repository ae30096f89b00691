"""The operator's connection pool holds a connection for every requester that may wait on the API
server at once: the trigger's workers (a setting), the pod create workers, the bucket writer's, retention's
and the rest. A request that finds the pool full is sent on a connection of its own, closed after it:
a TLS handshake per request in a burst, when they cost most."""

from __future__ import annotations

from pathlib import Path

import pytest

from vigil.kube.controllers.dispatcher import START_CONCURRENCY
from vigil.kube.controllers.retention import WORKERS as PRUNE_WORKERS
from vigil.kube.stores.buckets import WRITE_CONCURRENCY
from vigil.runtime.clients import OTHER_REQUESTERS, api_client, api_connections
from vigil.settings import Settings, Trigger

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.mark.parametrize("workers", [1, 32, 64])
def test_the_pool_has_a_connection_for_each_trigger_worker_and_every_other_requester(workers: int) -> None:
    settings = Settings(trigger=Trigger(workers=workers))
    assert api_connections(settings) == workers + START_CONCURRENCY + WRITE_CONCURRENCY + PRUNE_WORKERS + OTHER_REQUESTERS


def test_the_client_keeps_as_many_connections_as_it_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config").write_text(KUBECONFIG)
    monkeypatch.setattr("kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "config"))
    api = api_client(connections=api_connections(Settings()))
    assert api.rest_client.pool_manager.connection_pool_kw["maxsize"] == api_connections(Settings())

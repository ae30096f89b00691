"""`kubectl vigil console`: the port-forward it runs carries the command's connection flags, and
the address it prints is the console's."""

from __future__ import annotations

from vigil.cli.cluster import Connection
from vigil.cli.console import console_url, port_forward_command


def test_the_port_forward_is_kubectl_s_with_the_same_kubeconfig_context_and_user() -> None:
    chosen = Connection(kubeconfig="/k", context="prod", impersonate="alice", impersonate_group="ops")
    assert port_forward_command("kubectl", namespace="vigil-system", service="vigil", local_port=8080, chosen=chosen) == [
        "kubectl", "--kubeconfig", "/k", "--context", "prod", "--as", "alice", "--as-group", "ops",
        "-n", "vigil-system", "port-forward", "svc/vigil", "8080:http", "--address", "127.0.0.1",
    ]  # fmt: skip
    assert port_forward_command("kubectl", namespace="ops", service="v", local_port=1, chosen=Connection())[1:5] == [
        "-n", "ops", "port-forward", "svc/v",
    ]  # fmt: skip


def test_the_address_is_the_console_s_on_loopback() -> None:
    assert console_url(8080, https=False) == "http://127.0.0.1:8080/console/"
    assert console_url(8443, https=True) == "https://127.0.0.1:8443/console/"

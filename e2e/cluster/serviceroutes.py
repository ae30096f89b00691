"""The Service routes kube-proxy would give pods of the real node, one address at a time.

The local control plane runs no kube-proxy and its API server listens on 127.0.0.1 only, so a
pod on the kubelet node's bridge reaches the host (the bridge is its gateway) but no ClusterIP.
An operator installed by the chart needs one: the `kubernetes` Service (10.96.0.1:443, which the
kubelet puts into every container's KUBERNETES_SERVICE_HOST/PORT, and which the API server's
certificate names). `forward()` adds what kube-proxy's iptables mode adds for a Service whose
backend is on the node's loopback: a DNAT rule for traffic entering by this cluster's bridge
only, and `route_localnet` on that bridge so the kernel routes the rewritten packet to 127.0.0.1
(the kubelet's own KUBE-FIREWALL chain lets DNATed loopback traffic through). The same serves a
selector-less Service whose backend is a server on the host's loopback (a test's PostgreSQL).

Needs root and iptables, as the kubelet node does. `remove()` deletes exactly the rules added.
"""

from __future__ import annotations

import dataclasses
import itertools
import subprocess
from pathlib import Path

#: The ClusterIP of the `kubernetes` Service: the first address of localcluster's SERVICE_CIDR.
KUBERNETES_SERVICE = ("10.96.0.1", 443)


@dataclasses.dataclass(frozen=True)
class Route:
    """Pods on `bridge` reaching `cluster_ip:port` land on 127.0.0.1:`host_port`."""

    bridge: str
    cluster_ip: str
    port: int
    host_port: int

    def rule(self) -> list[str]:
        return ["PREROUTING", "-i", self.bridge, "-d", f"{self.cluster_ip}/32", "-p", "tcp",
                "--dport", str(self.port), "-j", "DNAT", "--to-destination", f"127.0.0.1:{self.host_port}"]  # fmt: skip


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["iptables", "-t", "nat", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"iptables -t nat {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def ensure_bridge(bridge: str) -> None:
    """The node's bridge, made now if no pod has run yet (the CNI bridge plugin adopts it)."""
    if Path(f"/sys/class/net/{bridge}").exists():
        return
    subprocess.run(["ip", "link", "add", "name", bridge, "type", "bridge"], check=True, capture_output=True)
    subprocess.run(["ip", "link", "set", bridge, "up"], check=True, capture_output=True)


def forward(route: Route) -> Route:
    """Add the route (idempotent)."""
    ensure_bridge(route.bridge)
    Path(f"/proc/sys/net/ipv4/conf/{route.bridge}/route_localnet").write_text("1\n")
    if _iptables("-C", *route.rule(), check=False).returncode != 0:
        _iptables("-A", *route.rule())
    return route


def remove(route: Route) -> None:
    """Delete the route's rule; safe when it is already gone."""
    while _iptables("-C", *route.rule(), check=False).returncode == 0:
        _iptables("-D", *route.rule())


def remove_all(bridge: str) -> None:
    """Delete every route of `bridge` (what `make demo` added, or a killed test left), when the
    node stops; safe without iptables or rules."""
    try:
        listed = _iptables("-S", "PREROUTING", check=False)
    except FileNotFoundError:
        return
    for line in listed.stdout.splitlines():
        words = line.split()  # e.g. -A PREROUTING -d 10.96.0.1/32 -i vgl16000 -p tcp ... -j DNAT ...
        pairs = set(itertools.pairwise(words))
        if words[:2] == ["-A", "PREROUTING"] and ("-i", bridge) in pairs and ("-j", "DNAT") in pairs:
            _iptables("-D", *words[1:], check=False)

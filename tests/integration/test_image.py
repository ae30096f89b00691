"""The operator image, built as `make image` builds it, run as the chart runs it.

The container runs as uid 65532 on a read-only root filesystem with every capability dropped and
only /tmp writable (the chart's securityContext and its emptyDir). `vigil --help` answers; then
`vigil operator`, on the host's network against the local API server and with the chart's
ServiceAccount token (the fleet's identity), serves /readyz and takes the leader Lease; a second
one waits as a standby. On `docker stop` (SIGTERM, as a pod being deleted gets) each exits 0 well
before the SIGKILL, the standby too (PID 1 ignores any signal it has no handler for), and the
leader releases the Lease. `vigil watchdog` (the watchdog's own Deployment) does the same.

The image is built by scripts/image.sh (so `make test` on a fresh machine installs Docker and
builds the base from Debian's packages); these tests never skip. The project's Docker daemon is
stopped at the end unless it was already running or VIGIL_TEST_KEEP_CLUSTER=1.
"""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.containers import Docker, build_image, docker, stop_docker
from tests.integration.operators import OperatorFleet, merged
from tests.waiting import wait_for

pytestmark = pytest.mark.docker

NONROOT = "65532:65532"
#: The chart's container securityContext, as `docker run` flags: the image must work under it.
LOCKED_DOWN = ("--user", NONROOT, "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
               "--security-opt", "no-new-privileges")  # fmt: skip
STOP_GRACE_S = 30  # docker stop's SIGKILL comes after this: a clean stop must be well inside it


@pytest.fixture(scope="session")
def image() -> Iterator[tuple[Docker, str]]:
    """The project's Docker daemon and the operator image's name, built if out of date."""
    daemon = docker()
    was_running = daemon.answers()
    tag = build_image()
    yield daemon, tag
    if not was_running and os.environ.get("VIGIL_TEST_KEEP_CLUSTER") != "1":
        stop_docker()


def test_the_image_runs_as_nonroot_on_a_read_only_root(image: tuple[Docker, str]) -> None:
    daemon, tag = image
    assert daemon("image", "inspect", "--format", "{{.Config.User}}", tag).stdout.strip() == NONROOT

    proc = daemon("run", "--rm", "--network", "none", *LOCKED_DOWN, tag, "--help", check=False)

    assert proc.returncode == 0, proc.stderr
    assert "operator" in proc.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def config_dir(fleet: OperatorFleet, path: Path, *, api_port: int) -> Path:
    """/etc/vigil for the container: the fleet's settings (history in /tmp, the only writable
    place) and its kubeconfig, readable by the container's unprivileged user."""
    path.mkdir(mode=0o755)
    settings = merged(fleet.settings, {"history": {"dsn": "sqlite:////tmp/history.db"},
                                       "http": {"apiPort": api_port, "metricsPort": 0, "healthPort": 0}})  # fmt: skip
    (path / "config.yaml").write_text(yaml.safe_dump(settings))
    (path / "kubeconfig").write_text(fleet.identity.kubeconfig.read_text())
    for file in path.iterdir():
        file.chmod(0o644)
    return path


def start_operator(daemon: Docker, tag: str, *, name: str, etc: Path, command: str = "operator") -> None:
    """`vigil operator` (or `vigil watchdog`) in a container named `name` (its identity too), as
    the chart runs it."""
    daemon("run", "--detach", "--name", name, "--network", "host", *LOCKED_DOWN,
           "--volume", f"{etc}:/etc/vigil:ro", "--env", "KUBECONFIG=/etc/vigil/kubeconfig",
           "--env", f"POD_NAME={name}", tag, command, "--config", "/etc/vigil/config.yaml")  # fmt: skip


def stop(daemon: Docker, name: str) -> tuple[str, str]:
    """`docker stop` (SIGTERM, SIGKILL after the grace period): the exit code and whether it was
    killed for memory."""
    daemon("stop", "--time", str(STOP_GRACE_S), name, timeout=STOP_GRACE_S + 30)
    code, oom = daemon("inspect", "--format", "{{.State.ExitCode}} {{.State.OOMKilled}}", name).stdout.split()
    return code, oom


def test_the_operator_in_the_image_leads_and_stops_cleanly(
    image: tuple[Docker, str], fleet: OperatorFleet, tmp_path: Path
) -> None:
    daemon, tag = image
    leader, standby = f"{fleet.namespace}-a", f"{fleet.namespace}-b"
    leader_port, standby_port = free_port(), free_port()
    try:
        start_operator(daemon, tag, name=leader, etc=config_dir(fleet, tmp_path / "a", api_port=leader_port))
        wait_for(lambda: ready(leader_port), timeout=90, what="the operator in the container to serve /readyz")
        wait_for(lambda: fleet.holder() == leader, timeout=60, what=f"{leader} to hold the Lease")
        start_operator(daemon, tag, name=standby, etc=config_dir(fleet, tmp_path / "b", api_port=standby_port))
        wait_for(lambda: ready(standby_port), timeout=90, what="the standby to serve /readyz")

        # PID 1 in its container, which drops signals it has no handler for: a standby, still
        # waiting for the Lease, must stop at once and cleanly.
        assert stop(daemon, standby) == ("0", "false")
        assert stop(daemon, leader) == ("0", "false")
        assert fleet.holder() is None, "the Lease was not released on SIGTERM"
    except BaseException:
        for name in (leader, standby):
            print(f"--- {name}\n" + daemon("logs", name, check=False).stderr[-4000:])
        raise
    finally:
        for name in (leader, standby):
            daemon("rm", "--force", name, check=False)


def test_the_watchdog_in_the_image_stops_cleanly(
    image: tuple[Docker, str], fleet: OperatorFleet, tmp_path: Path
) -> None:
    """The watchdog's own Deployment runs `vigil watchdog`: it too stops on SIGTERM and releases
    its Lease."""
    daemon, tag = image
    name = f"{fleet.namespace}-watchdog"
    lease = fleet.settings.get("watchdog", {}).get("leaseName", "vigil-watchdog")

    def holder() -> str | None:
        found: str | None = fleet.cluster.coordination.read_namespaced_lease(lease, fleet.namespace).spec.holder_identity
        return found

    try:
        start_operator(daemon, tag, name=name, etc=config_dir(fleet, tmp_path / "w", api_port=0), command="watchdog")
        wait_for(lambda: lease_exists(fleet, lease) and holder() == name, timeout=90, what=f"{name} to hold {lease}")

        assert stop(daemon, name) == ("0", "false")
        assert holder() is None, "the watchdog's Lease was not released on SIGTERM"
    except BaseException:
        print(daemon("logs", name, check=False).stderr[-4000:])
        raise
    finally:
        daemon("rm", "--force", name, check=False)


def lease_exists(fleet: OperatorFleet, name: str) -> bool:
    return any(item.metadata.name == name for item in fleet.cluster.coordination.list_namespaced_lease(fleet.namespace).items)

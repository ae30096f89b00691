"""The chart installed for real: `make image`'s image, `helm install`, two replicas on the kubelet node.

Everything a user's install does runs here, on the real node (kubelet, containerd 2, runc):
the operator image is built by scripts/image.sh, loaded into the node's containerd (`docker save`
| `ctr images import`; no registry is reachable) and installed by `helm install` from helm/vigil
with `image.pullPolicy: Never`. The operator runs in-cluster as two pods under the chart's own
ServiceAccount, RBAC, securityContext, probes and ConfigMap, so a verb missing from the chart
shows as a 403 in their logs, and the module fails on any.

What stands in for what this machine lacks, and nothing else:

* no kube-proxy and an API server on loopback: e2e/cluster/serviceroutes.py gives pods of this
  node's bridge the one ClusterIP route kube-proxy would (10.96.0.1:443 to the API server);
* the bundled PostgreSQL's image (postgres:16) cannot be pulled here, so `postgresql.enabled:
  false` and the history DSN comes from `history.existingSecret` (the chart's setting for an
  external database): Debian's PostgreSQL on the host, behind a selector-less Service routed the
  same way. Both replicas share that one history, as the chart requires for replicaCount 2.

The tests run in order on one release (release `e2e` in namespace `vigil-e2e`, a 3 s Lease):
the ServiceMonitor and PrometheusRule render and promtool accepts the rules; the
`reconcile-daily` and `video-publish` examples run (job images swapped for the local busybox,
the schedule for a runAt); Debian's Prometheus scrapes both pods through the Service's endpoints;
60 idle sockets and 10 slow TLS writers held against each replica's API port for 15 s leave every
probe the kubelet sends answering 200, both pods Ready and no container restarted (issue 37; the
two-minute 500 + 50 variant is tests/stress/test_probe_hold_replicas.py);
the leader pod force-deleted, the other replica holds the Lease within lease + 1 s of the old
leader's last renewal; `helm upgrade` with a changed value rolls both pods; across both an `every:
3s` job fires each occurrence once, none lost, none doubled; `helm uninstall` runs the chart's
pre-delete hook (the pods stop while their RBAC stands, and the leader releases the Lease), keeps
the CRDs (crds.keep) and leaves nothing else of the release; and no line of any operator pod's
whole log, from install to uninstall, is a 403.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import itertools
import os
import re
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.cluster import images, serviceroutes
from e2e.cluster import release as release_files
from e2e.cluster.kubeletnode import NodeFiles
from tests.contract.postgres import PostgresServer
from tests.integration.conftest import (
    KUBELET_PORT_BASE,
    KUBELET_STATE,
    REPO,
    KubeCluster,
    install_vigil_api,
)
from tests.integration.containers import build_image, docker, stop_docker
from tests.integration.jobs import (
    create_job,
    execution_pods,
    make_namespace,
    parse_time,
    rfc3339,
    scheduled_for_by_job,
    wait_execution_phase,
)
from tests.integration.workflows import append_request, wait_phase, wait_step
from tests.prometheus_server import running_prometheus
from tests.waiting import wait_for
from vigil.core.ids import execution_id

pytestmark = [pytest.mark.kubelet, pytest.mark.docker]

CHART = REPO / "helm" / "vigil"
EXAMPLES = REPO / "manifests" / "examples"
RELEASE = "e2e"
NAMESPACE = "vigil-e2e"
FULLNAME = f"{RELEASE}-vigil"
LEASE = "vigil-leader"
LEASE_SECONDS = 3  # short, so a failover fits in a test; renewed every second
HISTORY_SECRET = "history-dsn"
HISTORY_SERVICE = "history-db"
HISTORY_DATABASE = "vigil_e2e"
POSTGRES_PORT = 5432
#: The every-job that runs through the failover and the upgrade: an occurrence every TICK.
TICK = timedelta(seconds=3)
ROLLOUT_TIMEOUT = 180  # two operator pods starting on 2 shared cores
OUTCOME_TIMEOUT = 120
#: A 403 in any form the operator logs one (the client's "(403)", a status of 403).
FORBIDDEN = re.compile(r"forbidden|\(403\)|\b403\b", re.IGNORECASE)
LOG_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}")  # its milliseconds may read 403


def values(image_tag: str, *, history_secret: str) -> dict[str, Any]:
    return {
        "image": release_files.image_values(image_tag),
        "replicaCount": 2,
        "postgresql": {"enabled": False},
        "history": {"existingSecret": history_secret},
        "config": {"leaderElection": {"leaseDurationSeconds": LEASE_SECONDS, "renewPeriodSeconds": 1}},
    }


# --- the image, the routes, the history database ------------------------------------------------


@pytest.fixture(scope="module")
def node_files() -> NodeFiles:
    return NodeFiles(KUBELET_STATE, KUBELET_PORT_BASE)


@pytest.fixture(scope="module")
def operator_image(kubelet_cluster: KubeCluster, node_files: NodeFiles) -> Iterator[str]:
    """`make image`'s image, imported into the node's containerd (k8s.io namespace)."""
    daemon = docker()
    was_running = daemon.answers()
    tag = build_image()
    release_files.load_image(tag, node_files)
    yield tag
    if not was_running and not keep_cluster():
        stop_docker()


def keep_cluster() -> bool:
    return os.environ.get("VIGIL_TEST_KEEP_CLUSTER") == "1"


@pytest.fixture(scope="module")
def api_route(kubelet_cluster: KubeCluster, node_files: NodeFiles) -> Iterator[None]:
    """Pods reach the `kubernetes` Service's ClusterIP (see the module docstring)."""
    route = release_files.route_api(node_files, kubelet_cluster.kubeconfig)
    yield
    serviceroutes.remove(route)


@pytest.fixture(scope="module")
def history_db(kubelet_cluster: KubeCluster, node_files: NodeFiles) -> Iterator[tuple[PostgresServer, str]]:
    """Debian's PostgreSQL on the host, reachable from the node's pods at a Service's ClusterIP.

    The server listens on loopback; the pods' connections arrive from the node's pod subnet, which
    its pg_hba.conf trusts (a throwaway server, as every test's). Yields the server and the DSN
    the pods use."""
    server = PostgresServer.create()
    with (server.data / "pg_hba.conf").open("a") as hba:
        hba.write(f"host all all {node_files.subnet} trust\n")
    server.stop()
    server.start()
    dsn = server.create_database(HISTORY_DATABASE)
    fresh_namespace(kubelet_cluster)
    service = kubelet_cluster.core.create_namespaced_service(NAMESPACE, {
        "metadata": {"name": HISTORY_SERVICE},
        "spec": {"ports": [{"port": POSTGRES_PORT, "protocol": "TCP"}]},
    })  # fmt: skip
    ip = service.spec.cluster_ip
    route = serviceroutes.forward(serviceroutes.Route(node_files.bridge, ip, POSTGRES_PORT, server.port))
    try:
        yield server, dsn.replace(f"127.0.0.1:{server.port}", f"{ip}:{POSTGRES_PORT}")
    finally:
        serviceroutes.remove(route)
        server.drop()


def fresh_namespace(kube: KubeCluster) -> None:
    """The release's namespace, new: a release or namespace a kept cluster still has goes first."""
    kube.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", check=False)
    kube.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=120s")
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))


# --- the release ---------------------------------------------------------------------------------


class OperatorLogs:
    """Every operator pod's log, followed (`kubectl logs -f`) from its first sight until it ends,
    so a pod deleted or rolled away keeps its log up to its last line."""

    def __init__(self, cluster: KubeCluster, directory: Path) -> None:
        self.cluster = cluster
        self.directory = directory
        self.followers: dict[str, subprocess.Popen[bytes]] = {}

    def follow(self) -> None:
        """Start following every operator pod not followed yet."""
        for pod in operator_pods(self.cluster):
            name = pod.metadata.name
            if name in self.followers or not pod.status.container_statuses:
                continue
            command = [str(self.cluster.bin / "kubectl"), "--kubeconfig", str(self.cluster.kubeconfig),
                       "logs", "--follow", "-n", NAMESPACE, name, "-c", "operator"]  # fmt: skip
            with (self.directory / f"{name}.log").open("wb") as out:
                self.followers[name] = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        for proc in self.followers.values():
            if proc.poll() is None:
                proc.terminate()
            proc.wait(timeout=30)

    def text(self, pod: str) -> str:
        return (self.directory / f"{pod}.log").read_text(errors="replace")

    def forbidden(self) -> list[str]:
        return [f"{pod}: {line}" for pod in self.followers for line in self.text(pod).splitlines()
                if FORBIDDEN.search(LOG_TIMESTAMP.sub("", line))]  # fmt: skip


@pytest.fixture(scope="module")
def release(
    kubelet_cluster: KubeCluster,
    operator_image: str,
    api_route: None,
    history_db: tuple[PostgresServer, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorLogs]:
    """`helm install` of the chart with the built image; uninstalled by the last test (or here)."""
    kube = kubelet_cluster
    dsn = history_db[1]
    kube.core.create_namespaced_secret(NAMESPACE, {"metadata": {"name": HISTORY_SECRET}, "stringData": {"dsn": dsn}})
    adopt_crds(kube)
    path = tmp_path_factory.mktemp("chart") / "values.yaml"
    path.write_text(yaml.safe_dump(values(operator_image, history_secret=HISTORY_SECRET)))
    logs = OperatorLogs(kube, path.parent)
    try:
        kube.helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--values", str(path),
                  "--wait", "--timeout", f"{ROLLOUT_TIMEOUT}s")  # fmt: skip
        logs.follow()
        yield logs
    except BaseException:
        print(describe(kube))
        raise
    finally:
        kube.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", check=False)
        kube.kubectl("delete", "namespace", NAMESPACE, "--wait=false", "--ignore-not-found")
        logs.stop()
        install_vigil_api(kube)  # the admission policy the rest of the session expects, as it was


def adopt_crds(kube: KubeCluster) -> None:
    """The session's fixture applied the CRDs with kubectl; mark them as the release's, as Helm
    documents for adopting existing objects, so the chart's crds.install manages them."""
    for path in sorted((REPO / "crds").glob("*.yaml")):
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        kube.kubectl("annotate", "--overwrite", f"crd/{name}",
                     f"meta.helm.sh/release-name={RELEASE}", f"meta.helm.sh/release-namespace={NAMESPACE}")  # fmt: skip
        kube.kubectl("label", "--overwrite", f"crd/{name}", "app.kubernetes.io/managed-by=Helm")


def describe(kube: KubeCluster) -> str:
    pods = kube.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide", check=False).stdout
    logs = kube.kubectl("logs", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=operator", "--tail=40",
                        "--prefix", check=False)  # fmt: skip
    return f"{pods}\n{logs.stdout}{logs.stderr}"


def operator_pods(kube: KubeCluster) -> list[Any]:
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=operator"
    return [p for p in kube.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
            if p.metadata.deletion_timestamp is None]  # fmt: skip


def ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def lease(kube: KubeCluster) -> Any:
    try:
        return kube.coordination.read_namespaced_lease(LEASE, NAMESPACE)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def holder(kube: KubeCluster) -> str | None:
    found = lease(kube)
    return found.spec.holder_identity if found else None


def leader_among(kube: KubeCluster, pods: list[str]) -> str | None:
    name = holder(kube)
    return name if name in pods else None


@pytest.fixture(scope="module")
def ticking(kubelet_cluster: KubeCluster, release: OperatorLogs) -> Iterator[tuple[str, str]]:
    """An `every: 3s` job running busybox pods through the failover and the upgrade."""
    namespace = make_namespace(kubelet_cluster, "tick")
    create_job(kubelet_cluster, namespace, "tick", every=f"{int(TICK.total_seconds())}s", template=busybox_template("true"))
    yield namespace, "tick"
    kubelet_cluster.clear_namespace(namespace)


def busybox_template(command: str) -> dict[str, Any]:
    main = {"name": "main", "image": images.JOB_IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", command]}
    return {"spec": {"containers": [main], "terminationGracePeriodSeconds": 2}}


def nominal_times(kube: KubeCluster, namespace: str, job: str) -> list[datetime]:
    return [parse_time(t) for t in scheduled_for_by_job(kube, namespace).get(job, [])]


def wait_fired_through(kube: KubeCluster, namespace: str, job: str, at: datetime) -> list[datetime]:
    """The job's Executions' nominal times once one is at or after `at`."""

    def probe() -> list[datetime] | None:
        times = nominal_times(kube, namespace, job)
        return times if times and max(times) >= at else None

    return wait_for(probe, timeout=OUTCOME_TIMEOUT, what=f"{job} to fire through {rfc3339(at)}")


def history_nominals(server: PostgresServer, namespace: str, job: str) -> set[datetime]:
    """The nominal times of the job's attempts in the shared history database."""
    query = "SELECT scheduled_for FROM attempts WHERE namespace = %s AND job = %s"
    with psycopg.connect(server.conninfo(HISTORY_DATABASE)) as connection:
        return {row[0] for row in connection.execute(query, (namespace, job))}


def assert_each_occurrence_once(times: list[datetime]) -> None:
    """One Execution per nominal time, and no nominal time of the lattice left out."""
    assert len(times) == len(set(times)), f"doubled: {sorted(t for t in times if times.count(t) > 1)}"
    ordered = sorted(times)
    gaps = [(a, b) for a, b in itertools.pairwise(ordered) if b - a != TICK]
    assert not gaps, f"occurrences lost between {gaps}"


# --- the tests, in order -------------------------------------------------------------------------


def test_the_servicemonitor_and_prometheusrule_render_and_the_rules_pass_promtool(
    kubelet_cluster: KubeCluster, tmp_path: Path
) -> None:
    rendered = kubelet_cluster.helm(
        "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--api-versions", "monitoring.coreos.com/v1",
        "--set", "metrics.serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true",
    ).stdout  # fmt: skip
    objects = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(rendered) if o}
    monitor = objects[("ServiceMonitor", FULLNAME)]
    service = objects[("Service", FULLNAME)]
    # The monitor selects the operator's Service by its labels, and scrapes its metrics port.
    for requirement in monitor["spec"]["selector"]["matchExpressions"]:
        assert service["metadata"]["labels"][requirement["key"]] in requirement["values"], requirement
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    assert "metrics" in [p["name"] for p in service["spec"]["ports"]]
    rule = objects[("PrometheusRule", FULLNAME)]
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    check = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS" in check.stdout


def test_the_operator_runs_in_cluster_under_the_charts_identity(kubelet_cluster: KubeCluster, release: OperatorLogs) -> None:
    pods = wait_for(lambda: [p for p in operator_pods(kubelet_cluster) if ready(p)] if len(
        [p for p in operator_pods(kubelet_cluster) if ready(p)]) == 2 else None,
        timeout=ROLLOUT_TIMEOUT, what="two ready operator pods")  # fmt: skip
    names = [p.metadata.name for p in pods]
    assert {p.spec.service_account_name for p in pods} == {FULLNAME}
    assert {p.spec.containers[0].image for p in pods} == {f"{values_image(kubelet_cluster)}"}
    assert all(p.status.container_statuses[0].restart_count == 0 for p in pods), describe(kubelet_cluster)
    wait_for(lambda: leader_among(kubelet_cluster, names), timeout=60, what="an operator pod to hold the Lease")


def values_image(kube: KubeCluster) -> str:
    deployed = yaml.safe_load(kube.helm("get", "values", RELEASE, "--namespace", NAMESPACE, "-o", "yaml").stdout)
    return f"{deployed['image']['repository']}:{deployed['image']['tag']}"


def test_the_reconcile_daily_example_runs(kubelet_cluster: KubeCluster, release: OperatorLogs) -> None:
    namespace = make_namespace(kubelet_cluster, "daily")
    try:
        job = yaml.safe_load((EXAMPLES / "reconcile-daily.yaml").read_text())
        spec = job["spec"]
        del spec["cron"]  # the example's schedule, brought forward to a few seconds from now
        run_at = (datetime.now(UTC) + timedelta(seconds=5)).replace(microsecond=0)
        spec["runAt"] = rfc3339(run_at)
        for container in spec["template"]["spec"]["containers"]:
            container.update(image=images.JOB_IMAGE, imagePullPolicy="Never")
        created = kubelet_cluster.custom.create_namespaced_custom_object("vigil.dev", "v1alpha1", namespace, "scheduledjobs", job)
        ex_id = execution_id(created["metadata"]["uid"], run_at)
        wait_execution_phase(kubelet_cluster, namespace, ex_id, "Succeeded", timeout=OUTCOME_TIMEOUT)
        [pod] = execution_pods(kubelet_cluster, namespace, ex_id)
        log = kubelet_cluster.kubectl("logs", "-n", namespace, pod.metadata.name).stdout
        assert f'reconciling {{"date":"{run_at.date().isoformat()}"}} for {rfc3339(run_at)}' in log, log
        assert f"(execution {ex_id})" in log
    finally:
        kubelet_cluster.clear_namespace(namespace)


def test_the_video_publish_example_runs_and_an_editor_approves_it(
    kubelet_cluster: KubeCluster, release: OperatorLogs
) -> None:
    namespace = make_namespace(kubelet_cluster, "video")
    try:
        workflow = yaml.safe_load((EXAMPLES / "video-publish.yaml").read_text())
        for step in workflow["spec"]["steps"]:
            for template in (step.get("template"), step.get("compensate")):
                for container in (template or {}).get("spec", {}).get("containers", []):
                    container.update(image=images.JOB_IMAGE, imagePullPolicy="Never")
        kubelet_cluster.custom.create_namespaced_custom_object("vigil.dev", "v1alpha1", namespace, "workflows", workflow)
        wait_step(kubelet_cluster, namespace, "video-publish", "approve", "Running", timeout=OUTCOME_TIMEOUT)
        # An editor, bound to the chart's approver role, approves in their own name.
        client.RbacAuthorizationV1Api(kubelet_cluster.api).create_namespaced_role_binding(namespace, {
            "metadata": {"name": "editors-approve"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{FULLNAME}-workflow-approver"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "editors"}],
        })  # fmt: skip
        with kubelet_cluster.impersonating() as as_user:
            append_request(as_user("erin", "editors"), namespace, "video-publish",
                           action="approve", step="approve", by="erin", byGroups=["editors"])  # fmt: skip
        done = wait_phase(kubelet_cluster, namespace, "video-publish", "Succeeded", "Failed", timeout=OUTCOME_TIMEOUT)
        assert done["status"]["phase"] == "Succeeded", done["status"]
        assert done["status"]["steps"]["approve"]["decidedBy"] == "erin"
    finally:
        kubelet_cluster.clear_namespace(namespace)


def test_prometheus_scrapes_both_operator_pods_through_the_service(
    kubelet_cluster: KubeCluster, release: OperatorLogs, tmp_path: Path
) -> None:
    """As a ServiceMonitor does: the Service's endpoints (pod IPs on the node's bridge, which the
    host routes to) on its `metrics` port."""
    slices = kubelet_cluster.kubectl("get", "endpointslices", "-n", NAMESPACE, "-l",
                                     f"kubernetes.io/service-name={FULLNAME}", "-o", "yaml").stdout  # fmt: skip
    targets = sorted(
        f"{address}:{port['port']}"
        for item in yaml.safe_load(slices)["items"]
        for port in item.get("ports") or [] if port["name"] == "metrics"
        for endpoint in item.get("endpoints") or [] for address in endpoint["addresses"]
    )  # fmt: skip
    assert len(targets) == 2, slices
    with running_prometheus(tmp_path, targets=targets, rules="groups: []\n") as prometheus:

        def scraped() -> list[Any] | None:
            up = prometheus.api("query?query=up")["result"]
            leaders = prometheus.api("query?query=sum(vigil_leader)")["result"]
            healthy = len(up) == 2 and all(r["value"][1] == "1" for r in up)
            return up if healthy and leaders and leaders[0]["value"][1] == "1" else None

        wait_for(scraped, timeout=60, what="both pods scraped, one of them the leader")


#: The short hold of every replica's API (the long one, 500 + 50 for two minutes, is
#: tests/stress/test_probe_hold_replicas.py): past the old server's 8 workers and 32 queued.
SHORT_HOLD = timedelta(seconds=15)
SHORT_IDLE, SHORT_SLOW = 60, 10


@dataclasses.dataclass(frozen=True)
class Replica:
    pod: str
    ip: str
    api_port: int
    health_port: int
    restarts: int


def replicas(kube: KubeCluster) -> list[Replica]:
    """Each operator pod's address on the node's bridge (which the host routes to), its API and
    probe ports, and how often its container has restarted."""
    found = []
    for pod in operator_pods(kube):
        [container] = [c for c in pod.spec.containers if c.name == "operator"]
        ports = {p.name: p.container_port for p in container.ports or []}
        restarts = sum(s.restart_count for s in pod.status.container_statuses or [])
        found.append(Replica(pod.metadata.name, pod.status.pod_ip, ports["http"], ports["health"], restarts))
    return found


def kubelet_probe(replica: Replica, path: str) -> int | None:
    """A probe as the kubelet sends it (2 s timeout): the status, or None when none came."""
    connection = http.client.HTTPConnection(replica.ip, replica.health_port, timeout=2)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    except OSError:
        return None
    finally:
        connection.close()


@contextlib.contextmanager
def holding(targets: list[Replica], *, idle: int, slow: int) -> Iterator[None]:
    """`idle` sockets that never send and `slow` TLS connections that send a byte of a request
    every 300 ms, against each replica's API port (served over TLS, as the chart configures it):
    a slowloris from one peer, as a pod of another namespace could send (the chart's
    NetworkPolicy admits every pod by default)."""
    tls = ssl.create_default_context()
    tls.check_hostname = False
    tls.verify_mode = ssl.CERT_NONE  # the attacker does not care who answers
    sockets: list[socket.socket] = []
    writers: list[socket.socket] = []
    for replica in targets:
        for _ in range(idle):
            with contextlib.suppress(OSError):
                sockets.append(socket.create_connection((replica.ip, replica.api_port), timeout=5))
        for _ in range(slow):
            with contextlib.suppress(OSError):
                raw = socket.create_connection((replica.ip, replica.api_port), timeout=5)
                sockets.append(raw)
                writers.append(tls.wrap_socket(raw))
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.3):
            for sock in writers:
                with contextlib.suppress(OSError):
                    sock.send(b"G")

    writer = threading.Thread(target=trickle, name="slow-writers")
    writer.start()
    try:
        yield
    finally:
        stop.set()
        writer.join()
        for sock in writers + sockets:
            with contextlib.suppress(OSError):
                sock.close()


def hold_every_replica(kube: KubeCluster, *, hold: timedelta, idle: int, slow: int) -> None:
    """Hold every replica's API for `hold`; meanwhile the probes the kubelet sends answer 200 each
    time, every pod stays Ready, and afterwards no container has restarted."""
    before = replicas(kube)
    assert len(before) == 2 and all(ready(p) for p in operator_pods(kube)), describe(kube)
    answers: list[tuple[str, str, int | None]] = []
    not_ready: list[str] = []
    with holding(before, idle=idle, slow=slow):
        until = datetime.now(UTC) + hold

        def probed_until_the_end() -> bool:
            for replica in before:
                answers.extend((replica.pod, path, kubelet_probe(replica, path)) for path in ("/healthz", "/readyz"))
            not_ready.extend(p.metadata.name for p in operator_pods(kube) if not ready(p))
            return datetime.now(UTC) >= until

        wait_for(probed_until_the_end, timeout=hold.total_seconds() + 60, interval=1.0,
                 what=f"{hold.total_seconds():.0f}s of probes under the hold")  # fmt: skip
    failed = [answer for answer in answers if answer[2] != 200]
    assert answers and not failed, failed
    assert not not_ready, describe(kube)
    after = {r.pod: r.restarts for r in replicas(kube)}
    assert after == {r.pod: r.restarts for r in before}, describe(kube)


def test_readiness_stays_200_and_no_container_restarts_while_every_replicas_api_is_held(
    kubelet_cluster: KubeCluster, release: OperatorLogs
) -> None:
    """Issue 37's probe test, short: the kubelet's probes, on their own listener, are not starved
    by sockets held on the API port (the old server answered 503 after 40)."""
    hold_every_replica(kubelet_cluster, hold=SHORT_HOLD, idle=SHORT_IDLE, slow=SHORT_SLOW)


def test_the_other_replica_takes_over_within_lease_plus_one_second(
    kubelet_cluster: KubeCluster, release: OperatorLogs, ticking: tuple[str, str]
) -> None:
    """The Lease's promise is counted from the old leader's last renewal (it may renew until the
    kubelet has killed it); the time from the forced deletion is printed beside it."""
    kube = kubelet_cluster
    namespace, job = ticking
    wait_fired_through(kube, namespace, job, datetime.now(UTC) + 2 * TICK)
    names = [p.metadata.name for p in operator_pods(kube)]
    old = wait_for(lambda: leader_among(kube, names), timeout=60, what="a leader")
    standby = next(n for n in names if n != old)
    release.follow()
    # The renewal last seen before the deletion: the old leader, killed with SIGTERM first, may
    # release the Lease (clear its holder) and the standby take it before the first look below.
    held = lease(kube)
    assert held.spec.holder_identity == old, held.spec.holder_identity
    last_renewal: list[datetime] = [held.spec.renew_time]
    deleted_at = datetime.now(UTC)
    kube.kubectl("delete", "pod", old, "-n", NAMESPACE, "--grace-period=0", "--force")

    def taken_over() -> Any:
        seen = lease(kube)
        if seen.spec.holder_identity == old:
            last_renewal[:] = [seen.spec.renew_time]
        return seen if seen.spec.holder_identity == standby else None

    taken = wait_for(taken_over, timeout=LEASE_SECONDS + 30, interval=0.05, what=f"{standby} to hold the Lease")
    since_renewal = taken.spec.acquire_time - last_renewal[-1]
    since_deletion = taken.spec.acquire_time - deleted_at
    print(f"failover: {since_renewal.total_seconds():.2f}s after the old leader's last renewal, "
          f"{since_deletion.total_seconds():.2f}s after its forced deletion (Lease {LEASE_SECONDS}s)")  # fmt: skip
    assert since_renewal <= timedelta(seconds=LEASE_SECONDS + 1), release.text(old)[-3000:]
    times = wait_fired_through(kube, namespace, job, datetime.now(UTC) + 3 * TICK)
    assert_each_occurrence_once(times)
    assert min(times) < deleted_at < max(times)


def test_helm_upgrade_rolls_the_deployment_without_losing_an_occurrence(
    kubelet_cluster: KubeCluster, release: OperatorLogs, ticking: tuple[str, str], history_db: tuple[PostgresServer, str]
) -> None:
    kube = kubelet_cluster
    namespace, job = ticking
    wait_for(lambda: len([p for p in operator_pods(kube) if ready(p)]) == 2, timeout=ROLLOUT_TIMEOUT,
             what="the Deployment back at two ready pods")  # fmt: skip
    before = {p.metadata.name for p in operator_pods(kube)}
    release.follow()
    started = datetime.now(UTC)
    kube.helm("upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values",
              "--set", "config.trigger.tickMilliseconds=200", "--wait", "--timeout", f"{ROLLOUT_TIMEOUT}s")  # fmt: skip
    kube.kubectl("rollout", "status", f"deployment/{FULLNAME}", "-n", NAMESPACE, "--timeout", f"{ROLLOUT_TIMEOUT}s")
    after = wait_for(lambda: {p.metadata.name for p in operator_pods(kube)} if len(operator_pods(kube)) == 2 else None,
                     timeout=ROLLOUT_TIMEOUT, what="the old pods gone")  # fmt: skip
    assert not before & after, f"not rolled: {before & after}"
    config = kube.core.read_namespaced_config_map(f"{FULLNAME}-config", NAMESPACE).data["config.yaml"]
    assert yaml.safe_load(config)["trigger"]["tickMilliseconds"] == 200
    wait_for(lambda: leader_among(kube, sorted(after)), timeout=60, what="a new pod to lead")
    times = wait_fired_through(kube, namespace, job, datetime.now(UTC) + 3 * TICK)
    assert_each_occurrence_once(times)
    assert min(times) < started < max(times)
    # Every leader so far (the first, the one that took over, the upgrade's) wrote one history.
    server = history_db[0]
    wait_for(lambda: {min(times), max(times)} <= history_nominals(server, namespace, job), timeout=60,
             what="the first and the latest occurrence in the shared history database")  # fmt: skip


def test_helm_uninstall_keeps_the_crds_and_leaves_nothing_of_the_release(
    kubelet_cluster: KubeCluster, release: OperatorLogs, ticking: tuple[str, str]
) -> None:
    kube = kubelet_cluster
    kube.clear_namespace(ticking[0])
    release.follow()
    kube.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", f"{ROLLOUT_TIMEOUT}s")
    for path in sorted((REPO / "crds").glob("*.yaml")):
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        crd = kube.apiext.read_custom_resource_definition(name)
        assert crd.metadata.annotations.get("helm.sh/resource-policy") == "keep", name
    wait_for(lambda: not kube.core.list_namespaced_pod(NAMESPACE).items, timeout=120, what="the operator pods gone")
    selector = f"app.kubernetes.io/instance={RELEASE}"
    namespaced = kube.kubectl("get", "all,configmaps,secrets,serviceaccounts,roles,rolebindings,networkpolicies,"
                              "poddisruptionbudgets", "-n", NAMESPACE, "-l", selector, "-o", "name").stdout  # fmt: skip
    cluster_wide = kube.kubectl("get", "clusterroles,clusterrolebindings,validatingadmissionpolicies,"
                                "validatingadmissionpolicybindings", "-l", selector, "-o", "name").stdout  # fmt: skip
    assert (namespaced + cluster_wide).strip() == "", namespaced + cluster_wide
    assert kube.helm("status", RELEASE, "--namespace", NAMESPACE, check=False).returncode != 0
    # The pre-delete hook stopped the pods while their RBAC stood: the leader released its Lease.
    assert holder(kube) is None


def test_no_operator_request_was_forbidden_from_install_to_uninstall(release: OperatorLogs) -> None:
    """Each pod's whole log: the first two, the one that replaced the deleted leader, the two the
    upgrade made, up to their end at the uninstall."""
    release.stop()  # the logs end with their pods; this waits for the last lines
    assert len(release.followers) >= 5
    assert all("campaigning for lease" in release.text(pod) for pod in release.followers)
    assert not release.forbidden(), "\n".join(release.forbidden()[:20])

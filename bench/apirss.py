"""The operator's RSS with its HTTP API serving, beside the same load with the API off (bench/api.py, figure 2).

The load is the `rss` section's (bench/rss.py: ScheduledJobs, retained Executions, waiting
Workflows, created before the operator starts). The reference run is the `rss` section's own
(the API, metrics and probe ports off); the measured run listens on an API port and a probe
port, and while its VmRSS is sampled a ServiceAccount of the load's namespace, allowed to get
Executions there and holding a token for the audience `vigil`, reads the retained Executions by
id at `rate` requests per second over keep-alive connections (bench/api.drive). Each run gets a
fresh local control plane.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

from kubernetes import client

from bench import rss as rss_bench
from bench.api import DEFAULT_CONNECTIONS, RSS_TARGET_MIB, Latencies, drive
from bench.cluster import GROUP, VERSION, Bench, fresh_cluster, last_error, stop_process, wait_until
from bench.reporting import Row
from bench.rss import LOADED_DEADLINE_S, Rss
from tests.contract.postgres import free_port

READER = "bench-reader"
TOKEN_SECONDS = 3600


def reader_token(b: Bench, namespace: str) -> str:
    """A ServiceAccount of `namespace` that may get Executions there, and its token for the audience vigil."""
    b.core.create_namespaced_service_account(namespace, {"metadata": {"name": READER}})
    rbac = client.RbacAuthorizationV1Api(b.api)
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": READER},
        "rules": [{"apiGroups": [GROUP], "resources": ["executions"], "verbs": ["get", "list"]}],
    })  # fmt: skip
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": READER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": READER},
        "subjects": [{"kind": "ServiceAccount", "name": READER, "namespace": namespace}],
    })  # fmt: skip
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=["vigil"], expiration_seconds=TOKEN_SECONDS)
    )
    return str(b.core.create_namespaced_service_account_token(READER, namespace, request).status.token)


def serving(b: Bench, *, jobs: int, executions: int, workflows: int, settle: float, rate: float) -> tuple[Rss, Latencies | None]:
    """The rss section's run with the API on and read at `rate` while sampling."""
    ns, opns = b.namespace("bench-rss"), b.namespace("bench-rssop")
    rss_bench.create_load(b, ns, jobs=jobs, executions=executions, workflows=workflows)
    token = reader_token(b, ns)
    ids = [o["metadata"]["name"] for o in b.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "executions")["items"]]
    api_port, health_port = free_port(), free_port()
    proc, pidfile = b.start_operator("bench-apirss", (
        f"namespace: {opns}\nhttp: {{metricsPort: 0, apiPort: {api_port}, healthPort: {health_port}}}\n"
        f"history: {{dsn: 'sqlite:///{b.state}/bench-apirss-history.db'}}\n"
    ))  # fmt: skip
    notes: list[str] = []
    got: list[Latencies] = []
    try:
        started = time.monotonic()
        deadline = datetime.now(UTC) + timedelta(seconds=LOADED_DEADLINE_S)
        loaded = wait_until(deadline, lambda: proc.poll() is not None or rss_bench.all_in(b, ns, jobs=jobs, workflows=workflows),
                            interval=3.0)  # fmt: skip
        loaded_after = time.monotonic() - started if loaded and proc.poll() is None else None
        if loaded_after is None:
            notes.append(f"the load was not all in within {LOADED_DEADLINE_S:.0f}s: sampled anyway")
        paths = [f"/executions/{eid}" for eid in ids] or ["/executions/none"]
        reading = threading.Thread(target=lambda: got.append(drive(
            api_port, paths, rate=rate, seconds=settle, connections=DEFAULT_CONNECTIONS, token=token)))  # fmt: skip
        reading.start()
        samples = rss_bench.sample(proc, settle)
        reading.join()
        if proc.poll() is not None:
            notes.append(f"the operator exited with code {proc.returncode}: "
                         f"{last_error(b.state / 'logs' / 'bench-apirss.log')}")  # fmt: skip
        return Rss(samples, loaded_after, notes), (got[0] if got else None)
    finally:
        stop_process(proc, pidfile)


def section(*, rate: float, jobs: int, executions: int, workflows: int, settle: float) -> list[Row]:
    size = f"{jobs} jobs / {executions} executions / {workflows} workflows"
    print(f"\n## api rss: the operator's resident memory at {size}, API off, then serving {rate:.0f} timelines/s")
    with fresh_cluster("apirss-off") as b:
        off = rss_bench.run(b, jobs=jobs, executions=executions, workflows=workflows, settle=settle)
    with fresh_cluster("apirss-on") as b:
        on, reads = serving(b, jobs=jobs, executions=executions, workflows=workflows, settle=settle, rate=rate)
    for label, got in (("API off", off), ("API serving", on)):
        for note in got.notes:
            print(f"  {label}: note: {note}")
        if got.samples:
            print(f"  {label}: VmRSS steady {got.steady:.0f} MiB, peak {max(got.samples):.0f} MiB ({len(got.samples)} samples)")
    if reads is not None:
        print(f"  reads while sampling: {len(reads.ms)}/{reads.expected} answered 200 ({reads.errors} not), "
              f"p99 {reads.p(0.99):.1f} ms")  # fmt: skip
    if not (off.samples and on.samples):
        return [Row(f"api: operator RSS serving, {size}", "n/a (no samples)", target=f"<= reference + {RSS_TARGET_MIB:.0f} MiB")]
    return [Row(
        f"api: operator RSS serving {rate:.0f}/s, {size}", f"{on.steady:.0f} MiB", reference=f"{off.steady:.0f} MiB (API off)",
        ratio=f"{on.steady - off.steady:+.0f} MiB", target=f"<= +{RSS_TARGET_MIB:.0f} MiB",
    )]  # fmt: skip

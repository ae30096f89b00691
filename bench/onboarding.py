"""Onboarding figures for `make bench`: new ScheduledJobs until every one has a nextRun.

`count` ScheduledJobs (a daily cron, so nothing fires while it runs) are created at once, eight
clients in parallel, once the operator holds the leader Lease. The clock runs from the first
creation to the moment the last job is seen with `status.nextRun` on a watch: the operator has
validated it, inserted its first occurrence into a ScheduleBucket and written its status. The
figure is jobs per second beside the target (200/s: 10,000 in under a minute); the creation
alone is printed too, since no operator can onboard faster than the jobs arrive. A second watch
counts the ScheduleBucket writes (each ADDED or MODIFIED event is one), which says whether the
first occurrences went in group-committed (few writes) or one bucket write per job; and the API
server's own `apiserver_request_total` is read before and after, so every write to ScheduledJobs
and ScheduleBuckets is printed per job by verb and subresource (the creates are the bench's own;
the rest are the operator's: the status, the buckets). That is where the time
goes on a machine whose API server is the bottleneck.

The creating client (the Python client, eight threads, on the same two cores) can be slower than
the target on its own, so a second run has every job created before the operator starts, and
the clock runs from its taking the Lease: the operator's own pace through the same path (its
cache's first list queues every job, as a watch event would).

Run it alone on a cluster that is already up, without the rest of the bench:
`python -m bench.onboarding --kubeconfig .cluster/NAME/kubeconfig --onboard 1000`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from bench.cluster import Bench, stop_process
from bench.reporting import Completion, censored, percentile, rate
from bench.workflows import BenchCluster

GROUP, VERSION = "vigil.dev", "v1alpha1"
CONTAINER = {"name": "main", "image": "busybox:1.36", "command": ["true"]}
TARGET_RATE = 200.0  # jobs/s: 10,000 new ScheduledJobs scheduled within 50 s
TARGET_BEHIND_S = 5.0  # each job's nextRun at most this long after its own creation (p99), whatever the client's pace
DEADLINE_S = 900.0  # for every job to have its nextRun
LEAD_DEADLINE_S = 120.0
POLL_S = 0.5
CREATE_TRIES = 5


class Watched:
    """From a watch in a thread: when each object of a kind was first seen satisfying `seen`,
    and how many ADDED/MODIFIED events arrived (each one is one write to the API server)."""

    def __init__(self, api: client.CustomObjectsApi, namespace: str, plural: str, seen: Any) -> None:
        self.first: dict[str, float] = {}
        self.writes = 0
        self.errors: list[str] = []
        self._args = (api, namespace, plural, seen)
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        api, namespace, plural, seen = self._args
        version: str | None = None
        while not self._stop.is_set():
            kwargs: dict[str, Any] = {"timeout_seconds": 60, "deserialize": False}
            if version:
                kwargs["resource_version"] = version
            try:
                stream = watch.Watch().stream(
                    api.list_namespaced_custom_object, GROUP, VERSION, namespace, plural, **kwargs
                )
                for event in stream:
                    obj = event.get("object") or {}
                    version = (obj.get("metadata") or {}).get("resourceVersion") or version
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self.writes += 1
                        name = obj["metadata"]["name"]
                        if name not in self.first and seen(obj):
                            self.first[name] = time.monotonic()
                    if self._stop.is_set():
                        return
            except Exception as err:  # resumed; a 410 starts again from a fresh list
                self.errors.append(f"{type(err).__name__}: {str(err).splitlines()[0][:200]}")
                if isinstance(err, client.ApiException) and err.status == 410:
                    version = None
                time.sleep(POLL_S)

    def stop(self) -> None:
        self._stop.set()


WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "CREATE", "UPDATE"})
_REQUESTS = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def api_writes(api: client.ApiClient) -> Counter[str]:
    """Writes to ScheduledJobs and ScheduleBuckets so far, from the API server's own counter,
    keyed `VERB resource[/subresource]`."""
    method, url, headers, _, _ = api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    response = api.call_api(method, url, headers)
    response.read()
    counts: Counter[str] = Counter()
    for line in response.data.decode().splitlines():
        match = _REQUESTS.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        if labels.get("resource") in ("scheduledjobs", "schedulebuckets") and labels.get("verb") in WRITE_VERBS:
            sub = f"/{labels['subresource']}" if labels.get("subresource") else ""
            counts[f"{labels['verb']} {labels['resource']}{sub}"] += int(float(match["value"]))
    return counts


def _settings(opns: str, state: Path) -> str:
    return (
        f"namespace: {opns}\nleaderElection: {{leaseDurationSeconds: 15, renewPeriodSeconds: 5}}\n"
        f"http: {{metricsPort: 0, apiPort: 0, healthPort: 0}}\nhistory: {{dsn: 'sqlite:///{state}/onboarding-history.db'}}\n"
    )


SPEC = {"cron": "17 3 * * *", "timezone": "UTC", "template": {"spec": {"containers": [CONTAINER]}}}


def _make(b: BenchCluster, ns: str, created: dict[str, float] | None = None) -> Callable[[int], None]:
    """A function creating ScheduledJob number i in `ns` (retrying what a loaded API server
    refuses); each one's creation time (monotonic, when the create returned) goes in `created`."""

    def make(i: int) -> None:
        name = f"o{i:05}"
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ScheduledJob", "metadata": {"name": name}, "spec": SPEC}
        _create(lambda: b.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "scheduledjobs", body))
        if created is not None:
            created[name] = time.monotonic()

    return make


def _create(send: Callable[[], object]) -> None:
    for attempt in range(CREATE_TRIES):  # a loaded API server answers 504 or 429 now and then
        try:
            send()
            return
        except client.ApiException as err:
            if err.status == 409:
                return  # an earlier try went through after all
            if err.status not in (429, 500, 503, 504) or attempt == CREATE_TRIES - 1:
                raise
            time.sleep(POLL_S)


def configmap_floor(b: Bench, count: int) -> Completion:
    """The same client creating `count` ConfigMaps holding a ScheduledJob's spec (the same size):
    how fast objects arrive at all, the reference for the jobs' creation rate."""
    ns = b.namespace("bench-onboardfloor")
    data = {"spec": json.dumps(SPEC)}

    def make(i: int) -> None:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"o{i:05}"}, "data": data}
        _create(lambda: b.core.create_namespaced_config_map(ns, body))

    began = time.monotonic()
    b.create_many(count, make)
    return Completion(count, count, time.monotonic() - began)


def onboarding(
    b: BenchCluster, api: client.ApiClient, state: Path, stop_process: Any, count: int, *, waiting: bool = False
) -> tuple[Completion, list[str], float | None]:
    """`count` new ScheduledJobs until each has a nextRun: the completion, what to read beside it,
    and (jobs created while the operator runs) the p99 of each job's nextRun behind its creation.
    `waiting`: the jobs are all created before the operator starts, and the clock runs from its
    taking the Lease (the operator's own pace, whatever the creating client's)."""
    ns = b.namespace("bench-onboard")
    opns = b.namespace("bench-onboardop")
    scheduled = Watched(b.custom, ns, "scheduledjobs", lambda o: bool((o.get("status") or {}).get("nextRun")))
    buckets = Watched(b.custom, opns, "schedulebuckets", lambda o: True)
    notes: list[str] = []
    created = 0.0
    created_at: dict[str, float] = {}
    if waiting:
        began = time.monotonic()
        b.create_many(count, _make(b, ns))
        created = time.monotonic() - began
    proc, pidfile = b.start_operator("bench-onboard", _settings(opns, state))
    try:
        started = time.monotonic()
        while time.monotonic() - started < LEAD_DEADLINE_S and proc.poll() is None:
            if b.lease_holder(opns) == "bench-onboard":
                break
            time.sleep(POLL_S)
        else:
            return Completion(0, count, 0.0), ["the operator never held the leader Lease"], None
        before = api_writes(api)
        began = time.monotonic()
        if not waiting:
            b.create_many(count, _make(b, ns, created_at))
            created = time.monotonic() - began
        while len(scheduled.first) < count and time.monotonic() - began < DEADLINE_S and proc.poll() is None:
            time.sleep(POLL_S)
        done = len(scheduled.first)
        last = max(scheduled.first.values(), default=began)
        elapsed = (last if done >= count else time.monotonic()) - began
        writes = api_writes(api) - before
        if waiting:
            notes.append(f"creating the {count} ScheduledJobs before the operator started took {created:.1f}s "
                         f"({count / created:.0f} jobs/s); the clock ran from its taking the Lease")  # fmt: skip
        else:
            notes.append(f"creating the {count} ScheduledJobs alone took {created:.1f}s ({count / created:.0f} jobs/s); "
                         f"the last nextRun came {max(0.0, elapsed - created):.1f}s after the last creation")  # fmt: skip
        per_job = ", ".join(f"{key} {n / max(1, done):.2f}" for key, n in sorted(writes.items()))
        notes.append(f"API writes per job scheduled (apiserver_request_total): {per_job}")
        notes.append(f"ScheduleBucket writes: {buckets.writes} ({buckets.writes / max(1, done):.2f} per job scheduled)")
        if proc.poll() is not None:
            notes.append(f"the operator exited with code {proc.returncode}")
        for watched, what in ((scheduled, "ScheduledJob"), (buckets, "ScheduleBucket")):
            if watched.errors:
                notes.append(f"{what} watch errors: {len(watched.errors)}, last: {watched.errors[-1]}")
        lag = None
        if created_at:
            behind = [at - created_at[name] for name, at in scheduled.first.items() if name in created_at]
            lag = percentile(censored(behind, count), 0.99)
            notes.append(f"each job's nextRun behind its own creation: p50 {percentile(censored(behind, count), 0.5):.2f}s, "
                         f"p99 {lag:.2f}s (target <= {TARGET_BEHIND_S:.0f}s)")  # fmt: skip
        return Completion(done, count, elapsed), notes, lag
    finally:
        scheduled.stop()
        buckets.stop()
        stop_process(proc, pidfile)


def report(done: Completion, notes: list[str]) -> str:
    """Print the figure and its notes; the figure, for the summary table."""
    figure = rate(done, "jobs")
    verdict = "meets" if done.complete and done.rate >= TARGET_RATE else "below"
    print(f"  every job has its nextRun: {figure}; target >= {TARGET_RATE:.0f} jobs/s ({verdict})")
    for note in notes:
        print(f"  note: {note}")
    return figure


def main(argv: list[str] | None = None) -> int:
    """The onboarding figure on a cluster that is already up (CRDs applied)."""
    parser = argparse.ArgumentParser(prog="python -m bench.onboarding", description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--onboard", type=int, default=1000, help="new ScheduledJobs (default 1000)")
    parser.add_argument("--waiting", action="store_true", help="create them all before the operator starts")
    parser.add_argument("--state", type=Path, default=Path(".cluster/onboarding"), help="logs and pid files")
    args = parser.parse_args(argv)
    state = args.state.resolve()
    for sub in ("logs", "pids"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    api = config.new_client_from_config(config_file=str(args.kubeconfig))
    env = {**os.environ, "KUBECONFIG": str(args.kubeconfig.resolve())}
    kubectl = args.kubeconfig.resolve().parent / "bin" / "kubectl"  # a local control plane's own
    bench = Bench(api=api, kubectl=kubectl, env=env, state=state)
    print(f"## onboarding: {args.onboard} new ScheduledJobs until every one has a nextRun")
    done, notes, _ = onboarding(bench, api, state, stop_process, args.onboard, waiting=args.waiting)
    report(done, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())

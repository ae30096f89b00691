"""The composition root: the one place that builds every collaborator and wires them.

Only wiring lives in this package: which adapter gets which collaborator, which thread runs
which pass, what each report is recorded as. Here, the process's life: `run(settings)` serves
and campaigns for the leader Lease at once (standbys stay warm: imported, connected, serving),
and as the leader starts every part's thread and waits for SIGTERM; `run_watchdog` is the
watchdog's own Deployment. Beside it, a module per concern:

- `clocks`: the wall clock's one maker, and that clock bounded by the API server's time;
- `clients`: the clients of the API server and the Lease configuration;
- `serving`: what every replica serves (probes, metrics, the HTTP API, the console, the
  approvals' callback and senders);
- `volume`: the volume tier's parts, when `queue.dsn` is set;
- `leader`: the leader's parts in named steps (bucket to pod, recording, the workflow engine)
  and every thread it runs, by name.

The passes themselves are in `vigil.kube.kits.loops`, the factories the CLI shares in
`vigil.kube.wiring`, and what happens over the process's life — the wait for the Lease, the
handover, the exit on a lost Lease, a store's migration waited for with backoff — is
`vigil.kube.lifecycle`'s.
"""

from __future__ import annotations

import logging
import threading

from kubernetes import client

from vigil import heap, logs, metrics
from vigil.api import ApprovalCallback
from vigil.api.console import ConsoleWrites
from vigil.core.servertime import ServerBoundedClock
from vigil.history.migrating import MigratingHistory
from vigil.kube.kits.events import EventRecorder
from vigil.kube.kits.leasing import LeaderElector
from vigil.kube.kits.loops import watch
from vigil.kube.lifecycle import (
    exit_on_lost_leadership,
    lead_until_stopped,
    stand_down,
    start_threads,
    stop_on_sigterm,
    wait_until_leader,
)
from vigil.kube.stores.executions import ExecutionStore
from vigil.kube.wiring import bucket_store, build_watchdog
from vigil.runtime.clients import (
    api_client,
    api_connections,
    election_client,
    identity,
    lease_config,
)
from vigil.runtime.clocks import bounded_clock
from vigil.runtime.leader import Parts, build_leader
from vigil.runtime.serving import serve, start_approvals
from vigil.runtime.volume import queue_watchdog, start_trigger_shards
from vigil.settings import Settings

log = logging.getLogger("vigil")


def _campaign(
    api: client.ApiClient,
    settings: Settings,
    *,
    lease_name: str,
    me: str,
    clock: ServerBoundedClock,
    approvals: ApprovalCallback | None = None,
    console_writes: ConsoleWrites | None = None,
) -> tuple[LeaderElector, ExecutionStore, MigratingHistory]:
    """Serve health, metrics and the API at once (standbys too), then campaign for `lease_name`;
    each Lease write's answer bounds `clock` by the API server's time."""
    lease = lease_config(settings, lease_name=lease_name, me=me)
    elector = LeaderElector(
        client.CoordinationV1Api(election_client(lease)),
        lease,
        on_lost=exit_on_lost_leadership,
        on_transition=lambda holder: metrics.LEADER_TRANSITIONS.inc(),
        clock=clock,
        on_server_time=clock.observe,
    )
    executions = ExecutionStore(api)
    history = MigratingHistory(settings.history.dsn, retention_days=settings.history.retention_days)
    serve(api, settings, elector, executions, history, approvals, lease_name=lease_name, console_writes=console_writes)
    elector.start()
    return elector, executions, history


def run(settings: Settings, *, console_writes: ConsoleWrites | None = None) -> int:
    """The operator (`vigil operator`): serve and campaign at once, standbys too; as the leader,
    start every part's thread and run until SIGTERM, then hand over (`vigil.kube.lifecycle`)."""
    stopping = stop_on_sigterm()
    me = identity()
    lease = lease_config(settings, lease_name=settings.leader_election.lease_name, me=me)
    api = api_client(lease, connections=api_connections(settings))
    clock = bounded_clock()
    sending = threading.Event()  # the approval senders' stop
    publisher, callback = start_approvals(api, settings, clock=clock, me=me, stop=sending)
    elector, executions, history = _campaign(
        api, settings, lease_name=settings.leader_election.lease_name, me=me, clock=clock, approvals=callback,
        console_writes=console_writes,
    )
    log.info("%s campaigning for lease %s/%s", me, settings.namespace, settings.leader_election.lease_name)
    shards = start_trigger_shards(settings, lease, me=me)
    if not wait_until_leader(elector, stopping):
        log.info("%s stopping (SIGTERM) as a standby", me)
        stand_down(elector, senders=sending, shards=shards)
        return 0
    metrics.IS_LEADER.set(1)
    stop = threading.Event()
    parts = Parts(api=api, settings=settings, me=me, clock=clock, executions=executions, history=history,
                   events=EventRecorder(api, instance=me, clock=clock, background=True))  # fmt: skip
    leader = build_leader(parts, publisher=publisher, stop=stop)
    lead_until_stopped(
        stopping, me=me, stop=stop, threads=start_threads(leader.threads), elector=elector, senders=sending,
        shards=shards, flush=leader.flush, wake=leader.wake,
    )  # fmt: skip
    return 0


def run_watchdog(settings: Settings) -> int:
    """The watchdog alone, as its own Deployment: it shares no process with the trigger. It runs
    until SIGTERM, then releases its Lease."""
    stopping = stop_on_sigterm()
    me = identity()
    api = api_client(lease_config(settings, lease_name=settings.watchdog.lease_name, me=me))
    clock = bounded_clock()
    elector, executions, _ = _campaign(api, settings, lease_name=settings.watchdog.lease_name, me=me, clock=clock)
    log.info("%s: watchdog campaigning for lease %s/%s", me, settings.namespace, settings.watchdog.lease_name)
    if not wait_until_leader(elector, stopping):
        elector.release()
        return 0
    store = bucket_store(api, settings)
    events = EventRecorder(api, instance=me, clock=clock, background=True)
    watchdog = build_watchdog(
        api, settings, executions=executions, events=events, clock=clock, store=store, gauges=metrics.WatchdogGauges
    )
    watch(watchdog, settings, stopping, volume=queue_watchdog(settings, clock))
    elector.release()
    return 0


def main(settings: Settings, *, watchdog_only: bool = False, console_writes: ConsoleWrites | None = None) -> int:
    logs.configure(level=settings.logging.level, format=settings.logging.format)
    heap.limit_arenas()  # before the threads start: each would otherwise get a heap of its own to fragment
    return run_watchdog(settings) if watchdog_only else run(settings, console_writes=console_writes)

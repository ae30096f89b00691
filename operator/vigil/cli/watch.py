"""Verbs for what did not happen: `audit` (with `--repair`) and `report suspended`.

    kubectl vigil audit [--repair] [--operator-namespace vigil-system]
    kubectl vigil report suspended [-n NS | -A]

`audit` runs the watchdog's own rules (`vigil.core.watchdog`) from the CLI on
the cluster's current state — the same verdicts the operator writes as
conditions — and prints every finding that is not healthy; `--repair`
re-enters each broken chain's head so the catch-up policy decides its gap.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from vigil.cli.cluster import Cluster, add_namespace_options
from vigil.cli.tables import age, render_table
from vigil.core.ports import Clock
from vigil.kube.buckets import KubeBucketStore
from vigil.kube.events import EventRecorder
from vigil.kube.watchdog import Watchdog
from vigil.kube.watchfacts import FactGatherer

DEFAULT_OPERATOR_NAMESPACE = "vigil-system"
SUSPENDED_MAX_AGE = timedelta(days=7)


class _Now:
    def now(self) -> datetime:
        return datetime.now(UTC)


def _watchdog(
    cluster: Cluster, operator_namespace: str, *, repair: bool, clock: Clock, grace: timedelta
) -> Watchdog:
    return Watchdog(
        cluster.api,
        gatherer=FactGatherer(cluster.api, operator_namespace=operator_namespace, executions=cluster.executions),
        events=EventRecorder(cluster.api, instance="kubectl-vigil"),
        clock=clock,
        suspended_max_age=SUSPENDED_MAX_AGE,
        chain_grace=grace,
        store=KubeBucketStore(cluster.api, namespace=operator_namespace, shards=4, max_per_bucket=2000),
        repair=repair,
    )


def cmd_audit(args: argparse.Namespace) -> int:
    cluster = Cluster()
    clock = _Now()
    grace = timedelta(seconds=args.grace_seconds)
    watchdog = _watchdog(cluster, args.operator_namespace, repair=args.repair, clock=clock, grace=grace)
    assessed = watchdog.assess()
    rows: list[list[Any]] = []
    for item in assessed:
        for finding in item.report.findings:
            if finding.applicable and finding.status:
                rows.append([item.facts.namespace, item.facts.name, str(finding.kind), str(finding.reason), finding.message])
        for dead in item.report.dead_letters:
            rows.append([item.facts.namespace, item.facts.name, "DeadLetter", dead.execution_id, f"dead for {dead.age_seconds:.0f}s"])
    if rows:
        print(render_table(["NAMESPACE", "JOB", "FINDING", "REASON", "DETAIL"], rows))
    print(f"{len(assessed)} jobs checked, {len(rows)} findings")
    if args.repair:
        repaired = sum(
            watchdog.repair(item.job, clock.now()) for item in assessed if item.report.chain.repair_needed
        )
        print(f"repaired {repaired} broken schedule chains")
    return 1 if rows and not args.repair else 0


def cmd_report_suspended(args: argparse.Namespace) -> int:
    cluster = Cluster()
    now = datetime.now(UTC)
    namespace = None if args.all_namespaces else cluster.namespace(args.namespace)
    if namespace is None:
        jobs = cluster.custom.list_cluster_custom_object("vigil.dev", "v1alpha1", "scheduledjobs")["items"]
    else:
        jobs = cluster.custom.list_namespaced_custom_object("vigil.dev", "v1alpha1", namespace, "scheduledjobs")["items"]
    rows: list[list[Any]] = []
    for job in jobs:
        spec = job.get("spec") or {}
        if not spec.get("suspend"):
            continue
        condition: dict[str, Any] = next(
            (c for c in (job.get("status") or {}).get("conditions") or [] if c.get("type") == "Suspended"), {}
        )
        since = condition.get("lastTransitionTime")
        since_time = datetime.fromisoformat(since.replace("Z", "+00:00")) if since else None
        rows.append([
            job["metadata"]["namespace"], job["metadata"]["name"], spec.get("suspendedBy") or "(nobody)",
            age(since_time, now) if since_time else "?", spec.get("suspendReason") or "(no reason)",
        ])  # fmt: skip
    print(render_table(["NAMESPACE", "JOB", "OWNER", "SUSPENDED FOR", "REASON"], rows) if rows else "no suspended jobs")
    return 0


def cmd_watchdog(args: argparse.Namespace) -> int:
    from vigil.runtime import main as run
    from vigil.settings import load_settings

    return run(load_settings(args.config), watchdog_only=True)


def add_parsers(sub: Any) -> None:
    audit = sub.add_parser("audit", help="check every job: overdue, broken chains, stale output, dead letters")
    audit.add_argument("--repair", action="store_true", help="re-enter the head of every broken schedule chain")
    audit.add_argument("--operator-namespace", default=DEFAULT_OPERATOR_NAMESPACE, help="where the buckets live")
    audit.add_argument(
        "--grace-seconds", type=float, default=120.0, help="how late a chain head may be before it counts as broken"
    )
    audit.set_defaults(func=cmd_audit)

    report = sub.add_parser("report", help="reports; `report suspended` lists suspended jobs")
    report.add_argument("what", choices=["suspended"])
    add_namespace_options(report, listing=True)
    report.set_defaults(func=cmd_report_suspended)

    watchdog = sub.add_parser("watchdog", help="run the watchdog alone (its own Deployment)")
    watchdog.add_argument("--config", type=Path, help="the operator's config.yaml")
    watchdog.set_defaults(func=cmd_watchdog)

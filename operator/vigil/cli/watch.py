"""Verbs for what did not happen: `audit` (with `--repair`) and `report suspended`.

    kubectl vigil audit [--repair] [--config FILE] [--operator-namespace NS] [--grace-seconds S]
    kubectl vigil report suspended [-n NS | -A]

`audit` runs the watchdog's own rules (`vigil.core.watchdog`) from the CLI on
the cluster's current state — the same verdicts the operator writes as
conditions, LaunchFailing among them, with late chain heads judged by the
trigger's published progress — and prints every finding that is not healthy,
then how many late heads were only behind; `--repair` re-enters each broken
chain's head so the catch-up policy decides its gap.
The watchdog and its bucket store are built by the operator's own factory
(`vigil.kube.wiring`) from the operator's settings (`--config`, else the
defaults), so the audit reads the same shards with the same limits.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vigil.cli.cluster import Cluster, add_namespace_options
from vigil.cli.output import add_output_option, emit, table_data
from vigil.cli.tables import age, render_table
from vigil.core.conditions import ConditionType
from vigil.kube.controllers.watchdog import Watchdog
from vigil.kube.kits.events import EventRecorder
from vigil.kube.wiring import SystemClock, bucket_store, build_watchdog
from vigil.model import GROUP, VERSION
from vigil.model.names import SCHEDULED_JOBS
from vigil.settings import Settings, load_settings


def audit_settings(args: argparse.Namespace) -> Settings:
    """The operator's settings (its config file, else the defaults the chart also ships), with
    what the flags override: where the buckets live, the chain grace, whether to repair."""
    settings = load_settings(args.config)
    audit = settings.audit.model_copy(update={"repair": args.repair})
    if args.grace_seconds is not None:
        audit = audit.model_copy(update={"chain_grace_seconds": args.grace_seconds})
    namespace = args.operator_namespace or settings.namespace
    return settings.model_copy(update={"audit": audit, "namespace": namespace})


def _watchdog(cluster: Cluster, settings: Settings, *, clock: SystemClock) -> Watchdog:
    return build_watchdog(
        cluster.api,
        settings,
        executions=cluster.executions,
        events=EventRecorder(cluster.api, instance="kubectl-vigil"),
        clock=clock,
        store=bucket_store(cluster.api, settings),
    )


def cmd_audit(args: argparse.Namespace) -> int:
    settings = audit_settings(args)
    cluster = Cluster()
    clock = SystemClock()
    watchdog = _watchdog(cluster, settings, clock=clock)
    assessed = watchdog.assess()
    rows: list[list[Any]] = []
    for item in assessed:
        for finding in item.report.findings:
            if finding.applicable and finding.status:
                rows.append([item.facts.namespace, item.facts.name, str(finding.kind), str(finding.reason), finding.message])
        for dead in item.report.dead_letters:
            rows.append([item.facts.namespace, item.facts.name, "DeadLetter", dead.execution_id, f"dead for {dead.age_seconds:.0f}s"])
    headers = ["NAMESPACE", "JOB", "FINDING", "REASON", "DETAIL"]
    lines = [render_table(headers, rows)] if rows else []
    lines += [f"{len(assessed)} jobs checked, {len(rows)} findings", _progress_line(assessed)]
    repaired: int | None = None
    if args.repair:
        repaired = sum(
            watchdog.repair(item.job, clock.now()) for item in assessed if item.report.chain.repair_needed
        )
        lines.append(f"repaired {repaired} broken schedule chains")
    data = {"checked": len(assessed), "findings": table_data(headers, rows), "repairedChains": repaired}
    emit(args, data, "\n".join(lines))
    return 1 if rows and not args.repair else 0


def _progress_line(assessed: list[Any]) -> str:
    """How the trigger's progress judged the late chain heads (behind is not broken)."""
    reasons = [str(item.report.chain.reason) for item in assessed]
    behind, retrying = reasons.count("TriggerBehind"), reasons.count("LaunchRetrying")
    if not behind and not retrying:
        return "trigger: no late chain head waits on it"
    return (
        f"trigger: {behind} late chain heads not reached yet (behind, not broken), "
        f"{retrying} waiting for a launch retry (see LaunchFailing)"
    )


def cmd_report_suspended(args: argparse.Namespace) -> int:
    cluster = Cluster()
    now = datetime.now(UTC)
    namespace = None if args.all_namespaces else cluster.namespace(args.namespace)
    if namespace is None:
        jobs = cluster.custom.list_cluster_custom_object(GROUP, VERSION, SCHEDULED_JOBS)["items"]
    else:
        jobs = cluster.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, SCHEDULED_JOBS)["items"]
    rows: list[list[Any]] = []
    for job in jobs:
        spec = job.get("spec") or {}
        if not spec.get("suspend"):
            continue
        condition: dict[str, Any] = next(
            (c for c in (job.get("status") or {}).get("conditions") or [] if c.get("type") == ConditionType.SUSPENDED), {}
        )
        since = condition.get("lastTransitionTime")
        since_time = datetime.fromisoformat(since.replace("Z", "+00:00")) if since else None
        rows.append([
            job["metadata"]["namespace"], job["metadata"]["name"], spec.get("suspendedBy") or "(nobody)",
            age(since_time, now) if since_time else "?", spec.get("suspendReason") or "(no reason)",
        ])  # fmt: skip
    headers = ["NAMESPACE", "JOB", "OWNER", "SUSPENDED FOR", "REASON"]
    return emit(args, {"suspended": table_data(headers, rows)}, render_table(headers, rows) if rows else "no suspended jobs")


def add_parsers(sub: Any) -> None:
    audit = sub.add_parser("audit", help="check every job: overdue, broken chains, stale output, dead letters")
    audit.add_argument("--repair", action="store_true", help="re-enter the head of every broken schedule chain")
    audit.add_argument("--config", type=Path, help="the operator's config.yaml: its shards, grace and limits")
    audit.add_argument("--operator-namespace", help="where the buckets live (default: the config's namespace)")
    audit.add_argument(
        "--grace-seconds", type=float, help="how late a chain head may be before it counts as broken (default: the config's)"
    )
    add_output_option(audit)
    audit.set_defaults(func=cmd_audit)

    report = sub.add_parser("report", help="reports; `report suspended` lists suspended jobs")
    report.add_argument("what", choices=["suspended"])
    add_namespace_options(report, listing=True)
    add_output_option(report)
    report.set_defaults(func=cmd_report_suspended)

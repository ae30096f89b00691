"""Every Prometheus metric Vigil exports, defined in one place with typed helpers.

Names carry the `vigil_` prefix and the unit suffixes Prometheus expects
(`_total`, `_seconds`); each help text names its labels. The core never imports
this module: it returns reports (a trigger pass's `TickReport`), and the
composition root hands them to the recording helpers here.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from vigil.core.trigger import TickReport

REGISTRY = CollectorRegistry(auto_describe=True)

LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)

TRIGGER_FIRED = Counter(
    "vigil_trigger_fired_total", "Executions created by the trigger (no labels).", registry=REGISTRY
)
TRIGGER_LAG = Histogram(
    "vigil_trigger_lag_seconds",
    "Seconds from an occurrence's fire time to its execution's creation (no labels).",
    buckets=LAG_BUCKETS,
    registry=REGISTRY,
)
TRIGGER_TICK = Histogram(
    "vigil_trigger_tick_seconds", "Duration of one trigger pass in seconds (no labels).", registry=REGISTRY
)
TRIGGER_ERRORS = Counter(
    "vigil_trigger_errors_total", "Bucket entries whose handling failed and will be retried.", registry=REGISTRY
)
OCCURRENCES = Counter(
    "vigil_occurrences_total",
    "Occurrences by recorded outcome (label outcome: Fired, Missed, Superseded, Skipped, Suspended).",
    ["outcome"],
    registry=REGISTRY,
)
IS_LEADER = Gauge(
    "vigil_leader", "1 while this replica holds the trigger Lease, else 0 (no labels).", registry=REGISTRY
)
LEADER_TRANSITIONS = Counter(
    "vigil_leader_transitions_total", "Changes of the Lease holder seen by this replica.", registry=REGISTRY
)
OLDEST_READY_AGE = Gauge(
    "vigil_oldest_ready_execution_age_seconds",
    "Age in seconds of the oldest execution waiting to start (label priority: high, normal, low).",
    ["priority"],
    registry=REGISTRY,
)


def record_tick(report: TickReport, *, duration_seconds: float) -> None:
    TRIGGER_TICK.observe(duration_seconds)
    TRIGGER_FIRED.inc(report.created)
    TRIGGER_ERRORS.inc(report.errors)
    for lag in report.lags:
        TRIGGER_LAG.observe(max(0.0, lag))
    for outcome, count in report.outcomes.items():
        OCCURRENCES.labels(outcome=outcome).inc(count)

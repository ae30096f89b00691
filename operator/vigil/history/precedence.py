"""Which of two records of the same attempt wins, whatever order they arrive in.

An attempt's life only moves forward — ready, then running, then one terminal
state (succeeded, failed, cancelled, dead) — but its records can arrive in any
order: a `running` held through an outage may reach the database after the
`succeeded` that followed it. So a record in a later stage always wins; between
two records of the same stage the one updated later wins; and writing the same
record again changes nothing. `winners` applies this within one batch and
`SqlHistory`'s upsert applies it in SQL (built from `STAGES` below), so both
keep the same record whatever the arrival order.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from vigil.core.history import AttemptRecord, AttemptState

AttemptKey = tuple[str, int]

STAGES: dict[AttemptState, int] = {
    AttemptState.READY: 0,
    AttemptState.RUNNING: 1,
    AttemptState.SUCCEEDED: 2,
    AttemptState.FAILED: 2,
    AttemptState.CANCELLED: 2,
    AttemptState.DEAD: 2,
}
TERMINAL_STAGE = 2


def key_of(record: AttemptRecord) -> AttemptKey:
    """The idempotency key: one row per (execution id, attempt)."""
    return (record.execution_id, record.attempt)


def stage_of(state: AttemptState) -> int:
    return STAGES[state]


def updated_at_of(record: AttemptRecord) -> datetime:
    """When the record last changed: `updated_at`, else the latest time it carries.

    Derived from the record alone (never from a clock), so the same record always
    compares the same way, in memory and in the database.
    """
    return record.updated_at or record.finished_at or record.started_at or record.scheduled_for


def supersedes(new: AttemptRecord, old: AttemptRecord) -> bool:
    """True when `new` should replace `old` (same key): a later stage, or as late within one."""
    return (stage_of(new.state), updated_at_of(new)) >= (stage_of(old.state), updated_at_of(old))


def winners(records: Iterable[AttemptRecord]) -> list[AttemptRecord]:
    """One record per key — the one that supersedes the others — in first-seen key order."""
    kept: dict[AttemptKey, AttemptRecord] = {}
    for record in records:
        key = key_of(record)
        current = kept.get(key)
        if current is None or supersedes(record, current):
            kept[key] = record
    return list(kept.values())

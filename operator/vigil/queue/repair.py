"""Re-entering the broken chains of the volume tier (`audit.repair`), as the declarative tier does.

A catalogued recurring job whose pending bucket row is gone (deleted by hand, a
restore that lost it, a bug) never fires again: the integrity audit reports it
(`integrity_broken_chains`, QueueChainBroken). With `audit.repair` the watchdog
then gives it its head back: the first occurrence the job has not handled, planned
by the core (`vigil.core.queuewatch.chain_restart`: the job's cron, timezone and
jitter, through the trigger's own view of a job row) and inserted with its own
fire time. When that time has passed, the trigger takes the row at once and the
job's catch-up policy fires the occurrences of the gap or records them Missed, as
after any outage: nothing is skipped in silence.

Two statements for all the broken jobs a pass found: `repair_candidates` reads
their schedules, `repair_chains` inserts the heads. The insert is conditional
(the job still enabled and still without an unfired row when it runs) and keyed
like every bucket row, ON CONFLICT DO NOTHING: a trigger that moved the chain on,
or another replica's repair of the same chain, leaves nothing to insert, so the
repair never doubles a chain and never fires anything itself.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from vigil.core.buckets import minute_of
from vigil.core.queuewatch import ChainRestart, chain_restart
from vigil.queue.queries import QUERIES
from vigil.queue.trigger import row_view

log = logging.getLogger(__name__)


def repair_chains(connection: psycopg.Connection[Any], job_ids: Sequence[str], *, now: datetime) -> list[ChainRestart]:
    """Re-enter the chains of `job_ids` (jobs the audit found broken); the heads inserted."""
    if not job_ids:
        return []
    cursor = connection.cursor(row_factory=dict_row)
    rows = cursor.execute(QUERIES["repair_candidates"], {"job_ids": list(job_ids)}).fetchall()
    queues = {row["job_id"]: row["queue"] for row in rows}
    planned = {restart.job_id: restart for restart in (_plan(row) for row in rows) if restart is not None}
    if not planned:
        return []
    heads = list(planned.values())
    params = {
        "job_ids": [h.job_id for h in heads],
        "nominals": [h.nominal for h in heads],
        "fire_ats": [h.fire_at for h in heads],
        "minutes": [minute_of(h.fire_at) for h in heads],
    }
    inserted = connection.execute(QUERIES["repair_chains"], params).fetchall()
    repaired = [planned[job_id] for job_id, _, _ in inserted]
    for head in repaired:
        late = "due at once: the catch-up policy decides the gap" if head.fire_at <= now else "due on time"
        log.warning(
            "repaired the schedule chain of %s job %s: re-entered at %s (%s)",
            queues[head.job_id], head.job_id, head.nominal.isoformat(), late,
        )  # fmt: skip
    return repaired


def _plan(row: dict[str, Any]) -> ChainRestart | None:
    try:
        view = row_view(row)
    except ValueError:  # a zone tzdata no longer has: the trigger would skip it as invalid too
        log.warning("cannot repair the schedule chain of job %s: its schedule no longer parses", row["job_id"])
        return None
    return chain_restart(
        view, next_run=row["next_run"], last_handled=row["last_handled"], enabled_since=row["created_at"]
    )

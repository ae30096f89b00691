"""A history read from what the queue store itself holds, so a scenario on real PostgreSQL can be
checked after the fact (tests/faults/checker.py).

Fired bucket rows do not stay (partition upkeep drops a fully fired hour) and a row is marked at
most once by its UNIQUE (job_id, nominal, minute): the row alone cannot show a second marking.
So `install_ledger` adds an audit trigger, as tests/queue/marks.py does, that copies every mark
the trigger sets — an unfired row updated to fired, or a catch-up record inserted already marked —
into `public.fault_marks` in the marking transaction, with the pass's own `fired_at` (the
scenario's injected clock, not the server's). A rolled-back pass leaves no mark there.

`record_from_store` then appends to a history:

* each mark as `Fired` (with its execution id) or `Missed` (Missed, Skipped and Failed: ended
  without firing, its reason kept), at its `fired_at`; without the ledger, the bucket rows still
  there;
* each execution the store holds as `Held` (its state), at `at`;
* with `attempts=True`, each attempt row as `Attempt` events: leased (at its start), then
  acknowledged (succeeded), failed, or expired (lease_expired); for a scenario whose own history
  has no attempt events (a scenario that records its attempts itself should leave this off).
"""

from __future__ import annotations

from datetime import datetime

import psycopg

from tests.faults.history import Attempt, AttemptPhase, Fired, Held, History, Missed

_LEDGER = """
CREATE TABLE public.fault_marks (job_id text, nominal timestamptz, outcome text, execution_id text,
                                 fired_at timestamptz, reason text);
CREATE FUNCTION public.fault_mark() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.fault_marks (job_id, nominal, outcome, execution_id, fired_at, reason)
  VALUES (NEW.job_id, NEW.nominal, NEW.outcome, NEW.execution_id, NEW.fired_at, NEW.reason);
  RETURN NULL;
END $$;
CREATE TRIGGER fault_mark AFTER UPDATE ON vigil_queue.schedule_buckets FOR EACH ROW
  WHEN (OLD.fired_at IS NULL AND NEW.fired_at IS NOT NULL) EXECUTE FUNCTION public.fault_mark();
CREATE TRIGGER fault_marked_insert AFTER INSERT ON vigil_queue.schedule_buckets FOR EACH ROW
  WHEN (NEW.fired_at IS NOT NULL) EXECUTE FUNCTION public.fault_mark();
"""

_ATTEMPT_PHASES = {
    "succeeded": AttemptPhase.ACKNOWLEDGED,
    "failed": AttemptPhase.FAILED,
    "lease_expired": AttemptPhase.EXPIRED,
}


def install_ledger(dsn: str) -> None:
    """Keep every mark in public.fault_marks (see the module docstring); once per database."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(_LEDGER)


def record_from_store(history: History, dsn: str, *, at: datetime, attempts: bool = False) -> None:
    """Append to `history` what the store at `dsn` holds (see the module docstring)."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        ledger = connection.execute("SELECT to_regclass('public.fault_marks') IS NOT NULL").fetchone()
        source = "public.fault_marks" if ledger and ledger[0] else "vigil_queue.schedule_buckets"
        marks = connection.execute(
            f"SELECT job_id, nominal, outcome, execution_id, fired_at, reason FROM {source} "
            "WHERE fired_at IS NOT NULL"
        ).fetchall()
        held = connection.execute("SELECT execution_id, state FROM vigil_queue.executions").fetchall()
        rows = (
            connection.execute(
                "SELECT execution_id, attempt, worker, outcome, started_at, finished_at FROM vigil_queue.attempts"
            ).fetchall()
            if attempts
            else []
        )
    for job_id, nominal, outcome, execution_id, fired_at, reason in marks:
        if outcome == "Fired":
            history.add(Fired(fired_at, str(job_id), nominal, str(execution_id), by="store"))
        else:
            history.add(Missed(fired_at, str(job_id), nominal, by="store", reason=f"{outcome}: {reason or ''}"))
    history.extend(Held(at, str(execution_id), str(state)) for execution_id, state in held)
    for execution_id, attempt, worker, outcome, started_at, finished_at in rows:
        history.add(Attempt(started_at or finished_at, str(execution_id), int(attempt), AttemptPhase.LEASED, str(worker)))
        phase = _ATTEMPT_PHASES.get(str(outcome))
        if phase is not None:
            history.add(Attempt(finished_at, str(execution_id), int(attempt), phase, str(worker)))

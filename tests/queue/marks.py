"""A ledger of every mark the trigger sets, kept by the test database itself (an audit trigger).

Fired bucket rows do not stay: partition upkeep drops a past hour's rows once all are
marked (docs/queue.md, "Buckets and partitions"). To count how often each occurrence
was marked, `record_marks` installs a row trigger on `vigil_queue.schedule_buckets`
that copies every mark — an unfired row updated to fired, or a catch-up record
inserted already marked — into `public.marks`, in the marking transaction: a rolled
back pass leaves no mark there either.
"""

from __future__ import annotations

from typing import Any

import psycopg

_SETUP = """
CREATE TABLE public.marks (job_id text, nominal timestamptz, outcome text, execution_id text,
                           at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION public.record_mark() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.marks (job_id, nominal, outcome, execution_id)
  VALUES (NEW.job_id, NEW.nominal, NEW.outcome, NEW.execution_id);
  RETURN NULL;
END $$;
CREATE TRIGGER record_mark AFTER UPDATE ON vigil_queue.schedule_buckets FOR EACH ROW
  WHEN (OLD.fired_at IS NULL AND NEW.fired_at IS NOT NULL) EXECUTE FUNCTION public.record_mark();
CREATE TRIGGER record_marked_insert AFTER INSERT ON vigil_queue.schedule_buckets FOR EACH ROW
  WHEN (NEW.fired_at IS NOT NULL) EXECUTE FUNCTION public.record_mark();
"""


def record_marks(dsn: str) -> None:
    """Install the ledger in a migrated queue database (before any job is added)."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(_SETUP)


def marks(dsn: str) -> list[tuple[Any, ...]]:
    """(job id, nominal, outcome, execution id, times marked), one row per occurrence ever marked."""
    with psycopg.connect(dsn) as connection:
        return connection.execute(
            "SELECT job_id, nominal, min(outcome), min(execution_id), count(*) FROM public.marks"
            " GROUP BY job_id, nominal"
        ).fetchall()

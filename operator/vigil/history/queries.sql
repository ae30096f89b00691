-- Raw SQL the history adapter runs besides its SQLAlchemy Core statements (store.py):
-- PostgreSQL partition upkeep and DDL locking. One statement per named block.
--
-- DDL takes no bind parameters, so {partition}, {start} and {end} are formatted in by
-- store.py — always from a date it computed (attempts_YYYYMMDD, ISO timestamps), never
-- from a record's text.

-- name: lock_ddl
-- Serialises schema changes (migrations, creating and dropping partitions) between
-- operator replicas; released when the transaction ends.
SELECT pg_advisory_xact_lock(hashtext('vigil.history.ddl'));

-- name: create_partition
-- One UTC day of attempts. Idempotent: a day that already has its partition is left alone.
CREATE TABLE IF NOT EXISTS {partition} PARTITION OF attempts
    FOR VALUES FROM ('{start}') TO ('{end}');

-- name: list_partitions
SELECT child.relname
FROM pg_inherits
JOIN pg_class AS child ON child.oid = pg_inherits.inhrelid
WHERE pg_inherits.inhparent = 'attempts'::regclass
ORDER BY child.relname;

-- name: drop_partition
-- Retention: a whole day at once, no row-by-row DELETE and no vacuum debt.
DROP TABLE IF EXISTS {partition};

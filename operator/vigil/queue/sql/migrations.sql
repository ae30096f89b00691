-- Migrations' own statement (vigil/queue/migrating.py).
-- Named blocks (`-- name: NAME`) with psycopg's %(name)s parameters; every time is a parameter.

-- name: lock_ddl
-- Two processes migrating at once wait for each other instead of racing on CREATE TABLE.
SELECT pg_advisory_xact_lock(hashtext('vigil_queue_migrations'));

"""The volume tier's store: executions in PostgreSQL, leased in batches by pulling workers.

`store.QueueStore` submits and inspects (synchronous, for programs and tests);
`store.WorkerStore` is what a worker does on its own connection (lease,
heartbeat, settle, expire, once). Each part of the store is a module of its own, by who uses it:
submitstore (submitters and the HTTP API), declarestore (the TaskQueue controller), upkeepstore
(partitions, retention, quotas), workerstore (workers), on storebase; store composes them. The SQL is in sql/, one file of named blocks per table or
concern (vigil.queue.queries loads them); the schema is made by the Alembic chain of migrations/,
and sql/schema.sql is what that chain produces, kept for reading and checked by a test. PostgreSQL only:
leasing needs FOR UPDATE SKIP LOCKED, which SQLite does not have.
"""

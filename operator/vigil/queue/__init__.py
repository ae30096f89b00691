"""The volume tier's store: executions in PostgreSQL, leased in batches by pulling workers.

`store.QueueStore` submits and inspects (synchronous, for programs and tests);
`store.WorkerStore` is what a worker does on its own connection (lease,
heartbeat, settle, expire, once). The SQL is in queries.sql, and the schema in
the Alembic chain of migrations/ (its first revision is the whole schema, as SQL). PostgreSQL only:
leasing needs FOR UPDATE SKIP LOCKED, which SQLite does not have.
"""

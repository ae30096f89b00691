"""The volume tier's store: executions in PostgreSQL, leased in batches by pulling workers.

`store.QueueStore` submits and inspects (synchronous, for programs and tests);
`store.WorkerStore` is what a worker does on its own connection (lease,
heartbeat, settle, expire, once). The SQL is in queries.sql, the schema in
schema.sql, and the Alembic chain that builds it in migrations/. PostgreSQL only:
leasing needs FOR UPDATE SKIP LOCKED, which SQLite does not have.
"""

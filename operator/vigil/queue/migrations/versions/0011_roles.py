"""Workers hold a namespace's role, not the owner's: tenant_roles, lease tokens.

`tenant_roles` maps each namespace's login role (made by the operator, vigil.queue.roles) to its
namespace. The role has no privilege on any table: it may only call the workers' functions
(vigil.queue.functions), each of which asks `admit_caller` whether the session's role may use
the queue it names. The functions themselves are not made here: the store replaces them every
time it migrates, so they always run the statements of the version that migrated last.

`lease_token` is drawn for each lease; heartbeat, settle and once name it, so an acknowledgement
of a lease another attempt has taken since changes nothing. Leases held while this revision is
applied have none: their holders' acknowledgements find no match and the lease expires to the
next attempt, as after any worker's restart.

Revision ID: q0011roles
Revises: q0010bounded
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "q0011roles"
down_revision: str | None = "q0010bounded"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPGRADE = """
ALTER TABLE vigil_queue.executions ADD COLUMN lease_token uuid NULL;

CREATE TABLE vigil_queue.tenant_roles (
    role        text PRIMARY KEY,
    namespace   text NOT NULL UNIQUE CHECK (namespace <> '' AND namespace <> '*'),
    created_at  timestamptz NOT NULL DEFAULT now()
);
"""

DOWNGRADE = """
DO $drop$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
             WHERE n.nspname = 'vigil_queue' AND (left(p.proname, 7) = 'worker_' OR p.proname = 'admit_caller')
    LOOP
        EXECUTE 'DROP FUNCTION ' || f::text;
    END LOOP;
END
$drop$;
DROP TABLE vigil_queue.tenant_roles;
ALTER TABLE vigil_queue.executions DROP COLUMN lease_token;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)

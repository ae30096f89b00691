"""Which entries of a workflow's history go to the history database, and as what rows.

The engine (:mod:`vigil.kube.controllers.workflowhistory`) mirrors every entry it records to the history
database, and only mirrored entries may leave the status for the checkpoint
(:mod:`vigil.core.checkpoint`). The status holds the entries from seq ``base`` on (those before
are in the checkpoint) and counts in ``historyMirrored`` how many, from the first, the database
has. The rows to write are the entries past that count, each keyed on (workflow uid, seq), so a
row written twice stays one row; entry 0 carries the pinned definition, so a history the
database holds from its first entry can be folded once the Workflow is gone.

Pure: the engine does the writing, and remembers what it wrote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vigil.core.history import WorkflowEventRecord
from vigil.core.workflow import Record


def history_rows(
    entries: Sequence[Record],
    *,
    base: int,
    mirrored: int,
    meta: Mapping[str, Any],
    pinned: Mapping[str, Any],
) -> list[WorkflowEventRecord]:
    """The rows of the entries the database does not have yet.

    ``entries`` are the history from seq ``base`` on; ``mirrored`` entries from the first are in
    the database already (never fewer than ``base``: only mirrored entries leave the status).
    ``meta`` is the Workflow's metadata (namespace, name, uid); ``pinned`` its pinned definition.
    """
    start = max(mirrored, base)
    return [
        WorkflowEventRecord(
            namespace=meta["namespace"],
            workflow=meta["name"],
            workflow_uid=meta["uid"],
            seq=seq,
            event=str(record.event),
            step=record.step,
            attempt=record.attempt,
            at=record.at,
            data=record.to_data(),
            definition=pinned if seq == 0 else None,
        )
        for seq, record in enumerate(entries[start - base :], start=start)
    ]

"""A status write built from its model: what a merge patch changes, as the status model reads it.

Each kind's one status writer (a ScheduledJob's: `kube/stores/jobstatus.py`; an Execution's:
`kube/stores/executions.ExecutionStore.write`) has the fields its changes set, as a merge patch on the
status it read. Before it writes, it builds the status as it is and as it would be from the
kind's status model (`ScheduledJobStatus`, `ExecutionStatus`: the CRDs' status schemas are
generated from them, so the model reads a status as the API server stores it) and keeps only
the fields whose typed values differ: a change already on the object costs no write, and a time
written `+00:00` by one writer and `Z` by another is one time. The values sent are the patch's
own, so what is stored reads as it always did (the folds' second-precision times, an
Execution's milliseconds).

A field the model cannot read (a value past a bound the schema also sets) is not compared: the
changed fields go as they are, and the API server refuses them in its own words, as it did
before. A field whose JSON is unchanged is not read at all, so a write reads only what it
changes (reading a ledger of fifty entries as the model costs about a millisecond).

Only the write is typed: caches keep the objects as the watch delivered them (packed, for
finished Executions), and the models are built for the write and dropped with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from vigil.model.common import StatusModel


def merge_patched(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """`target` with the JSON merge patch `patch` applied (RFC 7386): a null removes its key, an
    object merges key by key, anything else replaces."""
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping):
            inner = out.get(key)
            out[key] = merge_patched(inner if isinstance(inner, Mapping) else {}, value)
        else:
            out[key] = value
    return out


def changed_fields(model: type[StatusModel], status: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of merge patch `patch` that change `status`, read as `model`'s fields; empty when
    nothing changes. A field whose JSON is unchanged is dropped unread; the others are read, before
    and after, as the model reads them (only they: a ledger of fifty entries is not read again
    for a change of NEXT RUN). A key the model does not know is kept (it cannot be compared);
    when the model cannot read a field, every changed field is kept (the API server judges)."""
    after = merge_patched(status, patch)
    differing = [key for key in patch if after.get(key) != status.get(key)]
    if not differing:
        return {}
    names = {info.alias or name: name for name, info in model.model_fields.items()}
    known = [key for key in differing if key in names]
    try:
        old = model.model_validate({key: status[key] for key in known if key in status})
        new = model.model_validate({key: after[key] for key in known if key in after})
    except ValidationError:
        return {key: patch[key] for key in differing}
    return {
        key: patch[key]
        for key in differing
        if key not in names or getattr(old, names[key]) != getattr(new, names[key])
    }

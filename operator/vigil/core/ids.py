"""Execution ids: one stable name per occurrence, derived from what the occurrence is.

Execution is at-least-once, so the job must deduplicate, and it can only do so
if every attempt of the same occurrence carries the same identifier. The id is
therefore a pure function of the occurrence — (job uid, nominal time) for a
scheduled job, (workflow uid, step id) for a workflow step — never a fresh
random value per attempt. Names of created objects derive from it, so a second
create of the same execution meets 409 AlreadyExists instead of a second pod.

Format: a prefix (``ex-`` or ``st-``) and the lowercase, unpadded base32 of the
first 10 bytes (80 bits) of SHA-256 over ``"{uid}|{key}"``, where the key of a
scheduled occurrence is its nominal time as RFC 3339 UTC to the second
(``2026-08-01T02:00:00Z``), and the key of a manual run (`kubectl vigil run`) is
``manual:`` and its request id, which no RFC 3339 time can equal. That is 19 characters of ``[a-z2-7-]`` starting with
a letter: a valid DNS-1123 label, with room for an attempt suffix in a pod name.
"""

from __future__ import annotations

import base64
import hashlib
import re
from datetime import datetime
from typing import NewType

from vigil.core.timeparse import format_rfc3339, require_aware

ExecutionId = NewType("ExecutionId", str)

EXECUTION_ID_PREFIX = "ex-"
STEP_EXECUTION_ID_PREFIX = "st-"
#: 80 bits: a collision is expected only after about 2**40 executions.
DIGEST_BYTES = 10
#: Separates the uid from the rest of the hashed key; uids (UUIDs) never contain it.
KEY_SEPARATOR = "|"
#: Kubernetes object names that must be DNS-1123 labels (pods among them) are at most 63 long.
DNS_LABEL_MAX_LENGTH = 63
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", re.ASCII)


def execution_id(job_uid: str, nominal: datetime) -> ExecutionId:
    """The id of the occurrence of job `job_uid` due at `nominal` (a whole second, any aware zone)."""
    nominal = require_aware(nominal, name="nominal")
    if nominal.microsecond:
        raise ValueError(f"nominal must be a whole second (ids are per second), got {nominal}")
    return _derive(EXECUTION_ID_PREFIX, job_uid, format_rfc3339(nominal))


#: Starts the key of a run asked for by hand, so it never equals an occurrence's nominal time.
MANUAL_KEY_PREFIX = "manual:"


def manual_execution_id(job_uid: str, request_id: str) -> ExecutionId:
    """The id of the run of job `job_uid` asked for by hand as `request_id`: the same request,
    repeated, is the same execution, and never one of the schedule's."""
    if not request_id:
        raise ValueError("request_id must not be empty")
    return _derive(EXECUTION_ID_PREFIX, job_uid, MANUAL_KEY_PREFIX + request_id)


def step_execution_id(workflow_uid: str, step_id: str) -> ExecutionId:
    """The id of step `step_id` of workflow `workflow_uid`, shared by all its attempts."""
    if not step_id:
        raise ValueError("step_id must not be empty")
    return _derive(STEP_EXECUTION_ID_PREFIX, workflow_uid, step_id)


def pod_name(execution: ExecutionId, attempt: int) -> str:
    """The name of the pod running `attempt` of an execution: ``{execution id}-{attempt}``."""
    if attempt < 0:
        raise ValueError(f"attempt must not be negative, got {attempt}")
    name = f"{execution}-{attempt}"
    if not is_dns_label(name):
        raise ValueError(f"pod name {name!r} is not a DNS-1123 label")
    return name


def is_dns_label(name: str) -> bool:
    """Whether `name` is a DNS-1123 label: lowercase alphanumerics and '-', at most 63 long."""
    return len(name) <= DNS_LABEL_MAX_LENGTH and DNS_LABEL.fullmatch(name) is not None


def one_off_execution_id(entropy: bytes) -> ExecutionId:
    """The id of a one-off submission, its own occurrence with nothing to derive from: DIGEST_BYTES
    of `entropy` (random bytes, the caller's) in the ids' format, as unguessable as a digest of a
    fresh uid and without hashing one."""
    if len(entropy) < DIGEST_BYTES:
        raise ValueError(f"entropy must be at least {DIGEST_BYTES} bytes, got {len(entropy)}")
    return _encoded(EXECUTION_ID_PREFIX, entropy[:DIGEST_BYTES])


def _derive(prefix: str, uid: str, key: str) -> ExecutionId:
    if not uid or KEY_SEPARATOR in uid:
        raise ValueError(f"uid must be non-empty and free of {KEY_SEPARATOR!r}, got {uid!r}")
    return _encoded(prefix, hashlib.sha256(f"{uid}{KEY_SEPARATOR}{key}".encode()).digest()[:DIGEST_BYTES])


def _encoded(prefix: str, digest: bytes) -> ExecutionId:
    return ExecutionId(prefix + base64.b32encode(digest).decode("ascii").rstrip("=").lower())

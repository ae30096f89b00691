"""Signed, expiring approval tokens: how an outside system decides an approval step.

A ticketing tool or a chat bot has no Kubernetes credentials, so it cannot append
to a Workflow's ``spec.requests``. Instead, when an approval step starts waiting,
the operator mints a token for it and publishes it; whoever holds the token may
approve or reject that one step by POSTing it to the operator's HTTP API. The
token itself is the authorization: the fold skips the approver-list check for a
decision recorded with ``via: token``.

Format — ``base64url(claims JSON) "." base64url(HMAC-SHA256(key, first part))``,
both parts unpadded. The claims are compact, key-sorted JSON::

    {"att": 1, "exp": 1795000000, "lvl": 0, "ns": "media", "step": "approve",
     "uid": "6f1c...", "v": 1, "wf": "publish-42"}

* ``ns``, ``wf``, ``uid`` name the workflow instance. The uid makes a token for
  a workflow that was deleted and re-created under the same name worthless.
* ``step`` and ``att`` (the attempt): a token decides one waiting period of one
  step. After ``kubectl vigil retry`` starts a new attempt, the old token is
  refused and a new one is published.
* ``lvl``: the escalation level when the token was minted. It is provenance,
  not authority: a token minted before an escalation still decides the step
  (escalation only *adds* approvers, so the people the first link went to may
  still decide), and the level is recorded with the decision as ``tokenLevel``.
* ``exp``: whole Unix seconds; the token is valid while ``now < exp``.

The signature covers the encoded claims exactly as sent and is compared in its
encoded form with :func:`hmac.compare_digest`, so no second spelling of a token
(other padding bits, stray characters) verifies. Tokens are deterministic: the
same key and claims give the same token, which makes publishing idempotent.

:func:`waiting_approvals` says which tokens a workflow's folded state calls
for, and until when each is valid. Pure: no clock (``now`` is passed in), no
randomness, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import json
import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from vigil.core.workflow import (
    Definition,
    StepKind,
    StepPhase,
    TimeoutAction,
    WorkflowPhase,
    WorkflowState,
)

#: The claims layout this module mints; anything else is refused as malformed.
TOKEN_VERSION = 1
#: Shortest signing key accepted (HMAC-SHA256's own output length).
MIN_KEY_BYTES = 32
#: Longest token accepted: far above any real one (names are at most 253 characters).
MAX_TOKEN_LENGTH = 4096

_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$")
_CLAIM_KEYS = frozenset({"v", "ns", "wf", "uid", "step", "att", "lvl", "exp"})


class Problem(StrEnum):
    """Why a token was refused (the HTTP API returns it in the body of its 403)."""

    MALFORMED = "Malformed"
    BAD_SIGNATURE = "BadSignature"
    EXPIRED = "Expired"


class InvalidToken(ValueError):
    """A token that must not be acted on; ``problem`` says why."""

    def __init__(self, problem: Problem, message: str) -> None:
        super().__init__(message)
        self.problem = problem


@dataclasses.dataclass(frozen=True)
class Claims:
    """What a verified token says: which step of which workflow instance, and until when."""

    namespace: str
    workflow: str
    uid: str
    step: str
    attempt: int
    level: int
    expires: datetime


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signature(key: bytes, payload: str) -> str:
    return _b64encode(hmac.new(key, payload.encode("ascii"), hashlib.sha256).digest())


def _check_key(key: bytes) -> None:
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"the signing key has {len(key)} bytes; at least {MIN_KEY_BYTES} needed")


def mint(
    key: bytes,
    *,
    namespace: str,
    workflow: str,
    uid: str,
    step: str,
    level: int,
    expires: datetime,
    attempt: int = 1,
) -> str:
    """A token for one waiting approval step, valid until ``expires`` (rounded down to a second)."""
    _check_key(key)
    if expires.tzinfo is None:
        raise ValueError("expires must be timezone-aware")
    claims = {
        "v": TOKEN_VERSION,
        "ns": namespace,
        "wf": workflow,
        "uid": uid,
        "step": step,
        "att": attempt,
        "lvl": level,
        "exp": int(expires.timestamp() // 1),
    }
    payload = _b64encode(json.dumps(claims, sort_keys=True, separators=(",", ":")).encode())
    return f"{payload}.{_signature(key, payload)}"


def verify(key: bytes, token: str, *, now: datetime) -> Claims:
    """The claims of a token signed with ``key`` and not expired at ``now``; else InvalidToken."""
    _check_key(key)
    if len(token) > MAX_TOKEN_LENGTH or not _TOKEN_RE.match(token):
        raise InvalidToken(Problem.MALFORMED, "not a token: expected <claims>.<signature> in base64url")
    payload, signature = token.split(".")
    if not hmac.compare_digest(_signature(key, payload), signature):
        raise InvalidToken(Problem.BAD_SIGNATURE, "the token's signature does not match")
    claims = _claims(payload)
    if now >= claims.expires:
        raise InvalidToken(
            Problem.EXPIRED, f"the token expired at {claims.expires.isoformat()}"
        )
    return claims


def _claims(payload: str) -> Claims:
    """Claims from a payload whose signature is already checked (so we minted it, or the key leaked)."""
    try:
        data: Any = json.loads(_b64decode(payload))
    except (binascii.Error, ValueError) as error:
        raise InvalidToken(Problem.MALFORMED, f"the token's claims are not JSON: {error}") from None
    if not isinstance(data, dict) or set(data) != _CLAIM_KEYS or data["v"] != TOKEN_VERSION:
        raise InvalidToken(Problem.MALFORMED, f"the token's claims are not version {TOKEN_VERSION}")
    texts = [data[k] for k in ("ns", "wf", "uid", "step")]
    numbers = [data[k] for k in ("att", "lvl", "exp")]
    if not all(isinstance(t, str) for t in texts) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in numbers
    ):
        raise InvalidToken(Problem.MALFORMED, "the token's claims have the wrong types")
    try:
        expires = datetime.fromtimestamp(data["exp"], tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise InvalidToken(Problem.MALFORMED, "the token's expiry is out of range") from None
    return Claims(
        namespace=data["ns"],
        workflow=data["wf"],
        uid=data["uid"],
        step=data["step"],
        attempt=data["att"],
        level=data["lvl"],
        expires=expires,
    )


# --- which tokens a workflow's state calls for ----------------------------------------------


@dataclasses.dataclass(frozen=True)
class WaitingApproval:
    """An approval step waiting for a decision: the token it needs, and until when."""

    step: str
    attempt: int
    level: int
    expires: datetime
    #: True when ``expires`` is the default lifetime's end, not a deadline: when it comes and
    #: the step still waits, the next period's token replaces this one.
    renews: bool


def waiting_approvals(
    definition: Definition, state: WorkflowState, *, now: datetime, default_lifetime: timedelta
) -> list[WaitingApproval]:
    """Every approval step of a running workflow that waits for a decision now.

    A step with a timeout gets a token until it can last be decided: its current deadline,
    plus the time of the escalation levels still to come when it escalates on timeout. A
    step without a timeout waits indefinitely, so its token lasts ``default_lifetime`` from
    when its attempt started, then the next period's token follows, and so on.
    """
    if state.phase is not WorkflowPhase.RUNNING or default_lifetime <= timedelta(0):
        return []
    found: list[WaitingApproval] = []
    for step_def in definition.steps:
        step = state.steps[step_def.id]
        started = step.attempt_started_at
        waiting = step.phase is StepPhase.RUNNING and bool(step.approvers)
        if step_def.kind is not StepKind.APPROVAL or not waiting or started is None:
            continue
        if step.deadline is not None:
            expires = step.deadline
            if step_def.on_timeout is TimeoutAction.ESCALATE:
                expires += sum((lvl.after for lvl in step_def.escalation[step.level :]), timedelta(0))
            renews = False
        else:
            periods = max(0, (now - started) // default_lifetime)
            expires, renews = started + default_lifetime * (periods + 1), True
        found.append(WaitingApproval(step_def.id, step.attempt, step.level, expires, renews))
    return found

"""Signed, expiring approval tokens: how an approver decides from a chat or an e-mail link.

An approver reading a chat message or an e-mail has no ``kubectl`` at hand, so
when an approval step starts waiting the operator mints one token per approver
of the step and sends each to that approver through the notifier (a webhook,
:mod:`vigil.kube.controllers.approvals`); whoever holds the token may approve or reject that
one step *as that approver* by POSTing it to the operator's HTTP API. A token
is not authority of its own: the decision is recorded in the bound approver's
name, and the fold checks that approver against the step's approvers exactly as
it checks a ``kubectl vigil approve`` (the HTTP API also checks the RBAC verb).

Format — ``base64url(claims JSON) "." base64url(HMAC-SHA256(key, first part))``,
both parts unpadded. The claims are compact, key-sorted JSON::

    {"att": 1, "exp": 1795000000, "lvl": 0, "ns": "media", "step": "approve",
     "sub": "user:carol", "uid": "6f1c...", "v": 2, "wf": "publish-42"}

* ``ns``, ``wf``, ``uid`` name the workflow instance. The uid makes a token for
  a workflow that was deleted and re-created under the same name worthless.
* ``step`` and ``att`` (the attempt): a token decides one waiting period of one
  step. After ``kubectl vigil retry`` starts a new attempt, the old token is
  refused and a new one is sent.
* ``sub``: the one approver the token is bound to, an entry of the step's
  approvers in its normal spelling (``user:NAME`` or ``group:NAME``).
* ``lvl``: the escalation level at which that approver joined the step (0: the
  step's own approvers). Escalation only adds approvers, so an approver's token
  stays the same, and valid, across escalations; it is recorded with the
  decision as ``tokenLevel``.
* ``exp``: whole Unix seconds; the token is valid while ``now < exp``.

Version 1 tokens (no ``sub``: bearer tokens of whoever could read them) are
refused as malformed.

The signature covers the encoded claims exactly as sent and is compared in its
encoded form with :func:`hmac.compare_digest`, so no second spelling of a token
(other padding bits, stray characters) verifies. Tokens are deterministic: the
same key and claims give the same token, which makes sending idempotent.
:func:`verify_any` accepts a token signed with any of several keys: the current
one and, during a rotation's overlap, the previous one.

:func:`waiting_approvals` says which tokens a workflow's folded state calls
for — one per approver of each waiting step — and until when each is valid.
Pure: no clock (``now`` is passed in), no randomness, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from vigil.core.steps import spec_of
from vigil.core.workflow import (
    Definition,
    StepDef,
    StepPhase,
    TimeoutAction,
    WorkflowPhase,
    WorkflowState,
    normal_approver,
)

#: The claims layout this module mints; anything else is refused as malformed.
TOKEN_VERSION = 2
#: Shortest signing key accepted (HMAC-SHA256's own output length).
MIN_KEY_BYTES = 32
#: Longest token accepted: far above any real one (names are at most 253 characters).
MAX_TOKEN_LENGTH = 4096

_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$")
_CLAIM_KEYS = frozenset({"v", "ns", "wf", "uid", "step", "sub", "att", "lvl", "exp"})


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
    """What a verified token says: which step of which workflow instance, for which approver,
    and until when."""

    namespace: str
    workflow: str
    uid: str
    step: str
    approver: str
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
    approver: str,
    level: int,
    expires: datetime,
    attempt: int = 1,
) -> str:
    """A token for one approver of one waiting approval step, valid until ``expires`` (rounded
    down to a second). ``approver`` is kept in its normal spelling (``user:``/``group:``)."""
    _check_key(key)
    if expires.tzinfo is None:
        raise ValueError("expires must be timezone-aware")
    claims = {
        "v": TOKEN_VERSION,
        "ns": namespace,
        "wf": workflow,
        "uid": uid,
        "step": step,
        "sub": normal_approver(approver),
        "att": attempt,
        "lvl": level,
        "exp": int(expires.timestamp() // 1),
    }
    payload = _b64encode(json.dumps(claims, sort_keys=True, separators=(",", ":")).encode())
    return f"{payload}.{_signature(key, payload)}"


def verify(key: bytes, token: str, *, now: datetime) -> Claims:
    """The claims of a token signed with ``key`` and not expired at ``now``; else InvalidToken."""
    return verify_any([key], token, now=now)


def verify_any(keys: Sequence[bytes], token: str, *, now: datetime) -> Claims:
    """The claims of a token signed with one of ``keys`` and not expired at ``now``; else
    InvalidToken. Every key is tried (no early exit), so timing does not tell which matched."""
    if not keys:
        raise ValueError("no key to verify with")
    for key in keys:
        _check_key(key)
    if len(token) > MAX_TOKEN_LENGTH or not _TOKEN_RE.match(token):
        raise InvalidToken(Problem.MALFORMED, "not a token: expected <claims>.<signature> in base64url")
    payload, signature = token.split(".")
    matches = [hmac.compare_digest(_signature(key, payload), signature) for key in keys]
    if not any(matches):
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
    texts = [data[k] for k in ("ns", "wf", "uid", "step", "sub")]
    numbers = [data[k] for k in ("att", "lvl", "exp")]
    if not all(isinstance(t, str) for t in texts) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in numbers
    ):
        raise InvalidToken(Problem.MALFORMED, "the token's claims have the wrong types")
    if normal_approver(data["sub"]) != data["sub"]:
        raise InvalidToken(Problem.MALFORMED, "the token's approver is not user:NAME or group:NAME")
    try:
        expires = datetime.fromtimestamp(data["exp"], tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise InvalidToken(Problem.MALFORMED, "the token's expiry is out of range") from None
    return Claims(
        namespace=data["ns"],
        workflow=data["wf"],
        uid=data["uid"],
        step=data["step"],
        approver=data["sub"],
        attempt=data["att"],
        level=data["lvl"],
        expires=expires,
    )


# --- which tokens a workflow's state calls for ----------------------------------------------


@dataclasses.dataclass(frozen=True)
class BoundApprover:
    """One approver of a waiting step, and the escalation level at which they joined it."""

    approver: str
    level: int


@dataclasses.dataclass(frozen=True)
class WaitingApproval:
    """An approval step waiting for a decision: who gets a token for it, and until when."""

    step: str
    attempt: int
    #: The step's escalation level now (0: nobody escalated it).
    level: int
    #: The step's current approvers, each bound to a token of its own.
    approvers: tuple[BoundApprover, ...]
    expires: datetime
    #: True when ``expires`` is the default lifetime's end, not a deadline: when it comes and
    #: the step still waits, the next period's token replaces this one.
    renews: bool


def joined_levels(step: StepDef) -> dict[str, int]:
    """Each approver of ``step`` (normal spelling) and the first level that names them."""
    levels: dict[str, int] = {}
    named = [step.approvers, *(level.approvers for level in step.escalation)]
    for number, approvers in enumerate(named):
        for approver in approvers:
            levels.setdefault(normal_approver(approver), number)
    return levels


def waiting_approvals(
    definition: Definition, state: WorkflowState, *, now: datetime, default_lifetime: timedelta
) -> list[WaitingApproval]:
    """Every approval step of a running workflow that waits for a decision now.

    A step with a timeout gets tokens until it can last be decided: its current deadline,
    plus the time of the escalation levels still to come when it escalates on timeout. A
    step without a timeout waits indefinitely, so its tokens last ``default_lifetime`` from
    when its attempt started, then the next period's tokens follow, and so on. Each of the
    step's current approvers gets a token of its own. A step whose tokens would already be
    expired (a deadline passed, its timer not yet recorded) gets none.
    """
    if state.phase is not WorkflowPhase.RUNNING or default_lifetime <= timedelta(0):
        return []
    found: list[WaitingApproval] = []
    for step_def in definition.steps:
        step = state.steps[step_def.id]
        started = step.attempt_started_at
        waiting = step.phase is StepPhase.RUNNING and bool(step.approvers)
        if not spec_of(step_def.kind).awaits_decision or not waiting or started is None:
            continue
        if step.deadline is not None:
            expires = step.deadline
            if step_def.on_timeout is TimeoutAction.ESCALATE:
                expires += sum((lvl.after for lvl in step_def.escalation[step.level :]), timedelta(0))
            renews = False
        else:
            periods = max(0, (now - started) // default_lifetime)
            expires, renews = started + default_lifetime * (periods + 1), True
        if expires <= now:
            continue  # its deadline passed; the timer that says so is about to be recorded
        joined = joined_levels(step_def)
        bound = tuple(
            BoundApprover(approver, joined.get(approver, step.level))
            for approver in dict.fromkeys(normal_approver(a) for a in step.approvers)
        )
        found.append(WaitingApproval(step_def.id, step.attempt, step.level, bound, expires, renews))
    return found

"""The approval callback: ``POST /approvals/{token}/approve`` and ``.../reject``.

A decision is checked against the signed token (docs/approvals.md), the workflow as it is and
the approver's RBAC, then recorded through the workflow engine's conditional status write. The
token is its own authority, so this route asks no TokenReview; it is a credential, so it is
never logged (`redacted`). The body is optional JSON, ``{"by": "<the token's approver>",
"reason": "..."}``, and is refused (400, naming the field, never echoing it) when it is not
JSON, is nested deeper than `vigil.core.jsonvalues` allows, or holds text PostgreSQL and the API
server would refuse (NUL, a lone surrogate).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from vigil.api.bodies import read_json
from vigil.api.bodymodels import ApprovalBody, BodyInvalid, validated
from vigil.api.problems import Answer, json_answer, problem
from vigil.core import jsonvalues
from vigil.core.approvaltokens import MAX_TOKEN_LENGTH, Claims, InvalidToken, verify_any
from vigil.core.ports import Clock
from vigil.core.workflow import RULES, Event, Reason, Record, identity_of

log = logging.getLogger(__name__)

APPROVAL_PATH = re.compile(rf"^/approvals/([^/]{{1,{MAX_TOKEN_LENGTH}}})/(approve|reject)/?$")
#: Largest request body read, in bytes: a name and a reason fit many times over.
MAX_BODY_BYTES = 16 * 1024
DECISIONS = {"approve": (Event.APPROVED, "approved"), "reject": (Event.REJECTED, "rejected")}
DECIDE_EVENTS = {action: event for action, (event, _) in DECISIONS.items()}
#: The 409 reason of a token minted for an earlier attempt of a step that waits again.
SUPERSEDED = "Superseded"
#: The 403 reason of a body whose `by` is not the approver the token is bound to.
IDENTITY_MISMATCH = "IdentityMismatch"
#: The 403 reason of a token whose approver does not hold the RBAC verb `approve`.
NOT_AUTHORIZED = "NotAuthorized"


@dataclasses.dataclass(frozen=True)
class ApprovalCallback:
    """The approval callback (`POST /approvals/{token}/...`): a decision checked against the
    token, the workflow as it is and the approver's RBAC, then recorded. It holds what that
    needs: the keys, a clock, the workflow engine's two calls, and the API server's word on the verb.

    ``keys`` are the keys that verify now (the current one, and the previous one during a
    rotation's overlap). ``submit`` records an input the way ``WorkflowEngine.submit`` does (a
    conditional status write) and returns the records appended, the input first; LookupError
    when the workflow is gone. ``may_approve(namespace, workflow, approver)`` says whether the
    approver (``user:NAME`` or ``group:NAME``) holds the verb ``approve`` on the workflow.
    """

    keys: Callable[[], Sequence[bytes]]
    clock: Clock
    find_workflow: Callable[[str, str], Mapping[str, Any] | None]
    submit: Callable[[str, str, Record], Sequence[Record]]
    may_approve: Callable[[str, str, str], bool]

    def decide(self, token: str, action: str, raw: bytes) -> Answer:
        """(status, content type, body) for a decision (`action`) posted with an approval token."""
        try:
            keys = self.keys()
        except Exception as error:
            log.warning("approval callback: no signing key: %s", error)
            return problem(503, "the signing key is unavailable; try again", "KeyUnavailable")
        now = self.clock.now()
        try:
            claims = verify_any(keys, token, now=now)
        except InvalidToken as error:
            return problem(403, str(error), str(error.problem))
        try:
            by, reason = decision_body(raw)
        except jsonvalues.UnsafeValue as error:
            return problem(400, str(error), "BadBody", field=error.path)
        if not claims_identity(claims.approver, by):
            return problem(
                403, f"the token is {claims.approver}'s: it decides in no other name than theirs", IDENTITY_MISMATCH
            )
        refused = self._not_authorized(claims) or self._not_waiting(claims)  # authorised before the workflow is read
        if refused is not None:
            return refused
        record = token_decision(claims, DECIDE_EVENTS[action], now=now, reason=reason)
        try:
            added = list(self.submit(claims.namespace, claims.workflow, record))
        except LookupError as error:
            return problem(404, str(error), "WorkflowNotFound")
        except RuntimeError as error:  # the status kept changing under it
            return problem(503, f"{error}", "Conflict")
        refusal = next((r for r in added if r.event is Event.REQUEST_REFUSED), None)
        if refusal is not None:
            return problem(409, str(refusal.detail.get("message", "")), str(refusal.detail.get("reason", "")))
        log.info(
            "approval callback: step %s of %s/%s %s by %s (token)",
            claims.step, claims.namespace, claims.workflow, DECISIONS[action][1], record.detail["by"],
        )
        return json_answer(
            200,
            {
                "namespace": claims.namespace,
                "workflow": claims.workflow,
                "step": claims.step,
                "decision": DECISIONS[action][1],
                "by": record.detail["by"],
                "approver": claims.approver,
                "at": record.to_data()["at"],
                "tokenLevel": claims.level,
                "records": [r.to_data() for r in added],
            },
        )

    def _not_authorized(self, claims: Claims) -> Answer | None:
        """403 unless the token's approver holds the verb `approve` on the workflow: the same
        check admission makes of a `kubectl vigil approve`."""
        try:
            allowed = self.may_approve(claims.namespace, claims.workflow, claims.approver)
        except Exception as error:
            log.warning("approval callback: the verb of %s could not be checked: %s", claims.approver, error)
            return problem(503, "the approver's RBAC could not be checked; try again", "AuthorizationUnavailable")
        if allowed:
            return None
        return problem(
            403,
            f"{claims.approver} may not decide: deciding an approval needs the 'approve' verb on "
            f"workflows.vigil.dev (workflow {claims.namespace}/{claims.workflow})",
            NOT_AUTHORIZED,
        )

    def _not_waiting(self, claims: Claims) -> Answer | None:
        """404 or 409 when the token's step cannot be decided now: checked before any write,
        so a replayed token cannot grow the workflow's history (the engine re-checks in its
        conditional write)."""
        where = f"workflow {claims.namespace}/{claims.workflow}"
        obj = self.find_workflow(claims.namespace, claims.workflow)
        if obj is None:
            return problem(404, f"{where} not found", "WorkflowNotFound")
        if obj["metadata"].get("uid") != claims.uid:
            return problem(
                404, f"{where} was deleted and created again: the token is for the old one", "WorkflowNotFound"
            )
        step = ((obj.get("status") or {}).get("steps") or {}).get(claims.step) or {}
        if step.get("phase") != "Running":
            phase = step.get("phase", "unknown")
            return problem(409, f"step {claims.step} of {where} is not waiting ({phase})", str(Reason.NOT_WAITING))
        if step.get("attempts") != claims.attempt:
            return problem(
                409,
                f"step {claims.step} of {where} waits in attempt {step.get('attempts')}; the token is for "
                f"attempt {claims.attempt}: use the token published for it",
                SUPERSEDED,
            )
        return None


def decision_body(raw: bytes) -> tuple[str, str]:
    """(by, reason) from an optional JSON body; jsonvalues.UnsafeValue naming the field at fault
    (``body``, ``by``, ``reason``) and why, never quoting what was sent. The shape is the
    ApprovalBody model's (vigil.api.bodymodels, what the OpenAPI document shows); the text's
    bounds are jsonvalues' (no NUL, no lone surrogate) and a `by` is printable."""
    if not raw.strip():
        return "", ""
    data = read_json(raw, field="body")
    if not isinstance(data, dict):
        raise jsonvalues.UnsafeValue("body", 'must be a JSON object: {"by": "...", "reason": "..."}')
    try:
        body = validated(ApprovalBody, data)
    except BodyInvalid as error:
        raise jsonvalues.UnsafeValue(error.field, error.why) from None
    for field, value in (("by", body.by), ("reason", body.reason)):
        refused = jsonvalues.string_refusal(value)
        if refused is not None:
            raise jsonvalues.UnsafeValue(field, refused)
    if any(not ch.isprintable() for ch in body.by):
        raise jsonvalues.UnsafeValue("by", "must be printable text")
    return body.by.strip(), body.reason.strip()


def token_decision(claims: Claims, event: Event, *, now: datetime, reason: str) -> Record:
    """The input a token records: in its approver's name (a group decides as ``group:NAME``,
    with that group), so the fold checks it against the step's approvers like any request."""
    by, groups = identity_of(claims.approver)
    detail: dict[str, Any] = {
        "by": by,
        "via": "token",
        "approver": claims.approver,
        "tokenLevel": claims.level,
        "rules": RULES,
    }
    if groups:
        detail["byGroups"] = list(groups)
    if reason:
        detail["reason"] = reason
    return Record(event, now, step=claims.step, detail=detail)


def claims_identity(approver: str, by: str) -> bool:
    """Whether a body's ``by`` (empty: not given) names the approver a token is bound to: the
    user's name, or the entry as written (``user:carol``, ``group:editors``)."""
    return not by or by in (approver, identity_of(approver)[0])


def redacted(path: str) -> str:
    """A path fit for logs: an approval token is a credential."""
    return APPROVAL_PATH.sub(r"/approvals/<token>/\2", path)

"""The operator's small HTTP API: health, the Lease holder, an execution's timeline, approvals.

    GET  /healthz, /readyz         200 "ok" while the process serves
    GET  /leader                   the identity holding the trigger Lease
    GET  /executions/{id}          the Execution (spec and status) and its rows in the history
                                   database; 404 when neither knows the id
    POST /approvals/{token}/approve
    POST /approvals/{token}/reject the approval callback (docs/approvals.md): decides the one
                                   approval step the token was minted for. Optional JSON body
                                   {"by": "<name in the calling system>", "reason": "..."}.
                                   200 the recorded decision; 400 bad body; 403 bad, tampered
                                   or expired token; 404 workflow gone (or re-created: another
                                   uid); 409 the step is not waiting (decided, timed out, or
                                   in a later attempt than the token's); 503 try again

Every replica serves it (standbys included), so the Service can route anywhere: a
decision is a conditional status write through the API server, which any replica can
make. In a cluster it is reachable through the API server's service proxy:
`kubectl get --raw /api/v1/namespaces/vigil-system/services/vigil:http/proxy/executions/ID`.
Tokens are credentials: they are never logged.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from vigil.core.approvaltokens import MAX_TOKEN_LENGTH, Claims, InvalidToken, verify
from vigil.core.history import AttemptRecord
from vigil.core.ports import Clock, HistoryUnavailable
from vigil.core.workflow import Event, Reason, Record

log = logging.getLogger(__name__)

EXECUTION_PATH = re.compile(r"^/executions/([a-z0-9][-a-z0-9]{0,62})/?$")
APPROVAL_PATH = re.compile(rf"^/approvals/([^/]{{1,{MAX_TOKEN_LENGTH}}})/(approve|reject)/?$")
#: Largest request body read, in bytes: a name and a reason fit many times over.
MAX_BODY_BYTES = 16 * 1024
BY_MAX_LENGTH = 253
REASON_MAX_LENGTH = 1024
DECISIONS = {"approve": (Event.APPROVED, "approved"), "reject": (Event.REJECTED, "rejected")}
#: The 409 reason of a token minted for an earlier attempt of a step that waits again.
SUPERSEDED = "Superseded"

Answer = tuple[int, str, bytes]


@dataclasses.dataclass(frozen=True)
class ApprovalCallback:
    """What the approval callback needs: the key, a clock, and the workflow engine's two calls.

    ``submit`` records an input the way ``WorkflowEngine.submit`` does (a conditional status
    write) and returns the records appended, the input first; LookupError when the workflow
    is gone.
    """

    key: Callable[[], bytes]
    clock: Clock
    find_workflow: Callable[[str, str], Mapping[str, Any] | None]
    submit: Callable[[str, str, Record], Sequence[Record]]


def _json(status: int, body: Mapping[str, Any]) -> Answer:
    return status, "application/json", json.dumps(body, indent=2, default=str).encode()


def _error(status: int, message: str, reason: str) -> Answer:
    return _json(status, {"error": message, "reason": reason})


def decision_body(raw: bytes) -> tuple[str, str]:
    """(by, reason) from an optional JSON body; ValueError naming what is wrong."""
    if not raw.strip():
        return "", ""
    try:
        data = json.loads(raw)
    except ValueError as error:
        raise ValueError(f"the body is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise ValueError('the body must be a JSON object: {"by": "...", "reason": "..."}')
    unknown = sorted(set(data) - {"by", "reason"})
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}: only 'by' and 'reason' are accepted")
    found: list[str] = []
    for field, longest in (("by", BY_MAX_LENGTH), ("reason", REASON_MAX_LENGTH)):
        value = data.get(field, "")
        if not isinstance(value, str):
            raise ValueError(f"{field} must be a string")
        if len(value) > longest:
            raise ValueError(f"{field} is longer than {longest} characters")
        if field == "by" and any(not ch.isprintable() for ch in value):
            raise ValueError("by must be printable text")
        found.append(value.strip())
    return found[0], found[1]


def record_to_json(record: AttemptRecord) -> dict[str, Any]:
    def t(value: Any) -> str | None:
        return value.isoformat() if value is not None else None

    return {
        "executionId": record.execution_id,
        "attempt": record.attempt,
        "namespace": record.namespace,
        "job": record.job,
        "priority": record.priority,
        "state": str(record.state),
        "reason": record.reason,
        "scheduledFor": t(record.scheduled_for),
        "startedAt": t(record.started_at),
        "finishedAt": t(record.finished_at),
        "pod": record.pod,
        "error": record.error,
    }


class ApiServer:
    """Serves the endpoints above from the collaborators it is given."""

    def __init__(
        self,
        *,
        leader: Callable[[], str | None],
        find_execution: Callable[[str], dict[str, Any] | None],
        timeline: Callable[[str], list[AttemptRecord]],
        approvals: ApprovalCallback | None = None,
    ) -> None:
        self._leader = leader
        self._find_execution = find_execution
        self._timeline = timeline
        self._approvals = approvals

    def answer(self, path: str) -> Answer:
        """(status, content type, body) for a GET of `path`."""
        if path in ("/healthz", "/readyz"):
            return 200, "text/plain", b"ok\n"
        if path == "/leader":
            return 200, "text/plain", f"{self._leader() or ''}\n".encode()
        match = EXECUTION_PATH.match(path)
        if match:
            return self._execution(match.group(1))
        if APPROVAL_PATH.match(path) and self._approvals is not None:
            return 405, "text/plain", b"POST decides an approval; GET does nothing\n"
        return 404, "text/plain", b"not found\n"

    def answer_post(self, path: str, body: bytes) -> Answer:
        """(status, content type, body) for a POST of `body` to `path`."""
        match = APPROVAL_PATH.match(path)
        if match is None or self._approvals is None:
            return 404, "text/plain", b"not found\n"
        return self._decide(self._approvals, match.group(1), match.group(2), body)

    def _decide(self, callback: ApprovalCallback, token: str, action: str, raw: bytes) -> Answer:
        try:
            key = callback.key()
        except Exception as error:
            log.warning("approval callback: no signing key: %s", error)
            return _error(503, "the signing key is unavailable; try again", "KeyUnavailable")
        now = callback.clock.now()
        try:
            claims = verify(key, token, now=now)
        except InvalidToken as error:
            return _error(403, str(error), str(error.problem))
        try:
            by, reason = decision_body(raw)
        except ValueError as error:
            return _error(400, str(error), "BadBody")
        refused = self._not_waiting(callback, claims)
        if refused is not None:
            return refused
        event, decision = DECISIONS[action]
        detail: dict[str, Any] = {
            "by": f"token:{by}" if by else "token",
            "via": "token",
            "tokenLevel": claims.level,
        }
        if reason:
            detail["reason"] = reason
        record = Record(event, now, step=claims.step, detail=detail)
        try:
            added = list(callback.submit(claims.namespace, claims.workflow, record))
        except LookupError as error:
            return _error(404, str(error), "WorkflowNotFound")
        except RuntimeError as error:  # the status kept changing under it
            return _error(503, f"{error}", "Conflict")
        refusal = next((r for r in added if r.event is Event.REQUEST_REFUSED), None)
        if refusal is not None:
            return _error(409, str(refusal.detail.get("message", "")), str(refusal.detail.get("reason", "")))
        log.info(
            "approval callback: step %s of %s/%s %s by %s",
            claims.step, claims.namespace, claims.workflow, decision, detail["by"],
        )
        return _json(
            200,
            {
                "namespace": claims.namespace,
                "workflow": claims.workflow,
                "step": claims.step,
                "decision": decision,
                "by": detail["by"],
                "at": record.to_data()["at"],
                "tokenLevel": claims.level,
                "records": [r.to_data() for r in added],
            },
        )

    def _not_waiting(self, callback: ApprovalCallback, claims: Claims) -> Answer | None:
        """404 or 409 when the token's step cannot be decided now: checked before any write,
        so a replayed token cannot grow the workflow's history (the engine re-checks in its
        conditional write)."""
        where = f"workflow {claims.namespace}/{claims.workflow}"
        obj = callback.find_workflow(claims.namespace, claims.workflow)
        if obj is None:
            return _error(404, f"{where} not found", "WorkflowNotFound")
        if obj["metadata"].get("uid") != claims.uid:
            return _error(
                404, f"{where} was deleted and created again: the token is for the old one", "WorkflowNotFound"
            )
        step = ((obj.get("status") or {}).get("steps") or {}).get(claims.step) or {}
        if step.get("phase") != "Running":
            phase = step.get("phase", "unknown")
            return _error(409, f"step {claims.step} of {where} is not waiting ({phase})", str(Reason.NOT_WAITING))
        if step.get("attempts") != claims.attempt:
            return _error(
                409,
                f"step {claims.step} of {where} waits in attempt {step.get('attempts')}; the token is for "
                f"attempt {claims.attempt}: use the token published for it",
                SUPERSEDED,
            )
        return None

    def _execution(self, execution_id: str) -> Answer:
        obj = self._find_execution(execution_id)
        body: dict[str, Any] = {"executionId": execution_id}
        if obj is not None:
            body["namespace"] = obj["metadata"]["namespace"]
            body["spec"] = obj.get("spec") or {}
            body["status"] = obj.get("status") or {}
        try:
            body["history"] = [record_to_json(r) for r in self._timeline(execution_id)]
        except HistoryUnavailable as err:
            body["history"] = None
            body["historyError"] = f"history database unavailable: {err}"
        if obj is None and not body["history"]:
            return 404, "application/json", json.dumps({"error": f"execution {execution_id} not found"}).encode()
        return 200, "application/json", json.dumps(body, indent=2, default=str).encode()

    def serve(self, port: int) -> ThreadingHTTPServer:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                try:
                    answer = api.answer(path)
                except Exception:
                    log.exception("GET %s failed", _redacted(path))
                    answer = 500, "text/plain", b"internal error\n"
                self._send(answer)

            def do_POST(self) -> None:
                path = self.path.split("?", 1)[0]
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    length = -1
                if not 0 <= length <= MAX_BODY_BYTES:
                    self._send(_error(400, f"the body must be at most {MAX_BODY_BYTES} bytes", "BadBody"))
                    return
                try:
                    answer = api.answer_post(path, self.rfile.read(length))
                except Exception:
                    log.exception("POST %s failed", _redacted(path))
                    answer = 500, "text/plain", b"internal error\n"
                self._send(answer)

            def _send(self, answer: Answer) -> None:
                status, kind, body = answer
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        server = ThreadingHTTPServer(("", port), Handler)
        threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
        return server


def _redacted(path: str) -> str:
    """A path fit for logs: an approval token is a credential."""
    return APPROVAL_PATH.sub(r"/approvals/<token>/\2", path)

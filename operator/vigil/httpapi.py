"""The operator's small HTTP API: health, the Lease holder, and an execution's timeline as JSON.

    GET /healthz, /readyz          200 "ok" while the process serves
    GET /leader                    the identity holding the trigger Lease
    GET /executions/{id}           the Execution (spec and status) and its rows in the history
                                   database; 404 when neither knows the id

Every replica serves it (standbys included), so the Service can route anywhere.
In a cluster it is reachable through the API server's service proxy:
`kubectl get --raw /api/v1/namespaces/vigil-system/services/vigil:http/proxy/executions/ID`.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from vigil.core.history import AttemptRecord
from vigil.core.ports import HistoryUnavailable

log = logging.getLogger(__name__)

EXECUTION_PATH = re.compile(r"^/executions/([a-z0-9][-a-z0-9]{0,62})/?$")


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
    ) -> None:
        self._leader = leader
        self._find_execution = find_execution
        self._timeline = timeline

    def answer(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a GET of `path`."""
        if path in ("/healthz", "/readyz"):
            return 200, "text/plain", b"ok\n"
        if path == "/leader":
            return 200, "text/plain", f"{self._leader() or ''}\n".encode()
        match = EXECUTION_PATH.match(path)
        if match:
            return self._execution(match.group(1))
        return 404, "text/plain", b"not found\n"

    def _execution(self, execution_id: str) -> tuple[int, str, bytes]:
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
                try:
                    status, kind, body = api.answer(self.path.split("?", 1)[0])
                except Exception:
                    log.exception("GET %s failed", self.path)
                    status, kind, body = 500, "text/plain", b"internal error\n"
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

"""Logging set-up: plain text for people, one JSON object per line for log pipelines.

Every fire, attempt and decision is logged on one line that names the
execution id, so `grep ex-…` (or a query on the `message` field) follows one
occurrence through the trigger, the dispatcher and the result. A line written while the HTTP
API answers a request carries that request's id (`REQUEST_ID`, also the answer's
``X-Request-Id``), so one request is followed the same way.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from datetime import UTC, datetime

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
QUIET = ("kubernetes.client.rest", "urllib3")  # a line per handler call or request is noise
#: The id of the HTTP request being answered ("" outside one): set by vigil.api.app, on the
#: event loop and on the executor thread that runs the route alike.
REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")


class TextFormatter(logging.Formatter):
    """TEXT_FORMAT, and `` [request ID]`` at the end of a line written while answering one."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        request_id = REQUEST_ID.get()
        mark = f"[request {request_id}]"
        return f"{line} {mark}" if request_id and mark not in line else line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "thread": record.threadName,
        }
        request_id = REQUEST_ID.get()
        if request_id:
            entry["requestId"] = request_id
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(*, level: str, format: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if format == "json" else TextFormatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)

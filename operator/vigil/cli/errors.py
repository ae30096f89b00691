"""How `kubectl vigil` fails: one line on stderr and an exit code, never a traceback.

A user who mistypes a job name, a date, or retries an execution that is not
dead gets `BadInput` (exit 2, as argparse's own usage errors). An API server
that refuses a request or cannot be reached is not the user's input, so it gets
exit 1 with the server's own message (so does an object that kept changing
under a conditional write, a request that admission or the operator turned
down, and a request the operator did not act on in time: `Refused`).
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError, MaxRetryError
from urllib3.exceptions import TimeoutError as RequestTimeout

EXIT_BAD_INPUT = 2  # as argparse's usage errors: the command was given something it cannot use
EXIT_API_FAILURE = 1  # the API server refused or could not be reached


class BadInput(Exception):
    """The command cannot do what was asked with this input; the message says why."""


class Contention(Exception):
    """An object kept changing under a conditional write; trying again later may succeed."""


class Refused(Exception):
    """Someone else turned the request down or did not act on it: admission, the operator."""


def api_failure(err: BaseException) -> str | None:
    """A one-line description of an API server failure, or None when `err` is something else."""
    if isinstance(err, ApiException):
        return f"the API server answered {err.status} {err.reason}: {server_message(err)}"
    if _timed_out(err):
        return (
            "the API server did not answer in time (--request-timeout): it, or the network to it, "
            f"is not responding ({err})"
        )
    if isinstance(err, HTTPError):
        return f"cannot reach the API server: {err}"
    if isinstance(err, Contention | Refused):
        return str(err)
    return None


def server_message(err: ApiException) -> str:
    """The `message` of the API server's Status answer (its body as text when it is not one)."""
    try:
        body = json.loads(err.body or "")
    except (TypeError, ValueError):
        return str(err.body or "").strip() or "(no message)"
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or "(no message)")


def problem_of(raw: bytes) -> tuple[str, str]:
    """(reason, message) of an error answer of the operator's own API: RFC 9457 problem details
    (``reason``, else the tail of ``type``; ``detail``, else ``title``), or an older operator's
    ``{"error", "reason"}``; ("", the body as text) when it is not JSON."""
    try:
        body = json.loads(raw)
    except ValueError:
        return "", raw.decode(errors="replace")
    if not isinstance(body, dict):
        return "", raw.decode(errors="replace")
    kind = str(body.get("type") or "")
    reason = str(body.get("reason") or (kind.rpartition(":")[2] if kind.startswith("urn:vigil:problem:") else ""))
    return reason, str(body.get("detail") or body.get("title") or body.get("error") or "")


def _timed_out(err: BaseException) -> bool:
    """Whether `err` is a request that got no answer within its timeout (to connect or to read)."""
    if isinstance(err, MaxRetryError):
        return isinstance(err.reason, RequestTimeout | TimeoutError)
    return isinstance(err, RequestTimeout | TimeoutError)

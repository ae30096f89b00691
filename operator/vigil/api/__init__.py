"""The operator's HTTP API: one ASGI application on uvicorn, its routes in modules of their own.

    transport   uvicorn's HTTP/1.1 with per-connection bounds (head size and time, keep-alive
                idle, connections per peer); knows nothing of what it serves
    app         the ASGI application: request ids, body limits, deadlines, the bounded executor
                the blocking routes run in, and the one error shape
    problems    that shape: RFC 9457 problem details for every 4xx and 5xx
    bodies      request bodies read one way (UTF-8 JSON, depth and text checked, nothing quoted)
    router      the one router every request goes through (`ApiServer.dispatch`): which route
                module serves it, the caller authenticated, /leader
    executions  an Execution with its history rows (`/executions/{id}`, namespaced too)
    histories   a job's executions and a workflow's history from the history database
    guards      who may call: the TokenReview and SubjectAccessReview, and the accesses asked
    approvals   the approval callback (`POST /approvals/{token}/...`)
    queue       the volume tier's `/v1/...` routes, knowing the queue store by its protocol
    exchange    the few request headers a route may read beyond its five values, and the
                headers it may add to its answer (the console's cookie, CSP, gzip)
    console     the web console's pages (`/console/...`): server-rendered HTML, vendored htmx

Health and readiness are not here: they have a listener of their own (vigil.probes), so nothing
a client of this API does can fail a probe.
"""

from vigil.api.approvals import ApprovalCallback
from vigil.api.guards import Guard
from vigil.api.queue import JobStore, QueueApi
from vigil.api.router import ApiServer
from vigil.api.transport import Limits, Serving, TlsFiles

__all__ = ["ApiServer", "ApprovalCallback", "Guard", "JobStore", "Limits", "QueueApi", "Serving", "TlsFiles"]

"""The console's steering verbs, made as the viewer: the CLI's own verbs with the viewer's token.

The console (vigil.api.console) writes nothing in the operator's name. Run now, Suspend,
Resume, Approve and Reject are the `kubectl vigil run/suspend/resume/approve/reject` code
(vigil.cli.jobcontrol, vigil.cli.workflows) run through a `Cluster` whose only credential is
the bearer token the viewer logged in with: the API server authenticates it, RBAC authorises
the write, and admission checks an approval's `by` against the writer, exactly as for the
command. So the console cannot be used to do what the viewer's own kubectl could not — and a
token bound only to the audience `vigil` (not the API server's) can look but not write (the
API server refuses it: 401, shown on the page).

The entry point (`vigil.__main__`) hands `ViewerWrites` to the runtime, which wires it into the
console; this module lives with the verbs it reuses, and the runtime never imports the CLI.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.api.console import Refused as ConsoleRefused
from vigil.cli import jobcontrol, workflows
from vigil.cli.cluster import Cluster
from vigil.cli.errors import BadInput, Contention, Refused, server_message
from vigil.kube.kits.apiclient import operator_configuration
from vigil.model.workflow import RequestAction

#: How long a decision waits for the operator to record it before the page is shown (seconds):
#: a pass or two. It holds one of the API's `http.workers` threads meanwhile, so it is short;
#: a request not yet recorded by then says so, and the page's DAG shows what came of it.
DECISION_WAIT_SECONDS = 5.0

T = TypeVar("T")


class ViewerWrites:
    """The console's writes (vigil.api.console.ConsoleWrites), each as the viewer. `base` says
    where the API server is (default: the operator's own configuration, read at the first write)."""

    def __init__(
        self,
        base: client.Configuration | None = None,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        decision_wait_seconds: float = DECISION_WAIT_SECONDS,
    ) -> None:
        self._base = base
        self._clock = clock
        self._decision_wait_seconds = decision_wait_seconds

    def cluster(self, token: str) -> Cluster:
        """A Cluster holding nothing but `token`: no client certificate, no impersonation."""
        if self._base is None:
            self._base = operator_configuration()
        configuration = client.Configuration()
        configuration.host = self._base.host
        configuration.ssl_ca_cert = self._base.ssl_ca_cert
        configuration.verify_ssl = self._base.verify_ssl
        configuration.api_key = {"authorization": f"Bearer {token}"}
        return Cluster.of(configuration)

    def run_now(self, token: str, namespace: str, job: str) -> str:
        run, result, suspended = _as_viewer(
            lambda: jobcontrol.start_run(
                self.cluster(token), namespace, job, request_id=None, now=self._clock()
            )
        )
        note = " (the job is suspended; this run goes ahead all the same)" if suspended else ""
        return f"execution {run.execution_id} {result} (request {run.request_id}){note}"

    def suspend(self, token: str, namespace: str, job: str, reason: str) -> str:
        _, by = _as_viewer(
            lambda: jobcontrol.suspend_job(self.cluster(token), namespace, job, reason=reason)
        )
        return f"scheduledjob {job} suspended by {by}"

    def resume(self, token: str, namespace: str, job: str) -> str:
        _as_viewer(lambda: jobcontrol.resume_job(self.cluster(token), namespace, job))
        return f"scheduledjob {job} resumed"

    def decide(
        self, token: str, namespace: str, workflow: str, step: str, action: str, reason: str
    ) -> str:
        ask = workflows.Ask(
            action=RequestAction(action),
            workflow=workflow,
            namespace=namespace,
            step=step,
            reason=reason,
        )
        cluster = self.cluster(token)

        def decide() -> str:
            request_id = workflows.new_request_id()
            item = workflows.request_item(
                ask, identity=cluster.whoami(), request_id=request_id, at=self._clock()
            )
            workflows.append_request(cluster, ask, item)
            outcome = workflows.wait_recorded(
                lambda: cluster.workflow(workflow, namespace), request_id, timeout=self._decision_wait_seconds,
                clock=time.monotonic, sleep=time.sleep,
            )  # fmt: skip
            if outcome is None:
                return f"{ask.describe()} requested (request {request_id}); the operator records it at its next pass"
            return "; ".join(workflows.report(ask, request_id, outcome))

        return _as_viewer(decide)


def _as_viewer(write: Callable[[], T]) -> T:
    """`write`'s result; what the CLI would print as an error becomes the console's Refused."""
    try:
        return write()
    except (BadInput, Contention, Refused) as err:
        raise ConsoleRefused(str(err)) from None
    except ApiException as err:
        if err.status in (401, 403, 404, 409, 422):
            raise ConsoleRefused(
                f"the API server refused it ({err.status}): {server_message(err)}"
            ) from None
        raise

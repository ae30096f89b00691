"""Turning a fired occurrence into its first pod.

The pod is named from the execution id and attempt, so when two passes (or two
leaders in a failover overlap) launch the same occurrence, the API server
answers the second with 409 AlreadyExists and there is still one pod.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.chain import Fire
from vigil.core.payload import occurrence_variables, render_payload, render_template_string
from vigil.kube.jobs import KubeCatalogue
from vigil.kube.pods import build_pod, execution_env

log = logging.getLogger(__name__)

FIRST_ATTEMPT = 1


class MissingJob(RuntimeError):
    """The job vanished between lookup and launch; the next pass records it."""


class PodLauncher:
    def __init__(self, api: client.ApiClient, *, catalogue: KubeCatalogue) -> None:
        self._core = client.CoreV1Api(api)
        self._catalogue = catalogue

    def launch(self, fire: Fire) -> bool:
        job = fire.job
        obj = self._catalogue.cached(job.namespace, job.name)
        spec = self._catalogue.cached_spec(job.namespace, job.name)
        if obj is None or spec is None:
            raise MissingJob(f"{job.namespace}/{job.name}")
        pod = self.pod_for(fire, obj=obj, attempt=FIRST_ATTEMPT)
        try:
            self._core.create_namespaced_pod(job.namespace, pod)
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        log.info(
            "fired %s/%s nominal=%s execution=%s pod=%s",
            job.namespace,
            job.name,
            fire.occurrence.nominal.isoformat(),
            fire.execution_id,
            pod["metadata"]["name"],
        )
        return True

    def pod_for(self, fire: Fire, *, obj: dict[str, Any], attempt: int) -> dict[str, Any]:
        spec = self._catalogue.cached_spec(fire.job.namespace, fire.job.name)
        assert spec is not None
        occ = fire.occurrence
        variables = occurrence_variables(
            period_start=occ.period_start,
            period_end=occ.period_end,
            scheduled_for=occ.nominal,
            execution_id=fire.execution_id,
            job_name=fire.job.name,
            job_namespace=fire.job.namespace,
        )
        payload = render_payload(
            payload=spec.payload, template=spec.payload_template, variables=variables, timezone=spec.timezone
        )
        key: str = fire.execution_id
        if spec.idempotency_key:
            key = render_template_string(
                spec.idempotency_key, variables, timezone=spec.timezone, field="spec.idempotencyKey"
            )
        env = execution_env(
            execution_id=fire.execution_id,
            attempt=attempt,
            scheduled_for=occ.nominal,
            period_start=occ.period_start,
            period_end=occ.period_end,
            payload_json=payload,
            idempotency_key=key,
            job=f"{fire.job.namespace}/{fire.job.name}",
        )
        template = (obj.get("spec") or {}).get("template") or {}
        timeout = timedelta(seconds=spec.timeout.total_seconds()) if spec.timeout is not None else None
        return build_pod(
            template=template, owner=obj, execution_id=fire.execution_id, attempt=attempt, env=env, timeout=timeout
        )

"""The pod of an Execution's attempt, built from its job when the dispatcher starts it.

The dispatcher (`vigil.kube.controllers.dispatcher`) starts a Ready attempt by creating the pod
built here: named `<execution id>-<attempt>` (a second create is 409, never a second pod), the
job's pod template with the occurrence in every container's environment, its payload and
idempotency key rendered for the occurrence's period. The launcher
(`vigil.kube.controllers.launcher`) renders the same payload and key once before it creates the
Execution, so that one that cannot be made fails its occurrence at launch. Neither imports the
other: an occurrence's path (launcher → Execution → execution controller → dispatcher → here)
enters each module once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from vigil.core.payload import occurrence_variables, render_payload, render_template_string
from vigil.kube.stores.pods import build_pod, execution_env
from vigil.model.scheduledjob import ScheduledJobSpec


class PodFactory:
    """Builds the pod of one attempt of one execution."""

    def pod_for(
        self,
        *,
        job: Mapping[str, Any],
        spec: ScheduledJobSpec,
        execution_id: str,
        attempt: int,
        scheduled_for: datetime,
        period_start: datetime,
        period_end: datetime,
        execution: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        meta = job["metadata"]
        variables = occurrence_variables(
            period_start=period_start,
            period_end=period_end,
            scheduled_for=scheduled_for,
            execution_id=execution_id,
            job_name=meta["name"],
            job_namespace=meta["namespace"],
        )
        payload = render_payload(
            payload=spec.payload, template=spec.payload_template, variables=variables, timezone=spec.timezone,
            monotonic=time.monotonic,  # the render's wall-clock budget
        )
        key = execution_id
        if spec.idempotency_key:
            key = render_template_string(
                spec.idempotency_key, variables, timezone=spec.timezone, field="spec.idempotencyKey",
                monotonic=time.monotonic,
            )
        env = execution_env(
            execution_id=execution_id,
            attempt=attempt,
            scheduled_for=scheduled_for,
            period_start=period_start,
            period_end=period_end,
            payload_json=payload,
            idempotency_key=key,
            job=f"{meta['namespace']}/{meta['name']}",
        )
        template = (job.get("spec") or {}).get("template") or {}
        timeout = timedelta(seconds=spec.timeout.total_seconds()) if spec.timeout is not None else None
        return build_pod(
            template=template, owner=job, execution_id=execution_id, attempt=attempt, env=env, timeout=timeout,
            controller=execution,
        )  # fmt: skip

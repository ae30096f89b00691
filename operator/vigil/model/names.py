"""Every name Vigil writes on the API server, declared once.

The API group and version, each resource's plural (what URLs, RBAC rules and
the caches name), and the label and annotation keys put on the objects
Vigil creates. The models' `ResourceKind`s, the adapters, the CLI and the HTTP
API all take them from here, as the CronJob controller and kueue keep theirs
in one module: a rename is one edit, and a search finds every use.
"""

from __future__ import annotations

#: The API group and version of every Vigil resource.
GROUP = "vigil.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# -- resource plurals --------------------------------------------------------------------------
SCHEDULED_JOBS = "scheduledjobs"
EXECUTIONS = "executions"
WORKFLOWS = "workflows"
WORKFLOW_DEFINITIONS = "workflowdefinitions"
SCHEDULE_BUCKETS = "schedulebuckets"
TASK_QUEUES = "taskqueues"
#: The subresource whose verbs are a queue's executions (submit `create`, cancel and retry
#: `update`, delete jobs `delete`, read `get`): RBAC's `taskqueues/executions`. No API serves it;
#: the operator's HTTP API and the task-submit admission policy check it.
TASK_QUEUE_EXECUTIONS = "executions"

# -- labels and annotations on execution pods (and workflow step pods) -------------------------
LABEL_JOB = "vigil.dev/job"
LABEL_JOB_UID = "vigil.dev/job-uid"
LABEL_EXECUTION = "vigil.dev/execution-id"
LABEL_ATTEMPT = "vigil.dev/attempt"
#: An Execution's dispatch priority, set when it is created; a workflow's and its step pods' too.
LABEL_PRIORITY = "vigil.dev/priority"
LABEL_MANAGED = "app.kubernetes.io/managed-by"
ANNOTATION_SCHEDULED_FOR = "vigil.dev/scheduled-for"
ANNOTATION_PERIOD = "vigil.dev/period"
#: On a manual run's Execution (`kubectl vigil run`): the request id its execution id derives from.
ANNOTATION_REQUEST_ID = "vigil.dev/request-id"
#: `LABEL_MANAGED`'s value on an execution's pods, and on a workflow step's.
MANAGED_BY = "vigil"
MANAGED_BY_WORKFLOWS = "vigil-workflows"

# -- labels on workflow step pods ----------------------------------------------------------------
LABEL_WORKFLOW = "vigil.dev/workflow"
LABEL_WORKFLOW_UID = "vigil.dev/workflow-uid"
LABEL_STEP = "vigil.dev/step"
LABEL_COMPENSATION = "vigil.dev/compensation"

# -- labels on ScheduleBuckets: which minute, and whether any occurrence is still unfired --------
LABEL_MINUTE = "vigil.dev/minute"
LABEL_PENDING = "vigil.dev/pending"

# -- annotations on the approval signing key's Secret --------------------------------------------
ANNOTATION_ROTATED_AT = "vigil.dev/rotated-at"
ANNOTATION_PURPOSE = "vigil.dev/purpose"
MANAGED_BY_APPROVALS = "vigil-approvals"

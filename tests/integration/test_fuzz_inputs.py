"""Hostile and contradictory specs against the real API server and a running operator.

Hypothesis builds ScheduledJobs and Workflows from a valid base with fields
replaced by hostile strings (control characters, long and non-ASCII text),
huge or negative numbers, deep or expensive payload templates, and related
fields that disagree (jitter past the interval, an expected interval shorter
than it), and `task` steps with hostile queue and task names and payloads (the
operator has the volume tier on: a real PostgreSQL queue store). Each one must
end one of two ways:

* refused at admission (422, or 400 for a value of the wrong type) with a
  message that names the field — `spec.` something; or
* accepted, and then processed by the operator: Ready (it is scheduled or
  runs) or Invalid with a condition message naming the field.

Meanwhile the operator must not crash or restart, and a canary job in another
namespace fires every occurrence on time throughout. Examples are derandomized so a CI run is
repeatable; VIGIL_FUZZ_EXAMPLES raises their number for a longer hunt.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException

from tests.contract.conftest import postgres
from tests.integration.canary import Canary
from tests.integration.conftest import KubeCluster
from tests.integration.jobs import GROUP, PLURAL, VERSION, condition, job_body
from tests.integration.operators import OperatorFleet
from tests.integration.test_workflow_tasks import queue_dsn
from tests.waiting import wait_for

__all__ = ["postgres", "queue_dsn"]

pytestmark = pytest.mark.postgres

EXAMPLES = int(os.environ.get("VIGIL_FUZZ_EXAMPLES", "40"))
WORKFLOWS = "workflows"

# --- values ---------------------------------------------------------------------------------

hostile_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=200, max_size=2000),
    st.sampled_from(["", " ", "\x00", "\n\t", "../../etc/passwd", "${HOME}", "'; DROP TABLE jobs; --", "💥" * 50]),
)
huge_number = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1), st.sampled_from([0, -1, 10**18, 2**31])
)
duration = st.one_of(
    st.builds(lambda n, u: f"{n}{u}", st.integers(min_value=0, max_value=10**6), st.sampled_from("dhms")),
    hostile_text,
)
template_text = st.one_of(
    st.sampled_from([
        '{{ "x" * 2000000000 }}',
        "{% for a in range(9000) %}{% for b in range(9000) %}{% endfor %}{% endfor %}",
        "{{ 10 ** 100000000 }}",
        '{{ "{:>999999999}".format(1) }}',
        "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
        "{{ periodStart | date }}",
        "{{ yesterday }}",
        "{{ periodStart.__class__.__mro__ }}",
        "{{ " * 200,
    ]),
    st.text(alphabet="{}%#()|.*+ abcxyz0123456789'\"", max_size=80),
)  # fmt: skip
deep_template = st.recursive(
    template_text,
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(st.text(min_size=1, max_size=8), children, max_size=3)),
    max_leaves=12,
)

# One field replaced per draw, several draws per spec: the cases hit one path, and mixtures.
JOB_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "cron": st.one_of(hostile_text, st.sampled_from(["* * * * * *", "0 25 * * *", "*/0 * * * *", "@every 1s"])),
    "every": duration,
    "jitter": duration,
    "expectedMaxInterval": duration,
    "timezone": st.one_of(hostile_text, st.sampled_from(["Mars/Olympus_Mons", "localtime", "Etc/GMT+14"])),
    "catchUpLimit": huge_number,
    "catchUpWindow": duration,
    "priority": hostile_text,
    "concurrencyPolicy": hostile_text,
    "payloadTemplate": st.dictionaries(st.text(min_size=1, max_size=10), deep_template, min_size=1, max_size=3),
    "payload": st.one_of(st.dictionaries(st.text(max_size=10), hostile_text, max_size=3), huge_number),
    "retry": st.fixed_dictionaries({"maxAttempts": huge_number}),
    "idempotencyKey": st.one_of(hostile_text, template_text),
    "suspend": st.booleans(),
    "suspendReason": hostile_text,
}
# Related fields that must agree: (every, jitter, expectedMaxInterval) drawn together.
disagreeing = st.fixed_dictionaries({
    "every": st.sampled_from(["1m", "1h", "1d"]),
    "jitter": st.sampled_from(["0s", "59s", "10m", "2d"]),
    "expectedMaxInterval": st.sampled_from(["30s", "1h", "3d"]),
})  # fmt: skip

# Specs the schema admits that only the operator can judge: an unknown zone, a cron whose gaps
# are shorter than its jitter, templates that fail or would cost too much when rendered.
operator_judged = st.one_of(
    st.fixed_dictionaries({"timezone": st.sampled_from(["Mars/Olympus_Mons", "Europe/Atlantis", "UTC"])}),
    st.fixed_dictionaries({"cron": st.sampled_from(["*/5 * * * *", "0 2 * * *"]), "jitter": st.sampled_from(["1m", "10m", "2d"])}),
    st.fixed_dictionaries({"payloadTemplate": st.dictionaries(st.sampled_from(["a", "b"]), template_text, min_size=1, max_size=2)}),
)

job_changes = st.one_of(
    st.dictionaries(st.sampled_from(sorted(JOB_FIELDS)), st.none(), min_size=1, max_size=3).flatmap(
        lambda keys: st.fixed_dictionaries({k: JOB_FIELDS[k] for k in keys})
    ),
    disagreeing,
    operator_judged,
)

step_id = st.one_of(st.sampled_from(["a", "b", "c"]), hostile_text)
# A task step's block: a real queue and task or hostile names, and a payload with hostile text, huge
# numbers and deep nesting (the API server keeps it; the engine refuses it, naming the place).
task_payload = st.recursive(
    st.one_of(hostile_text, huge_number, st.floats(allow_nan=False), st.booleans(), st.none()),
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(hostile_text, children, max_size=3)),
    max_leaves=20,
)
task_block = st.fixed_dictionaries(
    {"queue": st.one_of(st.just("work"), hostile_text), "name": st.one_of(st.just("record"), hostile_text)},
    optional={
        "payload": st.one_of(st.dictionaries(hostile_text, task_payload, max_size=4), huge_number),
        "priority": huge_number,
    },
)
hostile_steps = st.lists(
    st.fixed_dictionaries(
        {"id": step_id, "type": st.sampled_from(["wait", "approval", "pod", "task", "nonsense"])},
        optional={
            "dependsOn": st.lists(step_id, max_size=3),
            "wait": st.fixed_dictionaries({"duration": duration}),
            "task": task_block,
            "timeout": duration,
            "onTimeout": st.one_of(st.sampled_from(["fail", "skip", "escalate"]), hostile_text),
        },
    ),
    min_size=0,
    max_size=5,
)


DEEP: list[Any] = []
for _ in range(70):  # past the payload's 64 levels
    DEEP = [DEEP]


def wait_step(step: str, *needs: str) -> dict[str, Any]:
    return {"id": step, "type": "wait", "wait": {"duration": "1s"}, "dependsOn": list(needs)}


# Well-formed steps whose graph the schema cannot judge: fine, a cycle, a self-loop, a repeated
# id (a workflow's steps are one atomic list, so the API server does not key them by id); task
# steps whose payload the API server keeps and the engine refuses (70 deep, a NUL).
SHAPES = [
    [wait_step("a"), wait_step("b", "a")],
    [wait_step("a"), wait_step("a")],
    [wait_step("a", "c"), wait_step("b", "a"), wait_step("c", "b")],
    [wait_step("a", "a")],
    [wait_step("a"), wait_step("b", "a"), wait_step("c", "a", "b")],
    [{"id": "a", "type": "task", "task": {"queue": "work", "name": "record", "payload": {"deep": DEEP}}}],
    [{"id": "a", "type": "task", "task": {"queue": "work", "name": "record", "payload": {"n": "\x00"}}}],
]  # fmt: skip
shaped_steps = st.sampled_from(SHAPES)
workflow_steps = st.one_of(hostile_steps, shaped_steps)


def every_shape(test: Any) -> Any:
    """Each of SHAPES as an explicit example besides the drawn ones: whatever the draws, each
    outcome of the graph check (running, invalid) and of the task payload's check is met."""
    for shape in SHAPES:
        test = example(steps=shape, on_failure=None)(test)
    return test


# --- outcomes -------------------------------------------------------------------------------


def names_a_field(message: str) -> bool:
    return "spec." in message or "spec:" in message or "spec " in message


def refusal(error: ApiException) -> str:
    assert error.status in (400, 422), f"admission answered {error.status}: {error.body}"
    try:
        return str(json.loads(error.body).get("message", ""))
    except (TypeError, ValueError):
        return str(error.body)


def settled_job(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any] | None:
    """The job once the operator processed this generation: Ready, or Invalid naming a field."""
    obj: dict[str, Any] = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    status = obj.get("status") or {}
    if status.get("observedGeneration") != obj["metadata"]["generation"]:
        return None
    return obj


def settled_workflow(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any] | None:
    obj: dict[str, Any] = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, WORKFLOWS, name)
    status = obj.get("status") or {}
    invalid = condition(obj, "Invalid")
    return obj if status.get("phase") or (invalid and invalid["status"] == "True") else None


@dataclass
class Watched:
    fleet: OperatorFleet
    leader: Any
    canary: Canary

    def assert_unharmed(self) -> None:
        """The leader alive and leading, and the other namespace's canary fired every occurrence on time."""
        assert self.leader.alive and self.fleet.leader(timeout=10) is self.leader, (
            "the operator crashed or lost leadership:\n" + self.fleet.logs()
        )
        self.canary.assert_fired_on_time()


@pytest.fixture
def watched(cluster: KubeCluster, fleet: OperatorFleet, queue_dsn: str) -> Iterator[Watched]:
    """A running leader with the volume tier on (task steps are submitted), and a canary job in a
    namespace of its own that must fire on time through every example."""
    leader = fleet.start(queue={"dsn": queue_dsn})
    fleet.leader()
    canary = Canary.start(cluster)
    yield Watched(fleet, leader, canary)
    canary.remove()


SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


def outcome_of(
    cluster: KubeCluster, namespace: str, plural: str, body: dict[str, Any], *, running: str
) -> str:
    """Create `body`, and say how it ended: refused, invalid, or `running` (Ready, or started);
    failing the test when a refusal or an Invalid condition names no field. Deletes it after."""
    name = body["metadata"]["name"]
    try:
        cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)
    except ApiException as error:
        message = refusal(error)
        assert names_a_field(message), f"refused without naming a field: {message!r} for {body['spec']!r}"
        return "refused"
    settled = settled_job if plural == PLURAL else settled_workflow
    try:
        obj = wait_for(lambda: settled(cluster, namespace, name), timeout=30, what=f"{name} processed")
        invalid = condition(obj, "Invalid")
        if invalid and invalid["status"] == "True":
            assert invalid["message"] and (plural != PLURAL or "spec" in invalid["message"]), invalid
            return "invalid"
        if plural == PLURAL:
            ready = condition(obj, "Ready")
            assert ready and ready["status"] == "True", (body["spec"], obj.get("status"))
        return running
    finally:
        cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)


def test_hostile_scheduled_jobs_are_refused_or_settled_and_harm_nothing(
    cluster: KubeCluster, namespace: str, watched: Watched
) -> None:
    outcomes: Counter[str] = Counter()

    @SETTINGS
    @given(changes=job_changes)
    def one(changes: dict[str, Any]) -> None:
        spec = {"every": "1h", **changes}
        if "cron" in changes:
            spec.pop("every")
        body = job_body(f"fz-{uuid.uuid4().hex[:8]}", **spec)
        outcomes[outcome_of(cluster, namespace, PLURAL, body, running="ready")] += 1

    one()
    print(f"scheduled jobs: {dict(outcomes)}")
    assert outcomes["refused"] and outcomes["invalid"] and outcomes["ready"], outcomes
    watched.assert_unharmed()


def test_hostile_workflows_are_refused_or_settled_and_harm_nothing(
    cluster: KubeCluster, namespace: str, watched: Watched
) -> None:
    outcomes: Counter[str] = Counter()

    @SETTINGS
    @every_shape
    @given(steps=workflow_steps, on_failure=st.one_of(st.none(), st.sampled_from(["fail", "compensate"]), hostile_text))
    def one(steps: list[dict[str, Any]], on_failure: str | None) -> None:
        spec: dict[str, Any] = {"steps": steps}
        if on_failure is not None:
            spec["onFailure"] = on_failure
        name = f"fz-{uuid.uuid4().hex[:8]}"
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workflow", "metadata": {"name": name}, "spec": spec}
        outcomes[outcome_of(cluster, namespace, WORKFLOWS, body, running="running")] += 1

    one()
    print(f"workflows: {dict(outcomes)}")
    assert outcomes["refused"] and outcomes["invalid"] and outcomes["running"], outcomes
    watched.assert_unharmed()

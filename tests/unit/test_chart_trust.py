"""What the chart lets the operator do, and what it stops tenants from doing (invariant 12, Trust).

Covers, by rendering the chart with the real helm binary:
* the operator's permissions: every rule of every role bound to its ServiceAccount is within an
  allowlist (per namespace: the ClusterRole's, the release namespace's Role's, the freshness
  Roles'), the only role bound from outside the chart is system:auth-delegator, Secrets are
  reachable only in the release namespace, ConfigMaps only by `get` and as narrowly as
  rbac.freshnessConfigMaps says; and every ClusterRole rule in templates/rbac.yaml is commented
  with the feature that needs it;
* the NetworkPolicy: only the API port (from the configured peers) and the metrics port (from the
  monitoring namespaces) are admitted;
* the high-priority ValidatingAdmissionPolicy: what it matches (spec.priority, a Workflow's
  priority label, a task's priority), whom it exempts, where it binds; the operator's config
  carries the same namespaces for the HTTP API;
* the task-submit ValidatingAdmissionPolicy: a task job's writer must be able to submit; and the
  task-steps policies: so must the writer of a workflow, definition or workflowTemplate with task steps;
* the aggregated user roles: a TaskQueue's executions are the subresource taskqueues/executions;
* the Execution CRD: every spec field but the user's levers is immutable (a transition rule).

Their behaviour against a real API server is tests/integration/test_reserved_capacity.py and
tests/integration/test_http_access.py.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_packaging import (
    CHART,
    NAMESPACE,
    RELEASE,
    find,
    find_helm,
    render,
    run_helm,
    the_one,
)
from vigil.model import EXECUTION
from vigil.model.crdgen import crd_for
from vigil.model.execution import MESSAGE_SPEC_IMMUTABLE

Helm = tuple[Path, dict[str, str]]
Grant = tuple[str, str, str]  # (apiGroup, resource, verb)
SERVICE_ACCOUNT = RELEASE

VIGIL_READ = ("get", "list", "watch")


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """The helm binary and an environment that keeps its config and cache out of $HOME."""
    binary = find_helm()
    if binary is None or not os.access(binary, os.X_OK):
        pytest.fail(f"no helm binary (found {binary}): build it with `make binaries` or set HELM=/path/to/helm")
    home = tmp_path_factory.mktemp("helm-home")
    environment = dict(os.environ)
    for variable in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        environment[variable] = str(home / variable.lower())
    return binary, environment


def grants(group: str, resources: tuple[str, ...], verbs: tuple[str, ...]) -> set[Grant]:
    return {(group, resource, verb) for resource in resources for verb in verbs}


#: Everything the operator may do in every namespace (its ClusterRole), each with its reason in
#: templates/rbac.yaml.
CLUSTER_ALLOWLIST = (
    grants("vigil.dev", ("scheduledjobs", "workflows", "workflowdefinitions"), (*VIGIL_READ, "patch", "update"))
    | grants("vigil.dev", ("workflows",), ("create", "cancel", "delete"))
    | grants("vigil.dev", ("scheduledjobs/status", "workflows/status", "workflowdefinitions/status"), ("get", "patch", "update"))
    | grants("vigil.dev", ("executions",), (*VIGIL_READ, "create", "patch", "update", "delete"))
    | grants("vigil.dev", ("executions/status",), ("get", "patch", "update"))
    | grants("vigil.dev", ("taskqueues",), VIGIL_READ)
    | grants("vigil.dev", ("taskqueues/status",), ("get", "patch", "update"))
    | grants("", ("pods",), (*VIGIL_READ, "create", "delete", "patch"))
    | grants("", ("pods/log",), ("get",))
    | grants("", ("events",), ("create", "patch"))
    | grants("authorization.k8s.io", ("subjectaccessreviews",), ("create",))
    | grants("", ("configmaps",), ("get",))
)
#: What it may do in the release namespace only (its Role): leadership, buckets, the signing key.
RELEASE_NAMESPACE_ALLOWLIST = (
    grants("coordination.k8s.io", ("leases",), (*VIGIL_READ, "create", "update", "patch"))
    | grants("vigil.dev", ("schedulebuckets",), (*VIGIL_READ, "create", "update", "patch", "delete"))
    | grants("vigil.dev", ("schedulebuckets/status",), ("get", "update", "patch"))
    | grants("", ("secrets",), ("get", "create", "update"))
)
#: What it may do in a namespace rbac.freshnessConfigMaps.namespaces lists.
FRESHNESS_ALLOWLIST = grants("", ("configmaps",), ("get",))
#: Roles bound to the operator that the chart does not define (Kubernetes' own).
EXTERNAL_CLUSTER_ROLES = {"system:auth-delegator"}
#: Never, anywhere.
FORBIDDEN_VERBS = {"*", "escalate", "bind", "impersonate"}


def operator_bindings(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every ClusterRoleBinding and RoleBinding naming the operator's ServiceAccount."""
    return [
        obj
        for obj in objects
        if obj["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and any(
            s["kind"] == "ServiceAccount" and s["name"] == SERVICE_ACCOUNT and s["namespace"] == NAMESPACE
            for s in obj["subjects"]
        )
    ]


def granted(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The operator's rules by where they apply ("*" for every namespace), from the rendered
    roles its bindings name (external roles left out: they are checked by name)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for binding in operator_bindings(objects):
        ref = binding["roleRef"]
        if ref["name"] in EXTERNAL_CLUSTER_ROLES:
            assert binding["kind"] == "ClusterRoleBinding" and ref["kind"] == "ClusterRole"
            continue
        where = "*" if binding["kind"] == "ClusterRoleBinding" else binding["metadata"]["namespace"]
        (role,) = [
            obj for obj in find(objects, ref["kind"], ref["name"])
            if ref["kind"] == "ClusterRole" or obj["metadata"]["namespace"] == where
        ]  # fmt: skip
        if ref["kind"] != "Role":
            assert binding["kind"] == "ClusterRoleBinding", "a ClusterRole bound per namespace: bind a Role instead"
        out.setdefault(where, []).extend(role["rules"])
    return out


def triples(rules: list[dict[str, Any]]) -> set[Grant]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def outside(where: str, rules: list[dict[str, Any]], *, freshness: set[str]) -> set[Grant]:
    allowed = (
        CLUSTER_ALLOWLIST if where == "*"
        else RELEASE_NAMESPACE_ALLOWLIST if where == NAMESPACE
        else FRESHNESS_ALLOWLIST if where in freshness
        else set()
    )  # fmt: skip
    return triples(rules) - allowed


@pytest.mark.parametrize(
    ("values", "freshness"),
    [
        pytest.param((), set(), id="defaults"),
        pytest.param(
            ("--set", "rbac.freshnessConfigMaps.namespaces={billing,media}", "--set", "rbac.freshnessConfigMaps.names={job-outputs}"),
            {"billing", "media"},
            id="freshness-scoped",
        ),
        pytest.param(("--set", "rbac.freshnessConfigMaps.enabled=false"), set(), id="freshness-off"),
        pytest.param(("--set", "config.watchdog.mode=separate"), set(), id="separate-watchdog"),
    ],
)
def test_the_operator_is_granted_nothing_beyond_the_allowlist(
    helm: Helm, values: tuple[str, ...], freshness: set[str]
) -> None:
    objects = render(helm, *values)
    by_where = granted(objects)
    assert set(by_where) == {"*", NAMESPACE} | freshness
    for where, rules in by_where.items():
        assert not outside(where, rules, freshness=freshness), f"{where}: {sorted(outside(where, rules, freshness=freshness))}"
        assert not {verb for rule in rules for verb in rule["verbs"]} & FORBIDDEN_VERBS
        assert not any("*" in rule["apiGroups"] or "*" in rule["resources"] for rule in rules)
    external = {b["roleRef"]["name"] for b in operator_bindings(objects)} - {
        r["metadata"]["name"] for r in find(objects, "ClusterRole") + find(objects, "Role")
    }
    assert external == EXTERNAL_CLUSTER_ROLES


def test_secrets_only_in_the_release_namespace(helm: Helm) -> None:
    by_where = granted(render(helm))
    assert not any(resource == "secrets" for _, resource, _ in triples(by_where["*"]))
    assert any(resource == "secrets" for _, resource, _ in triples(by_where[NAMESPACE]))


def test_the_queue_credentials_add_one_secret_write_bounded_by_a_policy(helm: Helm) -> None:
    """queue.tenantRoles (on with the volume tier): the operator creates Secrets in any namespace,
    which RBAC cannot limit by name, so the chart renders with it the policy that lets it write
    only the Opaque Secret vigil-queue-credentials there; read, replace and delete are by that name."""
    objects = render(helm, "--set", "queue.enabled=true", "--set", "queue.existingSecret=q")
    cluster_wide = granted(objects)["*"]
    assert outside("*", cluster_wide, freshness=set()) == {
        ("", "secrets", "create"), ("", "secrets", "get"), ("", "secrets", "update"), ("", "secrets", "delete"),
    }
    named = [rule for rule in cluster_wide if "secrets" in rule["resources"] and rule["verbs"] != ["create"]]
    assert [rule.get("resourceNames") for rule in named] == [["vigil-queue-credentials"]]
    assert policies(objects) >= {f"{RELEASE}-queue-credentials"}
    off = render(helm, "--set", "queue.enabled=true", "--set", "queue.existingSecret=q",
                 "--set", "queue.tenantRoles.enabled=false")  # fmt: skip
    assert not outside("*", granted(off)["*"], freshness=set())
    assert f"{RELEASE}-queue-credentials" not in policies(off)


def policies(objects: list[dict[str, Any]]) -> set[str]:
    return {policy["metadata"]["name"] for policy in find(objects, "ValidatingAdmissionPolicy")}


def test_configmap_reads_are_get_only_and_scoped_as_the_values_say(helm: Helm) -> None:
    def configmap_rules(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [rule for rule in rules if "configmaps" in rule["resources"]]

    default = granted(render(helm))
    assert [rule["verbs"] for rule in configmap_rules(default["*"])] == [["get"]]
    assert "resourceNames" not in configmap_rules(default["*"])[0]
    scoped = granted(render(
        helm, "--set", "rbac.freshnessConfigMaps.namespaces={billing}", "--set", "rbac.freshnessConfigMaps.names={job-outputs}",
    ))  # fmt: skip
    assert configmap_rules(scoped["*"]) == []
    assert configmap_rules(scoped["billing"]) == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["job-outputs"], "verbs": ["get"]}
    ]
    named = granted(render(helm, "--set", "rbac.freshnessConfigMaps.names={job-outputs}"))
    assert configmap_rules(named["*"])[0]["resourceNames"] == ["job-outputs"]
    off = granted(render(helm, "--set", "rbac.freshnessConfigMaps.enabled=false"))
    assert configmap_rules(off["*"]) == []


def test_every_cluster_wide_rule_says_what_needs_it() -> None:
    """In templates/rbac.yaml, each rule of the ClusterRole is preceded by a comment (template
    actions between the comment and the rule are skipped)."""
    text = (CHART / "templates" / "rbac.yaml").read_text(encoding="utf-8")
    cluster_role = re.search(r"^kind: ClusterRole\n(.*?)^---", text, flags=re.S | re.M)
    assert cluster_role is not None
    lines = cluster_role.group(1).splitlines()
    starts = [index for index, line in enumerate(lines) if line.strip().startswith("- apiGroups:")]
    assert len(starts) >= 10
    for index in starts:
        previous = next(
            line.strip() for line in reversed(lines[:index]) if line.strip() and not line.strip().startswith("{{")
        )
        assert previous.startswith("#"), f"rule at line {index} of the ClusterRole has no comment: {lines[index]}"


def test_the_http_api_may_review_tokens_and_access(helm: Helm) -> None:
    objects = render(helm)
    binding = the_one(objects, "ClusterRoleBinding", f"{RELEASE}-auth-delegator")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator",
    }  # fmt: skip
    assert binding in operator_bindings(objects)


# --------------------------------------------------------------------------------------------
# The NetworkPolicy


def ingress_ports(policy: dict[str, Any]) -> dict[int, list[dict[str, Any]]]:
    return {rule["ports"][0]["port"]: rule.get("from") for rule in policy["spec"]["ingress"]}


def test_the_network_policy_admits_only_the_api_and_the_monitoring_namespace(helm: Helm) -> None:
    policy = the_one(render(helm), "NetworkPolicy", RELEASE)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert ingress_ports(policy) == {
        8080: [{"namespaceSelector": {}}],
        9090: [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
    }
    selected = {e["key"]: e["values"] for e in policy["spec"]["podSelector"]["matchExpressions"]}
    assert selected["app.kubernetes.io/component"] == ["operator", "watchdog"]
    assert selected["app.kubernetes.io/instance"] == [RELEASE]


def test_the_network_policy_follows_its_values(helm: Helm, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        "networkPolicy:\n  api:\n    from: []\n  metrics:\n    from:\n"
        "      - {namespaceSelector: {matchLabels: {team: obs}}, podSelector: {matchLabels: {app: prometheus}}}\n"
    )
    policy = the_one(render(helm, "-f", str(values)), "NetworkPolicy", RELEASE)
    assert ingress_ports(policy) == {
        9090: [{"namespaceSelector": {"matchLabels": {"team": "obs"}}, "podSelector": {"matchLabels": {"app": "prometheus"}}}],
    }
    assert find(render(helm, "--set", "networkPolicy.enabled=false"), "NetworkPolicy") == []
    closed = the_one(
        render(helm, "--set", "networkPolicy.api.from=null", "--set", "networkPolicy.metrics.from=null"),
        "NetworkPolicy",
        RELEASE,
    )
    assert closed["spec"]["ingress"] == []
    refused = run_helm(helm, "template", RELEASE, str(CHART), "--set", "networkPolicy.metrics.form=x")
    assert refused.returncode != 0 and "form" in refused.stderr


# --------------------------------------------------------------------------------------------
# The high-priority admission policy


def test_high_priority_is_refused_everywhere_by_default_except_to_the_operator(helm: Helm) -> None:
    objects = render(helm)
    policy = the_one(objects, "ValidatingAdmissionPolicy", f"{RELEASE}-high-priority")
    binding = the_one(objects, "ValidatingAdmissionPolicyBinding", f"{RELEASE}-high-priority")
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["vigil.dev"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["scheduledjobs", "executions", "workflows"],  # not their status
        }
    ]
    conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
    assert conditions["not-the-operator"] == f'request.userInfo.username != "system:serviceaccount:{NAMESPACE}:{RELEASE}"'
    assert "oldObject.spec.priority != 'high'" in conditions["becomes-high"]
    assert "object.metadata.labels['vigil.dev/priority'] == 'high'" in conditions["becomes-high"]
    assert "object.spec.task.priority < 0" in conditions["becomes-high"]
    fields = [v["message"].split(":")[0] for v in spec["validations"]]
    assert fields == ["spec.priority", "metadata.labels[vigil.dev/priority]", "spec.task.priority"]
    for validation in spec["validations"]:
        field = validation["message"].split(":")[0]
        assert validation["messageExpression"].startswith(f'"{field}: ') and validation["reason"] == "Forbidden"
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}


def test_high_priority_is_allowed_in_the_listed_namespaces(helm: Helm) -> None:
    objects = render(helm, "--set", "admission.highPriority.namespaces={payments,incidents}")
    binding = the_one(objects, "ValidatingAdmissionPolicyBinding", f"{RELEASE}-high-priority")
    assert binding["spec"]["matchResources"] == {
        "namespaceSelector": {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["payments", "incidents"]}
            ]
        }
    }
    off = render(helm, "--set", "admission.highPriority.enabled=false")
    assert find(off, "ValidatingAdmissionPolicy", f"{RELEASE}-high-priority") == []


def queue_config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    config_map = the_one(objects, "ConfigMap", f"{RELEASE}-config")
    queue: dict[str, Any] = yaml.safe_load(config_map["data"]["config.yaml"])["queue"]
    return queue


def test_the_http_api_gets_the_same_high_priority_namespaces(helm: Helm) -> None:
    on = ("--set", "queue.enabled=true", "--set", "queue.dsn=postgresql://vigil@db/vigil")
    listed = render(helm, *on, "--set", "admission.highPriority.namespaces={payments}")
    assert queue_config(listed)["highPriorityNamespaces"] == ["payments"]
    assert queue_config(render(helm, *on))["highPriorityNamespaces"] == []
    off = render(helm, *on, "--set", "admission.highPriority.enabled=false")
    assert "highPriorityNamespaces" not in queue_config(off)


# --------------------------------------------------------------------------------------------
# The task-submit admission policy and the roles for a TaskQueue's executions


def test_a_task_jobs_writer_must_be_able_to_submit_to_its_queue(helm: Helm) -> None:
    objects = render(helm)
    policy = the_one(objects, "ValidatingAdmissionPolicy", f"{RELEASE}-task-submit")
    binding = the_one(objects, "ValidatingAdmissionPolicyBinding", f"{RELEASE}-task-submit")
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"][0]["resources"] == ["scheduledjobs"]
    conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
    assert conditions["not-the-operator"] == f'request.userInfo.username != "system:serviceaccount:{NAMESPACE}:{RELEASE}"'
    assert conditions["has-a-task"] == "has(object.spec) && has(object.spec.task)"
    check, tenant = (" ".join(v["expression"].split()) for v in spec["validations"])
    assert check == (
        "authorizer.group('vigil.dev').resource('taskqueues').subresource('executions') "
        ".namespace(request.namespace).name(object.spec.task.queue).check('create').allowed()"
    )
    assert "object.spec.task.tenant == request.namespace" in tenant
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    off = render(helm, "--set", "admission.taskSubmit.enabled=false")
    assert find(off, "ValidatingAdmissionPolicy", f"{RELEASE}-task-submit") == []


@pytest.mark.parametrize(
    ("resource", "steps"),
    [
        pytest.param("workflows", "object.spec.steps", id="a-workflow's-steps"),
        pytest.param("workflowdefinitions", "v.steps", id="each-definition-version's-steps"),
        pytest.param("scheduledjobs", "object.spec.workflowTemplate.steps", id="a-job's-workflowTemplate-steps"),
    ],
)
def test_a_workflows_task_steps_need_their_writer_to_submit_to_each_queue(
    helm: Helm, resource: str, steps: str
) -> None:
    name = f"{RELEASE}-task-steps-{resource}"
    objects = render(helm)
    policy = the_one(objects, "ValidatingAdmissionPolicy", name)
    binding = the_one(objects, "ValidatingAdmissionPolicyBinding", name)
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"][0]["resources"] == [resource]
    conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
    assert conditions["not-the-operator"] == f'request.userInfo.username != "system:serviceaccount:{NAMESPACE}:{RELEASE}"'
    assert "oldObject == null" in conditions["steps-written"]
    [check] = (" ".join(v["expression"].split()) for v in spec["validations"])
    assert f"{steps}.all(s, !has(s.task) || authorizer.group('vigil.dev').resource('taskqueues')" in check
    assert ".namespace(request.namespace).name(s.task.queue).check('create').allowed())" in check
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    off = render(helm, "--set", "admission.taskSubmit.enabled=false")
    assert find(off, "ValidatingAdmissionPolicy", name) == []


def test_edit_acts_on_a_queues_executions_and_view_reads_them(helm: Helm) -> None:
    objects = render(helm)

    def rules(role: str) -> set[Grant]:
        found = the_one(objects, "ClusterRole", f"{RELEASE}-{role}")
        return {
            (group, resource, verb)
            for rule in found["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }

    executions = {("vigil.dev", "taskqueues/executions", verb) for verb in ("create", "update", "delete", "get")}
    assert executions & rules("edit") == executions - {("vigil.dev", "taskqueues/executions", "get")}
    assert executions & rules("view") == {("vigil.dev", "taskqueues/executions", "get")}


# --------------------------------------------------------------------------------------------
# The Execution CRD


def test_an_executions_spec_is_immutable_but_for_the_levers() -> None:
    spec = crd_for(EXECUTION)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = {name: [rule["rule"] for rule in prop.get("x-kubernetes-validations", [])] for name, prop in spec["properties"].items()}
    levers = {"cancel", "cancelReason", "retryRequests"}
    for name, found in rules.items():
        if name not in levers:
            assert "self == oldSelf" in found, f"spec.{name} is not immutable"
    assert all("self == oldSelf" not in rules[name] for name in levers)
    assert rules["retryRequests"] == ["self >= oldSelf"]
    messages = {rule["message"] for prop in spec["properties"].values() for rule in prop.get("x-kubernetes-validations", [])}
    assert MESSAGE_SPEC_IMMUTABLE in messages

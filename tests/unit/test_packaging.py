"""Packaging: the Helm chart, its values schema, the example manifests and the plain install.

Covers, without a cluster:
* values.yaml and values.schema.json agree key for key, every key is documented, and every object
  in the schema rejects unknown keys (so a misspelt value fails the install);
* the examples are valid Vigil resources (checked by the pydantic models that generate the CRDs)
  whose shell commands parse;
* the chart's CRD copy (helm/vigil/files/crds) equals the generated crds/.

The rendering checks run the real helm binary, found through $HELM or the binary cache that
`make binaries` fills, and fail with a clear message when there is none: helm lint, the schema
rejecting a misspelt value, what the default render contains, the optional pieces, and that
manifests/install.yaml is what e2e/cluster/render-install.sh produces today.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import vigil.model
from vigil.model.common import ResourceKind
from vigil.model.durations import DURATION_PATTERN
from vigil.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "vigil"
VALUES = CHART / "values.yaml"
SCHEMA = CHART / "values.schema.json"
CHART_CRDS = CHART / "files" / "crds"
GENERATED_CRDS = ROOT / "crds"
EXAMPLES = ROOT / "manifests" / "examples"
INSTALL_MANIFEST = ROOT / "manifests" / "install.yaml"
RENDER_SCRIPT = ROOT / "e2e" / "cluster" / "render-install.sh"

RELEASE = "vigil"
NAMESPACE = "vigil-system"
HELM_TIMEOUT_SECONDS = 60

#: Schema objects that pass Kubernetes API objects through verbatim (the API server checks them),
#: and Helm's `global`, which a parent chart may fill when Vigil is a subchart.
PASSTHROUGH_PATHS = frozenset(
    {"global", "affinity.nodeAffinity", "affinity.podAffinity", "affinity.podAntiAffinity"}
)

#: The operator's config file with the chart's defaults: exactly the shape the operator reads.
DEFAULT_OPERATOR_CONFIG: dict[str, Any] = {
    "namespace": NAMESPACE,
    "leaderElection": {
        "leaseName": "vigil-leader",
        "leaseDurationSeconds": 15,
        "renewPeriodSeconds": 5,
    },
    "trigger": {"tickMilliseconds": 250, "shards": 4, "maxOccurrencesPerBucket": 64, "workers": 32},
    "dispatch": {"maxRunning": 100, "reservedHigh": 10, "perNamespaceMax": 50, "runningAfterSeconds": 5, "pendingLimitSeconds": 300, "imagePullLimitSeconds": 60},
    "workflows": {"workers": 4, "rescanSeconds": 300, "ttlAfterFinished": "24h"},
    "approvals": {
        "enabled": True,
        "notifier": {"url": "", "timeoutSeconds": 5, "retrySeconds": 30},
        "keySecret": "vigil-approval-key",
        "keyRefreshSeconds": 60,
        "keyRotation": {"period": "720h", "overlap": "24h"},
        "recheckSeconds": 600,
        "defaultTokenLifetime": "24h",
        "baseURL": "",
    },
    "history": {"dsn": "sqlite:////var/lib/vigil/history.db", "retentionDays": 30, "logTailBytes": 65536, "logSettleSeconds": 300},
    "watchdog": {
        "enabled": True,
        "intervalSeconds": 30,
        "suspendedMaxAge": "168h",
        "mode": "operator",
        "leaseName": "vigil-watchdog",
    },
    "audit": {"intervalSeconds": 300, "repair": False, "chainGraceSeconds": 120},
    "http": {
        "metricsPort": 9090,
        "apiPort": 8080,
        "healthPort": 8081,
        "workers": 8,
        "requestTimeoutSeconds": 30,
        "readTimeoutSeconds": 10,
        "idleTimeoutSeconds": 5,
        "connectionsPerPeer": 64,
        "authCacheSeconds": 10,
        "tokenAudiences": ["vigil"],
        "tls": {"certFile": "/etc/vigil-tls/tls.crt", "keyFile": "/etc/vigil-tls/tls.key"},
    },
    "logging": {"format": "text", "level": "INFO"},
}

#: Each example file, the kind and name it must declare.
EXAMPLE_OBJECTS = {
    "reconcile-daily.yaml": ("ScheduledJob", "reconcile-daily"),
    "video-publish.yaml": ("Workflow", "video-publish"),
    "every-minute.yaml": ("ScheduledJob", "heartbeat"),
    "task-queue.yaml": ("TaskQueue", "billing"),
}

#: The examples that run pods (a TaskQueue declares a queue; its workers are not in it).
POD_EXAMPLES = sorted(name for name, (kind, _) in EXAMPLE_OBJECTS.items() if kind != "TaskQueue")

KEEP_ANNOTATION = "helm.sh/resource-policy"


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def load_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA.read_text(encoding="utf-8"))
    return schema


# --------------------------------------------------------------------------------------------
# values.yaml and values.schema.json


def object_schemas(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object-typed schema node with its dotted path (array items end in `[]`)."""
    if schema.get("type") == "object":
        yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from object_schemas(child, f"{path}.{name}" if path else name)
    if isinstance(schema.get("items"), dict):
        yield from object_schemas(schema["items"], f"{path}[]")


def undeclared_values(values: dict[str, Any], schema: dict[str, Any], path: str = "") -> list[str]:
    """Paths of values.yaml keys the schema does not declare."""
    missing: list[str] = []
    properties = schema.get("properties", {})
    for key, value in values.items():
        where = f"{path}.{key}" if path else key
        if key in properties:
            if isinstance(value, dict):
                missing += undeclared_values(value, properties[key], where)
        elif not isinstance(schema.get("additionalProperties"), dict):
            missing.append(where)
    return missing


def undocumented_schema_keys(
    values: dict[str, Any], schema: dict[str, Any], path: str = ""
) -> list[str]:
    """Paths of schema properties with no default in values.yaml (so no comment documents them)."""
    missing: list[str] = []
    for key, child in schema.get("properties", {}).items():
        where = f"{path}.{key}" if path else key
        if key not in values:
            if where not in PASSTHROUGH_PATHS:
                missing.append(where)
        elif isinstance(values[key], dict) and "properties" in child:
            missing += undocumented_schema_keys(values[key], child, where)
    return missing


def keys_by_line(text: str) -> Iterator[tuple[int, str]]:
    """(line index, dotted path) of every mapping key in a block-style YAML file."""
    stack: list[tuple[int, str]] = []
    for index, line in enumerate(text.splitlines()):
        match = re.match(r"^( *)([A-Za-z][A-Za-z0-9_]*):", line)
        if not match:
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match.group(2)))
        yield index, ".".join(name for _, name in stack)


def has_doc_comment(lines: list[str], index: int) -> bool:
    """Whether the comment block right above line `index` contains a `# --` doc comment."""
    above = index - 1
    while above >= 0 and lines[above].strip().startswith("#"):
        if lines[above].strip().startswith("# --"):
            return True
        above -= 1
    return False


def leaf_paths(schema: dict[str, Any], path: str = "") -> Iterator[str]:
    """Schema properties a user sets directly: everything but objects with their own properties."""
    for key, child in schema.get("properties", {}).items():
        where = f"{path}.{key}" if path else key
        if "properties" in child:
            yield from leaf_paths(child, where)
        else:
            yield where


def test_every_values_key_is_declared_in_the_schema() -> None:
    assert undeclared_values(load_yaml(VALUES), load_schema()) == []


def test_every_schema_key_has_a_default_in_values() -> None:
    assert undocumented_schema_keys(load_yaml(VALUES), load_schema()) == []


def test_every_schema_object_rejects_unknown_keys() -> None:
    loose = []
    for path, node in object_schemas(load_schema()):
        extra = node.get("additionalProperties")
        if path in PASSTHROUGH_PATHS:
            continue
        if "properties" in node and extra is not False:
            loose.append(
                f"{path or '<root>'}: has properties but additionalProperties is {extra!r}"
            )
        if "properties" not in node and not isinstance(extra, dict):
            loose.append(f"{path}: a map must type its values with an additionalProperties schema")
    assert loose == []


def test_every_settable_value_has_a_doc_comment() -> None:
    text = VALUES.read_text(encoding="utf-8")
    lines = text.splitlines()
    line_of = {path: index for index, path in keys_by_line(text)}
    undocumented = [
        path
        for path in leaf_paths(load_schema())
        if path in line_of and not has_doc_comment(lines, line_of[path])
    ]
    assert undocumented == []


def test_operator_durations_follow_the_model_grammar() -> None:
    watchdog = load_schema()["properties"]["config"]["properties"]["watchdog"]
    assert watchdog["properties"]["suspendedMaxAge"]["pattern"] == DURATION_PATTERN


# --------------------------------------------------------------------------------------------
# Examples


def resource_kinds() -> dict[str, ResourceKind]:
    """Every ResourceKind the model package defines, by kind."""
    kinds: dict[str, ResourceKind] = {}
    for module_info in pkgutil.iter_modules(vigil.model.__path__, f"{vigil.model.__name__}."):
        module = importlib.import_module(module_info.name)
        for value in vars(module).values():
            if isinstance(value, ResourceKind):
                kinds[value.kind] = value
    return kinds


def example_commands(document: dict[str, Any]) -> Iterator[list[str]]:
    """The container commands of every pod template in an example resource."""
    spec = document["spec"]
    templates = [spec.get("template")]
    for step in spec.get("steps", []):
        templates += [step.get("template"), step.get("compensate")]
    for template in templates:
        for container in (template or {}).get("spec", {}).get("containers", []):
            if "command" in container:
                yield container["command"]


@pytest.mark.parametrize("filename", sorted(EXAMPLE_OBJECTS))
def test_example_is_a_valid_vigil_resource(filename: str) -> None:
    documents = list(yaml.safe_load_all((EXAMPLES / filename).read_text(encoding="utf-8")))
    kind, name = EXAMPLE_OBJECTS[filename]
    assert len(documents) == 1
    document = documents[0]
    assert document["apiVersion"] == "vigil.dev/v1alpha1"
    assert (document["kind"], document["metadata"]["name"]) == (kind, name)
    kinds = resource_kinds()
    assert kind in kinds, f"vigil.model defines no ResourceKind for {kind}"
    kinds[kind].spec_model.model_validate(document["spec"])


def test_the_examples_directory_holds_exactly_the_known_examples() -> None:
    assert sorted(path.name for path in EXAMPLES.glob("*.yaml")) == sorted(EXAMPLE_OBJECTS)


@pytest.mark.parametrize("filename", POD_EXAMPLES)
def test_example_shell_commands_parse(filename: str) -> None:
    document = load_yaml(EXAMPLES / filename)
    commands = list(example_commands(document))
    assert commands, f"{filename} has no container command"
    for command in commands:
        if command[:2] == ["sh", "-c"]:
            result = subprocess.run(
                ["sh", "-n", "-c", command[2]], capture_output=True, text=True, check=False
            )
            assert result.returncode == 0, f"{filename}: {command[2]!r}: {result.stderr}"


# --------------------------------------------------------------------------------------------
# The chart's CRD copy


def test_chart_crds_equal_the_generated_crds() -> None:
    def contents(folder: Path) -> dict[str, bytes]:
        return {path.name: path.read_bytes() for path in sorted(folder.glob("*.yaml"))}

    generated = contents(GENERATED_CRDS)
    assert contents(CHART_CRDS) == generated, (
        "helm/vigil/files/crds differs from crds/: run `make crds`"
    )


# --------------------------------------------------------------------------------------------
# Rendering with helm


def find_helm() -> Path | None:
    """$HELM, else the newest helm in the binary cache, else helm on PATH."""
    if os.environ.get("HELM"):
        return Path(os.environ["HELM"])
    cache = Path(os.environ.get("VIGIL_CACHE", Path.home() / ".cache" / "vigil"))
    cached = sorted(cache.glob("*/bin/helm"), key=lambda path: path.stat().st_mtime)
    if cached:
        return cached[-1]
    on_path = shutil.which("helm")
    return Path(on_path) if on_path else None


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """The helm binary and an environment that keeps its config and cache out of $HOME."""
    binary = find_helm()
    if binary is None or not os.access(binary, os.X_OK):
        pytest.fail(
            f"no helm binary (looked at $HELM, ~/.cache/vigil/*/bin/helm and PATH; found {binary}): "
            "build it with `make binaries` or set HELM=/path/to/helm"
        )
    home = tmp_path_factory.mktemp("helm-home")
    environment = dict(os.environ)
    for variable in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        environment[variable] = str(home / variable.lower())
    yield binary, environment


def run_helm(helm: tuple[Path, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    binary, environment = helm
    return subprocess.run(
        [str(binary), *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=HELM_TIMEOUT_SECONDS,
        check=False,
    )


def render(
    helm: tuple[Path, dict[str, str]], *args: str, chart: Path = CHART
) -> list[dict[str, Any]]:
    """The chart rendered as the default release, as a list of objects."""
    result = run_helm(helm, "template", RELEASE, str(chart), "--namespace", NAMESPACE, *args)
    assert result.returncode == 0, result.stderr
    return [document for document in yaml.safe_load_all(result.stdout) if document]


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        item
        for item in objects
        if item["kind"] == kind and (name is None or item["metadata"]["name"] == name)
    ]


def the_one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = find(objects, kind, name)
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def operator_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = the_one(objects, "Deployment", RELEASE)
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def rules_of(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) triples a role grants."""
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_helm_lint_passes(helm: tuple[Path, dict[str, str]]) -> None:
    result = run_helm(helm, "lint", str(CHART), "--strict", "--namespace", NAMESPACE)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("command", ["lint", "template"])
def test_a_misspelt_value_fails_on_the_schema(
    helm: tuple[Path, dict[str, str]], command: str
) -> None:
    args = [command, str(CHART)] if command == "lint" else [command, RELEASE, str(CHART)]
    result = run_helm(helm, *args, "--set", "replicaCont=3")
    assert result.returncode != 0
    assert "replicaCont" in result.stdout + result.stderr


def test_a_misspelt_nested_value_fails_on_the_schema(helm: tuple[Path, dict[str, str]]) -> None:
    result = run_helm(helm, "template", RELEASE, str(CHART), "--set", "config.trigger.shard=8")
    assert result.returncode != 0
    assert "shard" in result.stderr


@pytest.mark.parametrize(
    ("value", "named"),
    [
        pytest.param("postgresql.enabled=maybe", "/postgresql/enabled", id="postgresql-enabled-not-true-false-auto"),
        pytest.param("admission.highPriority.namespaces=billing", "/admission/highPriority/namespaces", id="namespaces-not-a-list"),
        pytest.param("networkPolicy.enabled=yes", "/networkPolicy/enabled", id="network-policy-not-a-boolean"),
        pytest.param("uninstall.stopOperatorFirst=later", "/uninstall/stopOperatorFirst", id="uninstall-hook-not-a-boolean"),
        pytest.param("config.approvals.notifier.url=chat-bridge", "/config/approvals/notifier/url", id="notifier-without-scheme"),
        pytest.param("config.workflows.ttlAfterFinished=1 day", "/config/workflows/ttlAfterFinished", id="workflow-ttl-not-a-duration"),
        pytest.param("queue.shards=0", "/queue/shards", id="no-queue-shards"),
        pytest.param("queue.shards=257", "/queue/shards", id="too-many-queue-shards"),
        pytest.param("queue.statusIntervalSeconds=0", "/queue/statusIntervalSeconds", id="queue-status-interval-zero"),
        pytest.param("queue.attemptsRetentionDays=0", "/queue/attemptsRetentionDays", id="queue-attempt-days-zero"),
        pytest.param("queue.finishedRetentionDays=0", "/queue/finishedRetentionDays", id="queue-finished-days-zero"),
        pytest.param("queue.quota.maxReadyExecutions=0", "/queue/quota/maxReadyExecutions", id="queue-quota-zero"),
        pytest.param("queue.quota.maxReadyExecutons=5", "/queue/quota", id="queue-quota-misspelt"),
        pytest.param("queue.dsn=postgresql+psycopg://u@db/q", "/queue/dsn", id="queue-dsn-a-sqlalchemy-url"),
        pytest.param("queue.useHistoryDatabase=yes", "/queue/useHistoryDatabase", id="use-history-not-a-boolean"),
        pytest.param("workers.example.queue=orders", "/workers/example/queue", id="worker-queue-without-namespace"),
        pytest.param("workers.example.tasks={my-app.tasks}", "/workers/example/tasks/0", id="worker-tasks-not-a-module"),
        pytest.param("workers.example.concurrency=0", "/workers/example/concurrency", id="worker-concurrency-zero"),
        pytest.param("workers.example.drainTimeoutSeconds=0", "/workers/example/drainTimeoutSeconds", id="worker-no-drain"),
    ],
)
def test_a_value_of_the_wrong_kind_fails_on_the_schema_naming_it(
    helm: tuple[Path, dict[str, str]], value: str, named: str
) -> None:
    result = run_helm(helm, "template", RELEASE, str(CHART), "--set", value)
    assert result.returncode != 0
    assert named in result.stderr, result.stderr


def test_install_manifest_is_current(helm: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    binary, environment = helm
    rendered = tmp_path / "install.yaml"
    result = subprocess.run(
        [str(RENDER_SCRIPT), str(rendered)],
        capture_output=True,
        text=True,
        env={**environment, "HELM": str(binary)},
        timeout=HELM_TIMEOUT_SECONDS,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert INSTALL_MANIFEST.read_text(encoding="utf-8") == rendered.read_text(encoding="utf-8"), (
        "manifests/install.yaml is stale: run e2e/cluster/render-install.sh (or make crds)"
    )


def test_install_manifest_starts_with_its_namespace() -> None:
    objects = [
        document
        for document in yaml.safe_load_all(INSTALL_MANIFEST.read_text(encoding="utf-8"))
        if document
    ]
    assert (objects[0]["kind"], objects[0]["metadata"]["name"]) == ("Namespace", NAMESPACE)
    namespaced = [item for item in objects[1:] if "namespace" in item["metadata"]]
    assert namespaced and all(item["metadata"]["namespace"] == NAMESPACE for item in namespaced)


def test_default_config_file_has_exactly_the_operator_shape(
    helm: tuple[Path, dict[str, str]],
) -> None:
    config_map = the_one(render(helm), "ConfigMap", f"{RELEASE}-config")
    rendered = yaml.safe_load(config_map["data"]["config.yaml"])
    assert rendered == DEFAULT_OPERATOR_CONFIG
    Settings.model_validate(rendered)  # the operator accepts exactly what the chart writes


def test_operator_runs_hardened_with_its_ports_and_probes(
    helm: tuple[Path, dict[str, str]],
) -> None:
    objects = render(helm)
    deployment = the_one(objects, "Deployment", RELEASE)
    pod = deployment["spec"]["template"]["spec"]
    container = operator_container(objects)
    assert deployment["spec"]["replicas"] == 2
    assert [container["command"], container["args"]] == [
        ["vigil"],
        ["operator", "--config", "/etc/vigil/config.yaml"],
    ]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert {port["name"]: port["containerPort"] for port in container["ports"]} == {
        "http": 8080,
        "health": 8081,
        "metrics": 9090,
    }
    # the probes on a listener of their own, which no client of the API can starve (vigil/probes.py)
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    # Two replicas share the history in the bundled PostgreSQL (postgresql.enabled: auto).
    assert [variable["name"] for variable in container["env"]] == ["POD_NAME", "POD_NAMESPACE", "VIGIL_HISTORY_DSN"]
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    assert mounts == {"/etc/vigil": "config", "/tmp": "tmp", "/var/lib/vigil": "history", "/etc/vigil-tls": "api-tls"}
    anti_affinity = pod["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert anti_affinity[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"


def test_default_render_has_no_optional_integrations(helm: tuple[Path, dict[str, str]]) -> None:
    kinds = {item["kind"] for item in render(helm)}
    assert kinds.isdisjoint({"ServiceMonitor", "PrometheusRule"})


@pytest.mark.parametrize(
    ("values", "bundled"),
    [
        pytest.param((), True, id="two replicas by default: one shared PostgreSQL"),
        pytest.param(("replicaCount=1",), False, id="one replica: its SQLite file"),
        pytest.param(("replicaCount=3", "history.existingSecret=dsn"), False, id="an external database"),
        pytest.param(("replicaCount=1", "postgresql.enabled=true"), True, id="asked for"),
    ],
)
def test_the_default_history_survives_a_failover(
    helm: tuple[Path, dict[str, str]], values: tuple[str, ...], bundled: bool
) -> None:
    objects = render(helm, *(arg for value in values for arg in ("--set", value)))
    assert bool(find(objects, "StatefulSet")) is bundled
    env = {variable["name"] for variable in operator_container(objects)["env"]}
    assert ("VIGIL_HISTORY_DSN" in env) is (bundled or "history.existingSecret=dsn" in values)


def test_replicas_with_a_per_pod_history_are_refused(helm: tuple[Path, dict[str, str]]) -> None:
    result = run_helm(helm, "template", RELEASE, str(CHART), "--set", "postgresql.enabled=false")
    assert result.returncode != 0
    assert "with replicaCount > 1 every replica must write one shared history" in result.stderr


def test_service_monitor_needs_the_prometheus_operator_api(
    helm: tuple[Path, dict[str, str]],
) -> None:
    enabled = ("--set", "metrics.serviceMonitor.enabled=true")
    assert find(render(helm, *enabled), "ServiceMonitor") == []
    monitor = the_one(
        render(helm, *enabled, "--api-versions", "monitoring.coreos.com/v1"), "ServiceMonitor"
    )
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


def test_prometheus_rule_needs_the_prometheus_operator_api(
    helm: tuple[Path, dict[str, str]],
) -> None:
    enabled = ("--set", "prometheusRule.enabled=true", "--set", "prometheusRule.labels.release=kps")
    assert find(render(helm, *enabled), "PrometheusRule") == []
    rule = the_one(
        render(helm, *enabled, "--api-versions", "monitoring.coreos.com/v1"), "PrometheusRule"
    )
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert rule["spec"]["groups"][0]["rules"], "no rules rendered (tests/unit/test_alerts.py has more)"


def test_history_dsn_from_an_existing_secret(helm: tuple[Path, dict[str, str]]) -> None:
    container = operator_container(render(helm, "--set", "history.existingSecret=history-dsn"))
    dsn = next(variable for variable in container["env"] if variable["name"] == "VIGIL_HISTORY_DSN")
    assert dsn["valueFrom"]["secretKeyRef"] == {"name": "history-dsn", "key": "dsn"}


def test_bundled_postgresql_provides_the_history_dsn(helm: tuple[Path, dict[str, str]]) -> None:
    objects = render(helm, "--set", "postgresql.enabled=true")
    name = f"{RELEASE}-postgresql"
    statefulset = the_one(objects, "StatefulSet", name)
    assert statefulset["spec"]["template"]["spec"]["containers"][0]["image"] == "postgres:16"
    the_one(objects, "Service", name)
    secret = the_one(objects, "Secret", name)
    password = secret["stringData"]["password"]
    assert len(password) >= 16
    assert secret["stringData"]["dsn"] == f"postgresql+psycopg://vigil:{password}@{name}:5432/vigil"
    dsn = next(
        variable
        for variable in operator_container(objects)["env"]
        if variable["name"] == "VIGIL_HISTORY_DSN"
    )
    assert dsn["valueFrom"]["secretKeyRef"] == {"name": name, "key": "dsn"}


def test_two_history_dsn_sources_are_refused(helm: tuple[Path, dict[str, str]]) -> None:
    result = run_helm(
        helm, "template", RELEASE, str(CHART),
        "--set", "postgresql.enabled=true", "--set", "history.existingSecret=history-dsn",
    )  # fmt: skip
    assert result.returncode != 0
    assert "mutually exclusive" in result.stderr


def test_uninstall_stops_the_operator_before_helm_deletes_its_rbac(helm: tuple[Path, dict[str, str]]) -> None:
    """A pre-delete hook Job scales the operator to zero first; its own role can do only that."""
    objects = render(helm)
    job = the_one(objects, "Job", f"{RELEASE}-stop")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == f"{RELEASE}-stop"
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DEPLOYMENTS"].split() == [RELEASE, f"{RELEASE}-watchdog"]
    assert rules_of(the_one(objects, "Role", f"{RELEASE}-stop")) == {
        ("apps", "deployments/scale", "get"), ("apps", "deployments/scale", "patch"), ("", "pods", "list"),
    }  # fmt: skip
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        assert the_one(objects, kind, f"{RELEASE}-stop")["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    assert not find(render(helm, "--set", "uninstall.stopOperatorFirst=false"), "Job")


def test_operator_rbac_is_least_privilege(helm: tuple[Path, dict[str, str]]) -> None:
    objects = render(helm)
    cluster_rules = rules_of(the_one(objects, "ClusterRole", f"{RELEASE}-operator"))
    namespace_role = the_one(objects, "Role", f"{RELEASE}-operator")
    namespace_rules = rules_of(namespace_role)
    assert namespace_role["metadata"]["namespace"] == NAMESPACE
    assert ("", "pods", "create") in cluster_rules
    assert ("vigil.dev", "scheduledjobs/status", "patch") in cluster_rules
    assert ("vigil.dev", "executions", "create") in cluster_rules
    assert ("vigil.dev", "executions/status", "patch") in cluster_rules
    assert ("coordination.k8s.io", "leases", "update") in namespace_rules
    assert ("vigil.dev", "schedulebuckets/status", "patch") in namespace_rules
    assert not any(
        group == "coordination.k8s.io" or "schedulebuckets" in resource
        for group, resource, _ in cluster_rules
    )
    assert not any("*" in triple for triple in cluster_rules | namespace_rules)
    # The vigil.dev deletes: retention removes finished Executions, and ttlAfterFinished finished
    # Workflows, once their history is written.
    deletes = {(group, resource) for group, resource, verb in cluster_rules if verb == "delete"}
    assert {d for d in deletes if d[0] == "vigil.dev"} == {("vigil.dev", "executions"), ("vigil.dev", "workflows")}


def test_user_roles_aggregate_and_approval_is_a_custom_verb(
    helm: tuple[Path, dict[str, str]],
) -> None:
    objects = render(helm)
    edit = the_one(objects, "ClusterRole", f"{RELEASE}-edit")
    view = the_one(objects, "ClusterRole", f"{RELEASE}-view")
    approver = the_one(objects, "ClusterRole", f"{RELEASE}-workflow-approver")
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert ("vigil.dev", "workflowdefinitions", "create") in rules_of(edit)
    # Editors steer their workflows (retry, cancel, complete a stuck pod step) but never approve:
    # admission also asks `approve` of a complete on an approval step.
    assert {("vigil.dev", "workflows", verb) for verb in ("retry", "cancel", "complete")} <= rules_of(edit)
    assert not any(verb == "approve" for _, _, verb in rules_of(edit) | rules_of(view))
    assert rules_of(approver) == {
        ("vigil.dev", "workflows", verb) for verb in ("approve", "complete", "get", "list", "watch", "patch")
    }
    assert "rbac.authorization.k8s.io/aggregate-to-edit" not in approver["metadata"]["labels"]


@pytest.fixture
def chart_with_a_crd(tmp_path: Path) -> Path:
    """A copy of the chart whose files/crds/ holds one small CRD."""
    chart = tmp_path / "vigil"
    shutil.copytree(CHART, chart)
    crds = chart / "files" / "crds"
    shutil.rmtree(crds, ignore_errors=True)
    crds.mkdir(parents=True)
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.vigil.dev", "labels": {"example": "kept"}},
        "spec": {
            "group": "vigil.dev",
            "names": {"kind": "Widget", "plural": "widgets"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "maxProperties": 1000000}},
                }
            ],
        },
    }
    (crds / "widgets.vigil.dev.yaml").write_text(yaml.safe_dump(crd), encoding="utf-8")
    return chart


def test_crds_render_with_labels_and_the_keep_policy(
    helm: tuple[Path, dict[str, str]], chart_with_a_crd: Path
) -> None:
    crd = the_one(
        render(helm, chart=chart_with_a_crd), "CustomResourceDefinition", "widgets.vigil.dev"
    )
    assert crd["metadata"]["annotations"][KEEP_ANNOTATION] == "keep"
    assert crd["metadata"]["labels"]["example"] == "kept"
    assert crd["metadata"]["labels"]["app.kubernetes.io/part-of"] == "vigil"
    assert crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["maxProperties"] == 1000000


def test_crds_follow_the_install_and_keep_switches(
    helm: tuple[Path, dict[str, str]], chart_with_a_crd: Path
) -> None:
    unkept = the_one(
        render(helm, "--set", "crds.keep=false", chart=chart_with_a_crd), "CustomResourceDefinition"
    )
    assert KEEP_ANNOTATION not in unkept["metadata"].get("annotations", {})
    assert (
        find(
            render(helm, "--set", "crds.install=false", chart=chart_with_a_crd),
            "CustomResourceDefinition",
        )
        == []
    )


def test_chart_renders_the_crds_it_ships_unchanged(helm: tuple[Path, dict[str, str]]) -> None:
    def without_labels_and_annotations(crd: dict[str, Any]) -> dict[str, Any]:
        metadata = {
            key: value
            for key, value in crd["metadata"].items()
            if key not in ("labels", "annotations")
        }
        return {**crd, "metadata": metadata}

    rendered = {
        item["metadata"]["name"]: without_labels_and_annotations(item)
        for item in find(render(helm), "CustomResourceDefinition")
    }
    shipped = {
        crd["metadata"]["name"]: without_labels_and_annotations(crd)
        for crd in (load_yaml(path) for path in CHART_CRDS.glob("*.yaml"))
    }
    assert rendered == shipped


def test_the_watchdog_can_be_its_own_deployment(helm: tuple[Path, dict[str, str]]) -> None:
    objects = render(helm, "--set", "config.watchdog.mode=separate")
    watchdog = the_one(objects, "Deployment", f"{RELEASE}-watchdog")
    container = watchdog["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][0] == "watchdog"
    selector = watchdog["spec"]["selector"]["matchLabels"]
    operator = the_one(objects, "Deployment", RELEASE)
    assert selector != operator["spec"]["selector"]["matchLabels"], "each Deployment selects only its own pods"
    assert the_one(objects, "Service", f"{RELEASE}-watchdog")["spec"]["selector"] == selector
    assert not [o for o in render(helm) if o["metadata"]["name"] == f"{RELEASE}-watchdog"]


# --------------------------------------------------------------------------------------------
# The volume tier: the queue store's DSN and the example worker

QUEUE_ON = ("--set", "queue.enabled=true")
WORKER_ON = (
    "--set", "workers.example.enabled=true", "--set", "workers.example.queue=shop/orders",
    "--set", "workers.example.tasks={myapp.tasks,myapp.more}",
)  # fmt: skip


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {variable["name"]: variable for variable in container.get("env", [])}


def secret_ref(container: dict[str, Any], name: str) -> dict[str, str]:
    ref: dict[str, str] = env_of(container)[name]["valueFrom"]["secretKeyRef"]
    return ref


def worker_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = the_one(objects, "Deployment", f"{RELEASE}-worker")["spec"]["template"]["spec"]
    return pod


def test_the_volume_tier_is_off_by_default(helm: tuple[Path, dict[str, str]]) -> None:
    objects = render(helm, "--set", "config.watchdog.mode=separate")
    containers = [c for d in find(objects, "Deployment") for c in d["spec"]["template"]["spec"]["containers"]]
    assert containers and not [c["name"] for c in containers if "VIGIL_QUEUE_DSN" in env_of(c)]
    assert "queue" not in yaml.safe_load(the_one(objects, "ConfigMap", f"{RELEASE}-config")["data"]["config.yaml"])
    assert "queueDsn" not in the_one(objects, "Secret", f"{RELEASE}-postgresql")["stringData"]
    assert not find(objects, "Deployment", f"{RELEASE}-worker") and not find(objects, "Secret", f"{RELEASE}-queue")


def test_the_queue_dsn_comes_from_an_existing_secret_and_the_settings_from_the_config_file(
    helm: tuple[Path, dict[str, str]],
) -> None:
    objects = render(
        helm, *QUEUE_ON, "--set", "queue.existingSecret=queue-db", "--set", "queue.existingSecretKey=url",
        "--set", "queue.shards=16", "--set-json", "queue.statusIntervalSeconds=2.5", "--set", "config.watchdog.mode=separate",
        "--set", "queue.attemptsRetentionDays=30", "--set", "queue.finishedRetentionDays=3",
        "--set", "queue.quota.namespaces.big.maxReadyExecutions=5000000",
    )  # fmt: skip
    assert secret_ref(operator_container(objects), "VIGIL_QUEUE_DSN") == {"name": "queue-db", "key": "url"}
    # The separate watchdog watches the volume tier too: the same DSN from the same Secret.
    watchdog = the_one(objects, "Deployment", f"{RELEASE}-watchdog")["spec"]["template"]["spec"]["containers"][0]
    assert secret_ref(watchdog, "VIGIL_QUEUE_DSN") == {"name": "queue-db", "key": "url"}
    config = yaml.safe_load(the_one(objects, "ConfigMap", f"{RELEASE}-config")["data"]["config.yaml"])
    assert config["queue"] == {  # no dsn: it is in the Secret; the high-priority list as admission's
        "shards": 16, "statusIntervalSeconds": 2.5, "attemptsRetentionDays": 30, "highPriorityNamespaces": [],
        "finishedRetentionDays": 3,
        "quota": {"maxReadyExecutions": 1_000_000, "maxPayloadBytes": 1024**3, "namespaces": {"big": {"maxReadyExecutions": 5_000_000}}},
        "tenantRoles": {"enabled": True, "maxConnections": 20, "statementTimeoutSeconds": 60,
                        "idleInTransactionSeconds": 30, "host": ""},
    }
    settings = Settings.model_validate({**config, "queue": {**config["queue"], "dsn": "postgresql://q@db/q"}})
    assert (settings.queue.shards, settings.queue.status_interval_seconds, settings.queue.attempts_retention_days) == (16, 2.5, 30)
    assert (settings.queue.finished_retention_days, settings.queue.quota.namespaces["big"].max_ready_executions) == (3, 5_000_000)
    assert not find(objects, "Secret", f"{RELEASE}-queue")


def test_a_queue_dsn_in_the_values_goes_into_a_secret_never_the_config_map(
    helm: tuple[Path, dict[str, str]],
) -> None:
    dsn = "postgresql://vigil:s3cret-pw@queue-db:5432/queue"
    objects = render(helm, *QUEUE_ON, "--set", f"queue.dsn={dsn}")
    assert the_one(objects, "Secret", f"{RELEASE}-queue")["stringData"] == {"dsn": dsn}
    assert secret_ref(operator_container(objects), "VIGIL_QUEUE_DSN") == {"name": f"{RELEASE}-queue", "key": "dsn"}
    assert "s3cret-pw" not in json.dumps(find(objects, "ConfigMap"))
    assert "s3cret-pw" not in json.dumps(operator_container(objects))


def test_the_queue_api_gets_a_password_of_its_own_for_its_database_role(helm: tuple[Path, dict[str, str]]) -> None:
    """With tenant roles (on by default) the HTTP API logs in as its own role: its password is
    generated into <fullname>-queue-api (kept across upgrades by lookup, which `helm template`
    cannot do) or read from queue.apiRole.existingSecret; never in the ConfigMap."""
    objects = render(helm, *QUEUE_ON, "--set", "queue.existingSecret=queue-db")
    password = the_one(objects, "Secret", f"{RELEASE}-queue-api")["stringData"]["password"]
    assert len(password) == 40 and password not in json.dumps(find(objects, "ConfigMap"))
    assert secret_ref(operator_container(objects), "VIGIL_QUEUE_API_PASSWORD") == {
        "name": f"{RELEASE}-queue-api", "key": "password",
    }
    theirs = render(helm, *QUEUE_ON, "--set", "queue.existingSecret=queue-db",
                    "--set", "queue.apiRole.existingSecret=api-db", "--set", "queue.apiRole.existingSecretKey=pw")  # fmt: skip
    assert secret_ref(operator_container(theirs), "VIGIL_QUEUE_API_PASSWORD") == {"name": "api-db", "key": "pw"}
    assert not find(theirs, "Secret", f"{RELEASE}-queue-api")
    for off in (("--set", "queue.tenantRoles.enabled=false"), ("--set", "queue.enabled=false")):
        objects = render(helm, *QUEUE_ON, "--set", "queue.existingSecret=queue-db", *off)
        assert not find(objects, "Secret", f"{RELEASE}-queue-api")
        assert "VIGIL_QUEUE_API_PASSWORD" not in env_of(operator_container(objects))


def test_the_queue_can_share_the_bundled_postgresql(helm: tuple[Path, dict[str, str]]) -> None:
    objects = render(helm, *QUEUE_ON, "--set", "queue.useHistoryDatabase=true")
    name = f"{RELEASE}-postgresql"
    secret = the_one(objects, "Secret", name)["stringData"]
    queue_dsn = f"postgresql://vigil:{secret['password']}@{name}:5432/vigil"
    assert secret["queueDsn"] == queue_dsn  # a URL libpq reads; `dsn` stays the history's SQLAlchemy URL
    assert secret["dsn"] == f"postgresql+psycopg://vigil:{secret['password']}@{name}:5432/vigil"
    assert secret_ref(operator_container(objects), "VIGIL_QUEUE_DSN") == {"name": name, "key": "queueDsn"}
    assert secret_ref(operator_container(objects), "VIGIL_HISTORY_DSN") == {"name": name, "key": "dsn"}
    Settings.model_validate({"queue": {"dsn": queue_dsn}})  # the operator accepts what the chart hands it


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(QUEUE_ON, "queue.enabled needs a DSN source for the queue store", id="no-dsn-source"),
        pytest.param(
            (*QUEUE_ON, "--set", "queue.existingSecret=q", "--set", "queue.dsn=host=db"),
            "queue.existingSecret, queue.dsn and queue.useHistoryDatabase are mutually exclusive",
            id="two-dsn-sources",
        ),
        pytest.param(
            (*QUEUE_ON, "--set", "queue.useHistoryDatabase=true", "--set", "replicaCount=1"),
            "queue.useHistoryDatabase needs the bundled PostgreSQL", id="history-in-sqlite",
        ),
        pytest.param(
            (*QUEUE_ON, "--set", "queue.useHistoryDatabase=true", "--set", "history.existingSecret=h"),
            "queue.useHistoryDatabase needs the bundled PostgreSQL", id="history-in-an-external-database",
        ),
        pytest.param(WORKER_ON, "workers.example.enabled needs queue.enabled", id="worker-without-the-queue"),
        pytest.param(
            (*QUEUE_ON, "--set", "queue.existingSecret=q", "--set", "workers.example.enabled=true", "--set", "workers.example.tasks={myapp.tasks}"),
            "workers.example.queue is required", id="worker-without-its-queue",
        ),
        pytest.param(
            (*QUEUE_ON, "--set", "queue.existingSecret=q", "--set", "workers.example.enabled=true", "--set", "workers.example.queue=shop/orders"),
            "workers.example.tasks is required", id="worker-without-tasks",
        ),
        pytest.param(
            (*QUEUE_ON, "--set", "queue.existingSecret=q", *WORKER_ON, "--set", "workers.example.drainTimeoutSeconds=45"),
            "workers.example.terminationGracePeriodSeconds (45) must exceed workers.example.drainTimeoutSeconds (45)",
            id="grace-period-not-past-the-drain",
        ),
    ],
)
def test_invalid_volume_tier_values_are_refused_saying_why(
    helm: tuple[Path, dict[str, str]], values: tuple[str, ...], message: str
) -> None:
    result = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *values)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_the_operator_may_touch_only_the_queue_credentials_secrets_of_other_namespaces(
    helm: tuple[Path, dict[str, str]],
) -> None:
    objects = render(helm, *QUEUE_ON, "--set", "queue.existingSecret=queue-db")
    rules = the_one(objects, "ClusterRole", f"{RELEASE}-operator")["rules"]
    on_secrets = [rule for rule in rules if "secrets" in rule["resources"]]
    assert on_secrets == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["vigil-queue-credentials"],
         "verbs": ["get", "update", "delete"]},
    ]
    off = render(helm, *QUEUE_ON, "--set", "queue.existingSecret=queue-db", "--set", "queue.tenantRoles.enabled=false")
    assert not [r for r in the_one(off, "ClusterRole", f"{RELEASE}-operator")["rules"] if "secrets" in r["resources"]]


def test_without_tenant_roles_the_example_worker_keeps_the_operators_dsn(helm: tuple[Path, dict[str, str]]) -> None:
    objects = render(helm, *QUEUE_ON, "--set", "queue.existingSecret=queue-db", *WORKER_ON,
                     "--set", "queue.tenantRoles.enabled=false")  # fmt: skip
    container = worker_pod(objects)["containers"][0]
    assert secret_ref(container, "VIGIL_QUEUE_DSN") == secret_ref(operator_container(objects), "VIGIL_QUEUE_DSN")
    assert the_one(objects, "Deployment", f"{RELEASE}-worker")["metadata"]["namespace"] == NAMESPACE


def test_the_example_worker_drains_within_its_grace_period_with_no_api_access(
    helm: tuple[Path, dict[str, str]],
) -> None:
    objects = render(helm, *QUEUE_ON, "--set", "queue.existingSecret=queue-db", *WORKER_ON,
                     "--set", "workers.example.concurrency=25", "--set", "workers.example.env.LEDGER_URL=http://ledger")  # fmt: skip
    pod = worker_pod(objects)
    container = pod["containers"][0]
    assert pod["automountServiceAccountToken"] is False
    assert [container["command"], container["args"]] == [["vigil"], [
        "worker", "--queue", "shop/orders", "--tasks", "myapp.tasks", "--tasks", "myapp.more",
        "--concurrency", "25", "--drain-timeout", "30", "--metrics-port", "9090",
    ]]  # fmt: skip
    assert pod["terminationGracePeriodSeconds"] == 45 > 30
    # the namespace's own database role, never the operator's DSN: in the TaskQueue's namespace,
    # from the Secret the operator writes there (queue.tenantRoles)
    assert secret_ref(container, "VIGIL_QUEUE_DSN") == {"name": "vigil-queue-credentials", "key": "dsn"}
    assert the_one(objects, "Deployment", f"{RELEASE}-worker")["metadata"]["namespace"] == "shop"
    assert env_of(container)["LEDGER_URL"]["value"] == "http://ledger"
    assert container["image"] == operator_container(objects)["image"]
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True and pod["securityContext"]["runAsNonRoot"] is True
    assert {port["name"]: port["containerPort"] for port in container["ports"]} == {"metrics": 9090}
    # Not an operator pod: the operator's Service, PodDisruptionBudget and NetworkPolicy leave it alone.
    labels = the_one(objects, "Deployment", f"{RELEASE}-worker")["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "worker"
    # The worker's module list must parse as `vigil worker` reads it.
    from vigil.worker.command import parser

    parsed = parser().parse_args(container["args"][1:])
    assert (parsed.queue, parsed.tasks, parsed.concurrency, parsed.drain_timeout) == (
        "shop/orders", ["myapp.tasks", "myapp.more"], 25, 30.0,
    )  # fmt: skip

"""Alerts and dashboard: the rule file, its promtool unit tests, the PrometheusRule, the runbooks.

Covers, without a cluster, with the real promtool (Debian's `prometheus` package) and helm:
* helm/vigil/files/alerts.yaml rendered with the chart's defaults passes `promtool check rules`;
* every tests/alerts/*.yaml passes `promtool test rules`, and each alert has a test case where it
  fires and one where it stays quiet;
* the PrometheusRule template renders exactly the groups the Python renderer produces, with the
  defaults and with overrides, and refuses a placeholder that has no value;
* every alert has severity, summary, description, and a runbook_url pointing at its section of
  docs/alerts.md, which says what it means, how to confirm it and what to do;
* the PromQL of the alerts and of the Grafana dashboard names only metrics Vigil exports;
* the dashboard JSON parses and reaches Grafana verbatim in a ConfigMap labelled for the sidecar;
* the ServiceMonitor keeps the metrics' own namespace and job labels (honorLabels).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.prometheus_server import (
    ALERTS_FILE,
    CHART,
    ROOT,
    alerting_rules,
    chart_rule_settings,
    render_rule_file,
    require_binary,
    rule_groups,
)
from tests.unit.test_packaging import RELEASE, find, find_helm, render, run_helm, the_one
from vigil import metrics

ALERT_TESTS = ROOT / "tests" / "alerts"
RUNBOOKS = ROOT / "docs" / "alerts.md"
DASHBOARD = CHART / "files" / "dashboards" / "vigil.json"

#: The name promtool test files load (`rule_files`); the test writes the rendered rules under it.
RENDERED_RULES_NAME = "vigil-alerts.yaml"
PROMTOOL_TIMEOUT_SECONDS = 60
PROMETHEUS_OPERATOR_API = ("--api-versions", "monitoring.coreos.com/v1")
ENABLE_RULES = ("--set", "prometheusRule.enabled=true", *PROMETHEUS_OPERATOR_API)

#: The alerts the issue asks for, each with a runbook section of the same name.
EXPECTED_ALERTS = frozenset(
    {
        "JobOverdue",
        "ScheduleChainBroken",
        "DeadLetterAging",
        "OldestReadyAgeHigh",
        "TriggerLagHigh",
        "NoTriggerLeader",
        "QueueTriggerFailing",
        "OutputStale",
        "JobLaunchFailing",
        "QueueJobOverdue",
        "QueueChainBroken",
        "QueueDeadLetterAging",
    }
)

#: The metrics alerts and dashboards may use: Vigil's documented metric names (histograms also
#: as their _bucket/_sum/_count series).
HISTOGRAMS = frozenset({"vigil_trigger_lag_seconds", "vigil_trigger_tick_seconds", "vigil_queue_trigger_lag_seconds"})
DOCUMENTED_METRICS = frozenset(
    {
        "vigil_trigger_fired_total",
        "vigil_trigger_errors_total",
        "vigil_occurrences_total",
        "vigil_leader",
        "vigil_leader_transitions_total",
        "vigil_oldest_ready_execution_age_seconds",
        "vigil_job_seconds_since_last_success",
        "vigil_job_overdue",
        "vigil_job_launch_failing",
        "vigil_schedule_chain_broken",
        "vigil_dead_letter_age_seconds",
        "vigil_dead_letters",
        "vigil_buckets_pending",
        "vigil_executions_total",
        "vigil_duplicate_attempts_total",
        "vigil_history_buffer_depth",
        "vigil_job_output_stale",
        "vigil_job_output_age_seconds",
        "vigil_job_suspended_seconds",
        "vigil_queue_jobs_overdue",
        "vigil_queue_job_overdue",
        "vigil_queue_chains_broken",
        "vigil_queue_chain_broken",
        "vigil_queue_dead_letters",
        "vigil_queue_dead_letter_oldest_age_seconds",
        "vigil_queue_oldest_ready_age_seconds_by",
        "vigil_queue_trigger_occurrences_total",
        "vigil_queue_trigger_pass_errors_total",
    }
    | {f"{name}{suffix}" for name in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")}
)

#: What the dashboard must show (the issue's list), by the metric that shows it.
DASHBOARD_MUST_SHOW = frozenset(
    {
        "vigil_trigger_lag_seconds_bucket",
        "vigil_trigger_fired_total",
        "vigil_occurrences_total",
        "vigil_oldest_ready_execution_age_seconds",
        "vigil_job_overdue",
        "vigil_schedule_chain_broken",
        "vigil_dead_letters",
        "vigil_leader",
        "vigil_history_buffer_depth",
    }
)

#: PromQL functions and aggregations these expressions may call.
PROMQL_FUNCTIONS = frozenset(
    {
        "sum", "min", "max", "avg", "count", "topk", "bottomk", "quantile", "group",
        "rate", "irate", "increase", "delta", "histogram_quantile", "absent", "absent_over_time",
        "vector", "scalar", "max_over_time", "min_over_time", "avg_over_time", "clamp_min",
    }
)  # fmt: skip
PROMQL_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset"})
LABEL_LIST_CLAUSE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
LABEL_MATCHERS = re.compile(r"\{[^}]*\}")
RANGE = re.compile(r"\[[^\]]*\]")
GRAFANA_VARIABLE = re.compile(r"\$\{?\w+\}?")
IDENTIFIER_CALL = re.compile(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")

RUNBOOK_PARTS = ("**What it means.**", "**How to confirm.**", "**What to do.**")


# --------------------------------------------------------------------------------------------
# Helpers


def rendered_defaults() -> str:
    return render_rule_file()


def default_alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for rule in alerting_rules(rendered_defaults())}


def exported_metric_names() -> set[str]:
    """Every series name the operator's registry can export."""
    names: set[str] = set()
    for family in metrics.REGISTRY.collect():
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names |= {f"{family.name}{suffix}" for suffix in ("_bucket", "_sum", "_count")}
        else:
            names.add(family.name)
    return names


def promql_names(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, called functions) of a PromQL expression, with Grafana variables removed."""
    text = GRAFANA_VARIABLE.sub("", expr)
    for pattern in (LABEL_LIST_CLAUSE, LABEL_MATCHERS, RANGE):
        text = pattern.sub(" ", text)
    metric_names: set[str] = set()
    functions: set[str] = set()
    for match in IDENTIFIER_CALL.finditer(text):
        name, call = match.group(1), match.group(2)
        if call:
            functions.add(name)
        elif name not in PROMQL_KEYWORDS:
            metric_names.add(name)
    return metric_names, functions


def dashboard_exprs(node: Any) -> Iterator[str]:
    """Every `expr` anywhere in the dashboard JSON."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            else:
                yield from dashboard_exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from dashboard_exprs(item)


def runbook_sections() -> dict[str, str]:
    """docs/alerts.md's `## Name` sections, by name."""
    sections: dict[str, str] = {}
    name = None
    for line in RUNBOOKS.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^## (\S.*)$", line)
        if heading:
            name = heading.group(1).strip()
            sections[name] = ""
        elif name is not None:
            sections[name] += line + "\n"
    return sections


def prometheus_rule_groups(helm: tuple[Path, dict[str, str]], *args: str) -> list[dict[str, Any]]:
    rule = the_one(render(helm, *ENABLE_RULES, *args), "PrometheusRule")
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


# --------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def promtool() -> Path:
    return require_binary("promtool")


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
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
    return binary, environment


def run_promtool(promtool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_SECONDS,
        check=False,
    )


# --------------------------------------------------------------------------------------------
# promtool


def test_rule_file_passes_promtool_check(promtool: Path, tmp_path: Path) -> None:
    rules = tmp_path / RENDERED_RULES_NAME
    rules.write_text(rendered_defaults(), encoding="utf-8")
    result = run_promtool(promtool, "check", "rules", str(rules), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(EXPECTED_ALERTS)} rules found" in result.stdout + result.stderr


@pytest.mark.parametrize("test_file", sorted(path.name for path in ALERT_TESTS.glob("*.yaml")))
def test_promtool_unit_tests_pass(promtool: Path, tmp_path: Path, test_file: str) -> None:
    (tmp_path / RENDERED_RULES_NAME).write_text(rendered_defaults(), encoding="utf-8")
    shutil.copy(ALERT_TESTS / test_file, tmp_path / test_file)
    result = run_promtool(promtool, "test", "rules", test_file, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    fires: set[str] = set()
    stays_quiet: set[str] = set()
    for path in ALERT_TESTS.glob("*.yaml"):
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert document["rule_files"] == [RENDERED_RULES_NAME], path.name
        for case in document["tests"]:
            for check in case.get("alert_rule_test", []):
                (fires if check["exp_alerts"] else stays_quiet).add(check["alertname"])
    assert set(default_alerts()) == EXPECTED_ALERTS
    assert EXPECTED_ALERTS - fires == set(), "alerts never shown firing"
    assert EXPECTED_ALERTS - stays_quiet == set(), "alerts never shown staying quiet"


# --------------------------------------------------------------------------------------------
# The PrometheusRule template and the rule file agree


def test_prometheus_rule_renders_the_rule_file_with_the_defaults(
    helm: tuple[Path, dict[str, str]],
) -> None:
    assert prometheus_rule_groups(helm) == rule_groups(rendered_defaults())


def test_prometheus_rule_substitutes_values_like_the_rule_file(
    helm: tuple[Path, dict[str, str]],
) -> None:
    runbook_url = "https://runbooks.example/vigil/alerts"
    groups = prometheus_rule_groups(
        helm,
        "--set", "prometheusRule.alerts.jobOverdue.for=1s",
        "--set", "prometheusRule.alerts.deadLetterAging.thresholdSeconds=7200",
        "--set", "prometheusRule.alerts.triggerLagHigh.window=2m",
        "--set", f"prometheusRule.runbookUrl={runbook_url}",
    )  # fmt: skip
    overrides: dict[str, dict[str, object]] = {
        "jobOverdue": {"for": "1s"},
        "deadLetterAging": {"thresholdSeconds": 7200},
        "triggerLagHigh": {"window": "2m"},
    }
    expected = rule_groups(render_rule_file(overrides, runbook_url=runbook_url))
    assert groups == expected
    rules = {rule["alert"]: rule for rule in expected[0]["rules"]}
    assert rules["JobOverdue"]["for"] == "1s"
    assert rules["DeadLetterAging"]["expr"].endswith("> 7200")
    assert "[2m]" in rules["TriggerLagHigh"]["expr"]
    assert (
        rules["NoTriggerLeader"]["annotations"]["runbook_url"] == f"{runbook_url}#notriggerleader"
    )


def test_a_placeholder_without_a_value_fails_the_render(
    helm: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    chart = tmp_path / "vigil"
    shutil.copytree(CHART, chart)
    rules = chart / "files" / "alerts.yaml"
    rules.write_text(
        rules.read_text(encoding="utf-8").replace("${jobOverdue.for}", "${jobOverdue.forr}"),
        encoding="utf-8",
    )
    result = run_helm(helm, "template", RELEASE, str(chart), *ENABLE_RULES)
    assert result.returncode != 0
    assert "${jobOverdue.forr} has no value" in result.stderr


def test_every_threshold_value_is_used_by_the_rule_file() -> None:
    text = ALERTS_FILE.read_text(encoding="utf-8")
    unused = [
        f"prometheusRule.alerts.{alert}.{key}"
        for alert, settings in chart_rule_settings()["alerts"].items()
        for key in settings
        if f"${{{alert}.{key}}}" not in text
    ]
    assert unused == []


# --------------------------------------------------------------------------------------------
# Rules: labels, annotations, runbooks, metric names


def test_every_alert_has_severity_summary_and_description() -> None:
    for name, rule in default_alerts().items():
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert rule["annotations"]["summary"].strip(), name
        assert rule["annotations"]["description"].strip(), name


def test_every_alert_has_a_runbook_that_its_annotation_points_at() -> None:
    sections = runbook_sections()
    runbook_url = chart_rule_settings()["runbookUrl"]
    assert (ROOT / runbook_url) == RUNBOOKS, "the default runbookUrl names docs/alerts.md"
    for name, rule in default_alerts().items():
        assert name in sections, f"docs/alerts.md has no '## {name}' section"
        missing = [part for part in RUNBOOK_PARTS if part not in sections[name]]
        assert missing == [], f"the {name} runbook lacks {missing}"
        assert rule["annotations"]["runbook_url"] == f"{runbook_url}#{name.lower()}"
    assert set(sections) == set(default_alerts()), "a runbook section for an alert that is gone"


def test_the_documented_metrics_are_exported_by_the_operator() -> None:
    assert DOCUMENTED_METRICS - exported_metric_names() == set()


def test_alert_expressions_name_only_vigil_metrics() -> None:
    for name, rule in default_alerts().items():
        metric_names, functions = promql_names(rule["expr"])
        assert metric_names, f"{name}: no metric found in {rule['expr']!r}"
        assert metric_names <= DOCUMENTED_METRICS, f"{name}: {metric_names - DOCUMENTED_METRICS}"
        assert functions <= PROMQL_FUNCTIONS, f"{name}: {functions - PROMQL_FUNCTIONS}"


def test_the_metric_name_check_catches_a_foreign_metric() -> None:
    metric_names, functions = promql_names(
        'sum by (job) (rate(up{job="x"}[5m])) and on (instance) kube_pod_info > 1e3'
    )
    assert metric_names == {"up", "kube_pod_info"}
    assert functions == {"sum", "rate"}


# --------------------------------------------------------------------------------------------
# The Grafana dashboard


def test_dashboard_parses_and_names_only_vigil_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = list(dashboard_exprs(dashboard))
    assert exprs, "the dashboard has no queries"
    shown: set[str] = set()
    for expr in exprs:
        metric_names, functions = promql_names(expr)
        assert metric_names, f"no metric found in {expr!r}"
        assert metric_names <= DOCUMENTED_METRICS, f"{expr}: {metric_names - DOCUMENTED_METRICS}"
        assert functions <= PROMQL_FUNCTIONS, f"{expr}: {functions - PROMQL_FUNCTIONS}"
        shown |= metric_names
    assert DASHBOARD_MUST_SHOW - shown == set()
    panel_ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(panel_ids) == len(set(panel_ids)), "panel ids must be unique"


def test_dashboard_config_map_carries_the_json_for_the_sidecar(
    helm: tuple[Path, dict[str, str]],
) -> None:
    name = f"{RELEASE}-dashboard"
    assert find(render(helm), "ConfigMap", name) == []
    enabled = ("--set", "grafana.dashboard.enabled=true")
    folder = ("--set", "grafana.dashboard.annotations.grafana_folder=Vigil")
    config_map = the_one(render(helm, *enabled, *folder), "ConfigMap", name)
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Vigil"}
    assert json.loads(config_map["data"]["vigil.json"]) == json.loads(
        DASHBOARD.read_text(encoding="utf-8")
    )


def test_service_monitor_keeps_the_metrics_own_labels(helm: tuple[Path, dict[str, str]]) -> None:
    monitor = the_one(
        render(helm, "--set", "metrics.serviceMonitor.enabled=true", *PROMETHEUS_OPERATOR_API),
        "ServiceMonitor",
    )
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True

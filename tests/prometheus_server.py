"""Prometheus for tests: Vigil's alert rules rendered with chosen thresholds, and a real server.

The chart's rules live in helm/vigil/files/alerts.yaml with `${alert.key}` placeholders that the
PrometheusRule template fills from values.yaml (`prometheusRule.alerts.<alert>.<key>`, and
`${runbookUrl}`). `render_rule_file` does the same substitution in Python, so promtool can check
the file and a test Prometheus can load it with short thresholds; tests/unit/test_alerts.py checks
that both renderings agree.

`running_prometheus` starts Debian's /usr/bin/prometheus (package `prometheus`, installed by
scripts/system-deps.sh) on a free loopback port with a throwaway TSDB, scraping the targets a test
gives every second and evaluating the rules every second, and stops it afterwards. It never uses
the packaged service, its config or its port.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "vigil"
ALERTS_FILE = CHART / "files" / "alerts.yaml"
VALUES_FILE = CHART / "values.yaml"

#: `${runbookUrl}` or `${alertName.key}`, as the PrometheusRule template replaces them.
PLACEHOLDER = re.compile(r"\$\{([A-Za-z][A-Za-z0-9]*(?:\.[A-Za-z][A-Za-z0-9]*)?)\}")
RUNBOOK_URL = "runbookUrl"

#: Settings that make every alert fire as soon as Prometheus can tell: one evaluation past the
#: condition, thresholds of a second. `window` stays a few scrape intervals so rate() has samples.
SHORT_TEST_THRESHOLDS: dict[str, dict[str, object]] = {
    "jobOverdue": {"for": "1s"},
    "scheduleChainBroken": {"for": "1s"},
    "deadLetterAging": {"for": "1s", "thresholdSeconds": 1},
    "oldestReadyAgeHigh": {"for": "1s", "thresholdSeconds": 1},
    "triggerLagHigh": {"for": "1s", "thresholdSeconds": 1, "window": "10s"},
    "noTriggerLeader": {"for": "1s"},
    "outputStale": {"for": "1s"},
}

SCRAPE_INTERVAL = "1s"
EVALUATION_INTERVAL = "1s"
SCRAPE_JOB = "vigil"
READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 30.0
HTTP_TIMEOUT_SECONDS = 5.0
LOG_TAIL_CHARACTERS = 4000


# --------------------------------------------------------------------------------------------
# The rule file


def chart_rule_settings() -> dict[str, Any]:
    """values.yaml's prometheusRule block: runbookUrl and the per-alert settings."""
    values: dict[str, Any] = yaml.safe_load(VALUES_FILE.read_text(encoding="utf-8"))
    settings: dict[str, Any] = values["prometheusRule"]
    return settings


def placeholder_values(
    overrides: Mapping[str, Mapping[str, object]] | None = None, *, runbook_url: str | None = None
) -> dict[str, str]:
    """Every placeholder's text: the chart defaults, with `overrides` per alert on top."""
    settings = chart_rule_settings()
    alerts: dict[str, dict[str, object]] = copy.deepcopy(settings["alerts"])
    for alert, changes in (overrides or {}).items():
        if alert not in alerts:
            raise KeyError(f"no alert settings named {alert!r} under prometheusRule.alerts")
        alerts[alert].update(changes)
    texts = {
        f"{alert}.{key}": str(value)
        for alert, keys in alerts.items()
        for key, value in keys.items()
    }
    texts[RUNBOOK_URL] = runbook_url if runbook_url is not None else str(settings[RUNBOOK_URL])
    return texts


def render_rule_file(
    overrides: Mapping[str, Mapping[str, object]] | None = None, *, runbook_url: str | None = None
) -> str:
    """files/alerts.yaml with every placeholder replaced, as the PrometheusRule template does."""
    texts = placeholder_values(overrides, runbook_url=runbook_url)

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in texts:
            raise KeyError(f"files/alerts.yaml: placeholder {match.group(0)} has no value")
        return texts[name]

    return PLACEHOLDER.sub(substitute, ALERTS_FILE.read_text(encoding="utf-8"))


def rule_groups(rule_file_text: str) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(rule_file_text)["groups"]
    return groups


def alerting_rules(rule_file_text: str) -> list[dict[str, Any]]:
    """Every alerting rule of a rendered rule file, in file order."""
    return [
        rule for group in rule_groups(rule_file_text) for rule in group["rules"] if "alert" in rule
    ]


# --------------------------------------------------------------------------------------------
# Binaries and ports


def require_binary(name: str) -> Path:
    """The path of a Prometheus binary, or a test failure that says how to get it."""
    found = shutil.which(name)
    if found is None:
        pytest.fail(
            f"{name} not found on PATH: it comes with Debian's `prometheus` package; "
            "run `make system-deps` (scripts/system-deps.sh) or `apt-get install prometheus`"
        )
    return Path(found)


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# --------------------------------------------------------------------------------------------
# The server


def prometheus_config(targets: list[str]) -> dict[str, Any]:
    """Scrape `targets` and evaluate rules.yaml every second.

    honor_labels keeps the metrics' own `job` and `namespace` labels (the ScheduledJob's), as
    the chart's ServiceMonitor does; otherwise they would arrive as exported_job/exported_namespace.
    """
    return {
        "global": {
            "scrape_interval": SCRAPE_INTERVAL,
            "scrape_timeout": SCRAPE_INTERVAL,
            "evaluation_interval": EVALUATION_INTERVAL,
        },
        "rule_files": ["rules.yaml"],
        "scrape_configs": [
            {
                "job_name": SCRAPE_JOB,
                "honor_labels": True,
                "static_configs": [{"targets": targets}],
            }
        ],
    }


class PrometheusServer:
    """One Prometheus process with its own config, rules and TSDB under `workdir`."""

    def __init__(self, workdir: Path, *, targets: list[str], rules: str) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.log_path = workdir / "prometheus.log"
        self._targets = targets
        self._rules = rules
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        binary = require_binary("prometheus")
        config = self.workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(prometheus_config(self._targets)), encoding="utf-8")
        (self.workdir / "rules.yaml").write_text(self._rules, encoding="utf-8")
        command = [
            str(binary),
            f"--config.file={config}",
            f"--storage.tsdb.path={self.workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        wait_for(self._ready, timeout=READY_TIMEOUT_SECONDS, what=f"prometheus ready at {self.url}")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_TIMEOUT_SECONDS)

    def log_tail(self) -> str:
        if not self.log_path.exists():
            return ""
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARACTERS:]

    def _ready(self) -> bool:
        if self._process is None or self._process.poll() is not None:
            raise AssertionError(f"prometheus exited during start-up:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(
                f"{self.url}/-/ready", timeout=HTTP_TIMEOUT_SECONDS
            ) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, ConnectionError):
            return False

    def api(self, path: str) -> Any:
        """The `data` of a successful /api/v1 reply."""
        with urllib.request.urlopen(
            f"{self.url}/api/v1/{path}", timeout=HTTP_TIMEOUT_SECONDS
        ) as reply:
            body = json.load(reply)
        assert body["status"] == "success", body
        return body["data"]

    def alerts(self) -> list[dict[str, Any]]:
        """Every pending or firing alert, as /api/v1/alerts reports it."""
        alerts: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return alerts


@contextmanager
def running_prometheus(
    workdir: Path, *, targets: list[str], rules: str
) -> Iterator[PrometheusServer]:
    """A started PrometheusServer, stopped (and its log shown on failure) when the block ends."""
    server = PrometheusServer(workdir, targets=targets, rules=rules)
    try:
        server.start()
        yield server
    except BaseException:
        print(f"prometheus log ({server.log_path}):\n{server.log_tail()}")
        raise
    finally:
        server.stop()

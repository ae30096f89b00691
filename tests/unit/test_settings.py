"""The operator's settings file: the workflow and approval sections (the workflow TTL's 0s or
empty meaning forever), and bad values refused naming the key (the chart's values.schema.json
refuses the same values at install; a renew period past the renew deadline only here)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from vigil.kube.controllers.workflowttl import setting_ttl
from vigil.settings import load_settings


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_the_workflow_and_approval_sections_have_their_documented_defaults(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, "namespace: vigil-system\n"), environ={})
    assert (settings.workflows.workers, settings.workflows.rescan_seconds) == (4, 300.0)
    assert setting_ttl(settings.workflows.ttl_after_finished) == timedelta(hours=24)
    assert settings.approvals.enabled and settings.approvals.key_secret == "vigil-approval-key"
    assert settings.approvals.default_token_lifetime == "24h" and settings.approvals.base_url == ""
    assert settings.approvals.notifier.url == ""  # no notifier: no token is minted for anyone
    assert (settings.approvals.key_rotation.period, settings.approvals.key_rotation.overlap) == ("720h", "24h")


@pytest.mark.parametrize(
    ("text", "field"),
    [
        pytest.param("workflows: {workers: 0}\n", "workflows.workers", id="no-workers"),
        pytest.param("workflows: {rescanSeconds: -1}\n", "workflows.rescanSeconds", id="negative-rescan"),
        pytest.param("workflows: {rescan: 5}\n", "workflows.rescan", id="misspelt-key"),
        pytest.param("workflows: {ttlAfterFinished: 1 day}\n", "workflows.ttlAfterFinished", id="bad-workflow-ttl"),
        pytest.param("approvals: {defaultTokenLifetime: a week}\n", "approvals.defaultTokenLifetime", id="bad-duration"),
        pytest.param("approvals: {keyRefreshSeconds: 0}\n", "approvals.keyRefreshSeconds", id="zero-refresh"),
        pytest.param("approvals: {notifier: {timeoutSeconds: 0}}\n", "approvals.notifier.timeoutSeconds", id="no-timeout"),
        pytest.param("approvals: {keyRotation: {overlap: 1 day}}\n", "approvals.keyRotation.overlap", id="bad-overlap"),
        pytest.param("approvals: {notifier: {url: chat-bridge}}\n", "approvals.notifier.url", id="notifier-without-scheme"),
        pytest.param("dispatch: {pendingLimitSeconds: 0}\n", "dispatch.pendingLimitSeconds", id="no-pending-limit"),
        pytest.param("dispatch: {pendingLimitSeconds: 2d}\n", "dispatch.pendingLimitSeconds", id="pending-limit-text"),
        pytest.param("dispatch: {imagePullLimitSeconds: 0}\n", "dispatch.imagePullLimitSeconds", id="no-pull-limit"),
        pytest.param(
            "dispatch: {imagePullLimitSeconds: 90000}\n", "dispatch.imagePullLimitSeconds", id="pull-limit-too-long"
        ),
        pytest.param("http: {workers: 0}\n", "http.workers", id="no-http-workers"),
        pytest.param("http: {requestTimeoutSeconds: 0}\n", "http.requestTimeoutSeconds", id="no-request-time"),
        pytest.param("http: {authCacheSeconds: -1}\n", "http.authCacheSeconds", id="negative-auth-cache"),
        pytest.param("queue: {shards: 0}\n", "queue.shards", id="no-shards"),
        pytest.param("queue: {attemptsRetentionDays: 0}\n", "queue.attemptsRetentionDays", id="no-attempt-days"),
        pytest.param("queue: {attemptsRetentionDays: 400}\n", "queue.attemptsRetentionDays", id="attempt-days-past-a-year"),
        pytest.param("queue: {dsn: 'sqlite:///q.db'}\n", "queue.dsn", id="queue-not-postgresql"),
        pytest.param(
            "leaderElection: {leaseDurationSeconds: 15, renewPeriodSeconds: 10}\n",
            "leaderElection.renewPeriodSeconds",
            id="renewals-past-the-deadline",
        ),
    ],
)
def test_a_bad_value_is_refused_naming_its_key(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        load_settings(write(tmp_path, text), environ={})
    assert field in {".".join(str(part) for part in error["loc"]) for error in caught.value.errors()}


@pytest.mark.parametrize(("text", "ttl"), [("0s", None), ("", None), ("7d", timedelta(days=7)), ("90m", timedelta(minutes=90))])
def test_the_workflow_ttl_setting_zero_or_empty_keeps_workflows_forever(tmp_path: Path, text: str, ttl: timedelta | None) -> None:
    settings = load_settings(write(tmp_path, f"workflows: {{ttlAfterFinished: '{text}'}}\n"), environ={})
    assert setting_ttl(settings.workflows.ttl_after_finished) == ttl


def test_the_volume_tier_is_off_by_default_and_its_dsn_may_come_from_the_environment(tmp_path: Path) -> None:
    config = write(tmp_path, "queue: {shards: 16}\n")
    assert load_settings(config, environ={}).queue.dsn == ""
    from_env = load_settings(config, environ={"VIGIL_QUEUE_DSN": "host=db dbname=vigil"})
    assert (from_env.queue.dsn, from_env.queue.shards) == ("host=db dbname=vigil", 16)


def test_the_queue_apis_password_comes_from_the_environment_and_is_never_shown(tmp_path: Path) -> None:
    config = write(tmp_path, "queue: {shards: 16}\n")
    environ = {"VIGIL_QUEUE_DSN": "host=db dbname=vigil", "VIGIL_QUEUE_API_PASSWORD": "s3cret-api"}
    settings = load_settings(config, environ=environ)
    assert settings.queue.api_password == "s3cret-api" and settings.queue.shards == 16
    assert "s3cret-api" not in repr(settings)
    assert load_settings(config, environ={}).queue.api_password == ""

"""The entry point: which program each verb runs, and the settings the plugin's audit shares.

`vigil operator|watchdog` reach the runtime only through the entry point
(`vigil.__main__`), which hands them to the CLI as `serve`; the CLI alone
refuses them with a clear line. `python -m vigil` and the older spelling
`python -m vigil.cli.main` run the same program. `kubectl vigil audit` takes the
operator's settings (its config file, else the defaults) with the flags on top,
so it reads the buckets with the operator's shard count.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vigil.cli.main import EXIT_BAD_INPUT, main
from vigil.cli.watch import audit_settings
from vigil.settings import Settings

JOB = {
    "apiVersion": "vigil.dev/v1alpha1",
    "kind": "ScheduledJob",
    "metadata": {"name": "preview"},
    "spec": {
        "cron": "0 2 * * *",
        "timezone": "UTC",
        "template": {"spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}},
    },
}


@pytest.mark.parametrize("verb", ["operator", "watchdog"])
def test_a_runtime_verb_goes_to_serve_with_its_config(verb: str, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    served: list[tuple[str, Path | None]] = []

    def serve(command: str, path: Path | None) -> int:
        served.append((command, path))
        return 7

    assert main([verb, "--config", str(config)], serve=serve) == 7
    assert served == [(verb, config)]


def test_the_cli_alone_refuses_a_runtime_verb_naming_the_program_that_runs_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["watchdog"]) == EXIT_BAD_INPUT
    assert "run it as `vigil watchdog`" in capsys.readouterr().err


def python_m(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_python_m_vigil_and_the_older_cli_spelling_run_the_same_program(tmp_path: Path) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(JOB))
    verb = ["next", "-f", str(manifest), "--from", "2026-01-01T00:00:00Z", "--count", "2"]

    new, old = python_m("vigil", *verb), python_m("vigil.cli.main", *verb)

    assert (new.returncode, old.returncode) == (0, 0), new.stderr + old.stderr
    assert "2026-01-01T02:00:00Z" in new.stdout
    assert old.stdout == new.stdout


def test_the_help_lists_the_runtime_verbs_beside_the_plugin_verbs() -> None:
    result = python_m("vigil", "--help")

    assert result.returncode == 0
    for verb in ("operator", "watchdog", "audit", "next"):
        assert verb in result.stdout


def audit_args(**given: object) -> argparse.Namespace:
    args = {"config": None, "repair": False, "grace_seconds": None, "operator_namespace": None}
    return argparse.Namespace(**{**args, **given})


def test_the_audit_reads_the_operators_config_and_the_flags_override_it(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "namespace": "ops",
                "trigger": {"shards": 8},
                "audit": {"chainGraceSeconds": 300, "repair": True},
                "watchdog": {"suspendedMaxAge": "24h"},
            }
        )
    )

    from_file = audit_settings(audit_args(config=config))
    flagged = audit_settings(audit_args(config=config, operator_namespace="other", grace_seconds=5.0, repair=True))

    assert (from_file.namespace, from_file.trigger.shards, from_file.audit.chain_grace_seconds) == ("ops", 8, 300)
    assert from_file.watchdog.suspended_max_age == "24h"
    assert from_file.audit.repair is False  # the config's repair is the operator's; the audit repairs on --repair
    assert (flagged.namespace, flagged.audit.chain_grace_seconds, flagged.audit.repair) == ("other", 5.0, True)
    assert flagged.trigger.shards == 8


def test_without_a_config_the_audit_judges_with_the_operators_defaults() -> None:
    assert audit_settings(audit_args()) == Settings()

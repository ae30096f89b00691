"""`kubectl vigil next -f FILE`: occurrences previewed from a manifest, with no cluster.

Nominal times of a cron job in Europe/London across the spring-forward day and
of an `every` job, printed in UTC; and the errors for input the command cannot
use (an unknown time zone, a file without a ScheduledJob, a missing file, broken
YAML), each exiting 2 with a message that says what is wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from vigil.cli.cluster import REQUEST_TIMEOUT_SECONDS
from vigil.cli.main import EXIT_BAD_INPUT, main, parser

SPRING_FORWARD_FROM = "2026-03-28T00:00:00Z"  # London moves to BST at 01:00 UTC on 2026-03-29


def manifest(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "vigil.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": "preview"},
        "spec": {
            **spec,
            "template": {"spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}},
        },
    }


def write(tmp_path: Path, *docs: dict[str, Any] | None) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def nominal_column(stdout: str) -> list[str]:
    """The first column of the table's rows (header and footnote dropped)."""
    lines = stdout.splitlines()
    assert lines[0].startswith("NOMINAL (UTC)"), stdout
    return [line.split()[0] for line in lines[1:] if not line.startswith("(")]


def run_next(path: Path, *, start: str, count: int = 3) -> int:
    return main(["next", "-f", str(path), "--from", start, "--count", str(count)])


def test_cron_in_london_keeps_0200_local_across_spring_forward(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, manifest(cron="0 2 * * *", timezone="Europe/London"))

    assert run_next(path, start=SPRING_FORWARD_FROM) == 0

    out = capsys.readouterr().out
    assert nominal_column(out) == [
        "2026-03-28T02:00:00Z",  # GMT: 02:00 local is 02:00 UTC
        "2026-03-29T01:00:00Z",  # BST from 01:00 UTC that day: 02:00 local is 01:00 UTC
        "2026-03-30T01:00:00Z",
    ]
    assert "2026-03-29T02:00:00+01:00" in out  # the local column shows the wall clock kept


def test_every_job_counts_from_its_anchor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Without a cluster the anchor is the placeholder creationTimestamp 2026-01-01T00:00:00Z.
    path = write(tmp_path, manifest(every="90m"))

    assert run_next(path, start="2026-01-01T01:00:00Z") == 0

    assert nominal_column(capsys.readouterr().out) == [
        "2026-01-01T01:30:00Z",
        "2026-01-01T03:00:00Z",
        "2026-01-01T04:30:00Z",
    ]


def test_the_scheduled_job_is_found_among_other_documents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}}
    path = write(tmp_path, config_map, None, manifest(cron="30 6 * * *", timezone="UTC"))

    assert run_next(path, start="2026-06-01T07:00:00Z", count=2) == 0

    assert nominal_column(capsys.readouterr().out) == ["2026-06-02T06:30:00Z", "2026-06-03T06:30:00Z"]


def test_unknown_timezone_exits_2_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, manifest(cron="0 2 * * *", timezone="Europe/Londres"))

    assert run_next(path, start=SPRING_FORWARD_FROM) == EXIT_BAD_INPUT

    captured = capsys.readouterr()
    assert "spec.timezone" in captured.err
    assert "Europe/Londres" in captured.err
    assert captured.out == ""


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "no ScheduledJob found", id="other-kind"),
        pytest.param("", "no ScheduledJob found", id="empty"),
        pytest.param("- 1\n- 2\n", "no ScheduledJob found", id="not-a-mapping"),
        pytest.param("spec: [\n", "not valid YAML", id="broken-yaml"),
    ],
)
def test_a_file_without_a_usable_scheduled_job_exits_2_saying_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str
) -> None:
    path = tmp_path / "input.yaml"
    path.write_text(content)

    assert run_next(path, start=SPRING_FORWARD_FROM) == EXIT_BAD_INPUT

    err = capsys.readouterr().err
    assert expected in err
    assert str(path) in err


def test_a_missing_file_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "absent.yaml"

    assert run_next(missing, start=SPRING_FORWARD_FROM) == EXIT_BAD_INPUT

    err = capsys.readouterr().err
    assert str(missing) in err
    assert "No such file" in err


class TestRequestTimeout:
    """`--request-timeout` bounds every API request of a command (default 30 s)."""

    @pytest.mark.parametrize(("given", "seconds"), [("30", 30.0), ("1.5s", 1.5), ("2m", 120.0)])
    def test_it_reads_seconds_or_minutes(self, given: str, seconds: float) -> None:
        assert parser().parse_args(["--request-timeout", given, "next", "-f", "x"]).request_timeout == seconds

    def test_it_defaults_to_thirty_seconds(self) -> None:
        assert parser().parse_args(["next", "-f", "x"]).request_timeout == REQUEST_TIMEOUT_SECONDS == 30.0

    @pytest.mark.parametrize("given", ["soon", "0", "-3s"])
    def test_a_bad_one_is_refused_naming_the_flag(self, given: str, capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit) as exited:
            main(["--request-timeout", given, "next", "-f", "x"])
        assert exited.value.code == EXIT_BAD_INPUT
        assert "--request-timeout" in capsys.readouterr().err

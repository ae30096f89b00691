"""The CLI's surface, with no cluster: global flags, `-o`, `--help`, shell completion.

`--kubeconfig`, `--context`, `--as` and `--as-group` are accepted before any
verb and every `Cluster` made after honours them (the server, the default
namespace and the impersonation headers come from what they name); under `--as`
the operator's HTTP API is never sent the caller's own token. Every verb
that prints takes `-o table|json|yaml` (`complete` excepted: its `--output` is
the step's output), and `-o json`/`yaml` prints data that parses. `worker` is
in `--help`. The completion scripts are generated from the parser: run in
bash, they complete verbs, subverbs and an option's choices.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from vigil.cli import cluster as cluster_module
from vigil.cli.cluster import Cluster, Connection, set_connection
from vigil.cli.completion import bash_script, candidates, cobra_answer, walk, zsh_script
from vigil.cli.main import EXIT_BAD_INPUT, main, parser
from vigil.cli.operatorapi import HistoryNotShown, connect
from vigil.cli.output import FORMATS, column_key, plain, render

#: Verbs that print nothing a program would read: they run a process, or print a script.
#: `console` prints only the address it forwards, and holds the port-forward open.
NOT_PRINTING = {"operator", "watchdog", "worker", "completion", "console"}
#: `complete --output JSON` is the step's output (an older flag than -o), so `complete` has no -o.
OUTPUT_TAKEN = {"complete"}
#: `logs` prints the log itself, as `kubectl logs` does (which has no -o either).
RAW_TEXT = {"logs"}


def leaves(p: argparse.ArgumentParser, path: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, p
    for action in subs:
        for name, child in action.choices.items():
            yield from leaves(child, f"{path} {name}".strip())


@pytest.fixture(autouse=True)
def fresh_connection() -> Iterator[None]:
    yield
    set_connection(Connection())


def test_every_verb_that_prints_takes_output_json_and_yaml() -> None:
    missing = []
    for path, leaf in leaves(parser()):
        if path in NOT_PRINTING | OUTPUT_TAKEN | RAW_TEXT:
            continue
        option = next((a for a in leaf._actions if "-o" in a.option_strings), None)
        if option is None or tuple(option.choices or ()) != FORMATS:
            missing.append(path)
    assert missing == []


def test_worker_is_listed_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = capsys.readouterr().out
    assert "worker" in listed and "run a volume-tier worker" in listed


def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "vigil.dev/v1alpha1", "kind": "ScheduledJob", "metadata": {"name": "hourly"},
        "spec": {"cron": "0 * * * *", "jitter": "0s",
                 "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}},
    }))  # fmt: skip
    return path


@pytest.mark.parametrize("output, load", [("json", json.loads), ("yaml", yaml.safe_load)])
def test_next_prints_data_that_parses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str, load: Any
) -> None:
    argv = ["--context", "prod", "next", "-f", str(manifest(tmp_path)), "--from", "2026-08-01T00:30:00Z",
            "--count", "2", "-o", output]  # fmt: skip
    assert main(argv) == 0
    data = load(capsys.readouterr().out)
    assert [o["nominal"] for o in data["occurrences"]] == ["2026-08-01T01:00:00Z", "2026-08-01T02:00:00Z"]
    assert data["occurrences"][0]["periodStart"] == "2026-08-01T00:00:00Z"


def kubeconfig(tmp_path: Path) -> Path:
    def context(name: str, port: int, namespace: str) -> dict[str, Any]:
        return {"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}

    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "dev",
        "clusters": [{"name": n, "cluster": {"server": f"https://127.0.0.1:{p}"}} for n, p in (("dev", 6443), ("prod", 7443))],
        "users": [{"name": n, "user": {"token": f"token-{n}"}} for n in ("dev", "prod")],
        "contexts": [context("dev", 6443, "team-dev"), context("prod", 7443, "team-prod")],
    }))  # fmt: skip
    return path


def test_a_cluster_uses_the_kubeconfig_and_context_named(tmp_path: Path) -> None:
    path = str(kubeconfig(tmp_path))
    set_connection(Connection(kubeconfig=path))
    dev = Cluster()
    assert (dev.api.configuration.host, dev.default_namespace) == ("https://127.0.0.1:6443", "team-dev")
    set_connection(Connection(kubeconfig=path, context="prod"))
    prod = Cluster()
    assert (prod.api.configuration.host, prod.default_namespace) == ("https://127.0.0.1:7443", "team-prod")
    assert "Impersonate-User" not in prod.api.default_headers


def test_a_cluster_impersonates_whom_as_names(tmp_path: Path) -> None:
    set_connection(Connection(kubeconfig=str(kubeconfig(tmp_path)), impersonate="alice", impersonate_group="editors"))
    api = Cluster().api
    assert api.default_headers["Impersonate-User"] == "alice"
    assert api.default_headers["Impersonate-Group"] == "editors"


def test_main_sets_the_connection_from_the_global_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(kubeconfig(tmp_path))
    assert main(["--kubeconfig", path, "--context", "prod", "next", "-f", str(manifest(tmp_path)), "--count", "1"]) == 0
    assert cluster_module.connection() == Connection(kubeconfig=path, context="prod")


def test_as_group_without_as_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--as-group", "editors", "next", "-f", str(manifest(tmp_path))]) == EXIT_BAD_INPUT
    assert "--as-group needs --as" in capsys.readouterr().err


def test_a_missing_kubeconfig_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--kubeconfig", str(tmp_path / "absent"), "occurrences", "x"]) == EXIT_BAD_INPUT
    assert "cannot use the kubeconfig" in capsys.readouterr().err


def test_the_operators_api_is_not_called_with_your_own_token_under_as() -> None:
    set_connection(Connection(impersonate="alice"))
    with pytest.raises(HistoryNotShown, match="--as reaches the API server only"):
        connect("http://127.0.0.1:8080", environ={}, kube_token=lambda: "my-own-token")
    assert connect("http://127.0.0.1:8080", environ={"VIGIL_API_TOKEN": "alices"}, kube_token=lambda: "mine").token == "alices"
    set_connection(Connection())
    assert connect("http://127.0.0.1:8080", environ={}, kube_token=lambda: "my-own-token").token == "my-own-token"


def test_column_keys() -> None:
    assert [column_key(h) for h in ("EXECUTION", "PERIOD START", "SUSPENDED FOR", "NOMINAL (UTC)")] == [
        "execution", "periodStart", "suspendedFor", "nominalUtc",
    ]  # fmt: skip


# --- completion ---------------------------------------------------------------------------------


def complete(script: str, *words: str) -> list[str]:
    """What bash offers after `words` (the last one being completed), with the script sourced."""
    array = " ".join(f"'{w}'" for w in ("kubectl-vigil", *words))
    program = f'{script}\nCOMP_WORDS=({array}); COMP_CWORD={len(words)}; _vigil; printf "%s\\n" "${{COMPREPLY[@]}}"'
    out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True).stdout
    return sorted(filter(None, out.split("\n")))


def test_bash_completes_verbs_subverbs_and_choices() -> None:
    script = bash_script(parser())
    assert {"run", "suspend", "resume", "completion", "worker", "queue"} <= set(complete(script, ""))
    assert complete(script, "su") == ["suspend"]
    assert complete(script, "--context", "prod", "qu") == ["queue"]
    assert complete(script, "queue", "st") == ["stats"]
    assert complete(script, "run", "nightly", "-o", "") == ["json", "table", "yaml"]
    assert {"bash", "zsh"} <= set(complete(script, "completion", ""))
    assert "--request-id" in complete(script, "run", "--")


def test_kubectls_plugin_completion_answers_as_the_script_does() -> None:
    """`kubectl_complete-vigil WORDS` offers what the bash script offers, in cobra's format."""
    script = bash_script(parser())
    for words in [("",), ("su",), ("--context", "prod", "qu"), ("queue", "st"), ("run", "nightly", "-o", ""),
                  ("completion", ""), ("run", "--")]:  # fmt: skip
        assert sorted(candidates(parser(), list(words))) == complete(script, *words), words
    assert cobra_answer(["json", "yaml"]) == "json\nyaml\n:4\n"


def test_the_scripts_cover_every_command_path() -> None:
    script = bash_script(parser())
    for node in walk(parser()):
        for command in node.commands:
            assert command in script
    assert zsh_script(parser()).count("bashcompinit") == 2
    assert zsh_script(parser()).endswith(script)


def test_completion_prints_the_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "bash"]) == 0
    assert capsys.readouterr().out == bash_script(parser())


def test_plain_data_for_json_and_yaml() -> None:
    when = datetime(2026, 8, 1, 2, 0, tzinfo=UTC)
    assert plain({"at": when, "fine": when.replace(microsecond=5), "naive": when.replace(tzinfo=None)}) == {
        "at": "2026-08-01T02:00:00Z", "fine": "2026-08-01T02:00:00.000005+00:00", "naive": "2026-08-01T02:00:00",
    }  # fmt: skip
    assert yaml.safe_load(render({"rows": [{"at": when}]}, "yaml")) == {"rows": [{"at": "2026-08-01T02:00:00Z"}]}

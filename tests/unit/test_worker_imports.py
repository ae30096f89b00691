"""What a `vigil worker` process imports: what its start pays for before the first lease.

Each path runs in a fresh interpreter (a subprocess) and reports its `sys.modules`:

* `help`: the entry point's dispatch of `vigil worker --help` (and of bad input): it loads
  none of the heavy modules, not even the PostgreSQL driver, asyncio or the metrics.
* `run`: the whole way to the first lease, through the entry point itself
  (`vigil.__main__.main(["worker", ...])`): the arguments read, a task module imported, the
  loop started, up to its first connection, which fails at once (no server at that socket)
  and ends the probe. The PostgreSQL driver, asyncio and the Prometheus client belong to it;
  the Kubernetes client, the CRD models, pydantic, YAML, Jinja2, SQLAlchemy and the operator's
  adapters never do, nor the parts of the store and of the core that only the operator uses
  (submit, upkeep, the trigger's chains and schedules, the declarative tier's executions).

No timing here: the start's duration is `make bench queue`'s figure; this keeps what it pays
for from growing back unnoticed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

OPERATOR = Path(__file__).resolve().parents[2] / "operator"

PROBES = {
    "help": """
import contextlib, io, json, sys
from vigil.__main__ import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(["worker", "--help"])
    except SystemExit:
        pass
print(json.dumps(sorted(sys.modules)))
""",
    "run": """
import contextlib, io, json, sys, types
from vigil.__main__ import main
sys.modules["probe_tasks"] = types.ModuleType("probe_tasks")  # what --tasks imports
from vigil.worker import task
task("probe")(lambda ctx: None)
with contextlib.redirect_stderr(io.StringIO()):
    try:
        main(["worker", "--queue", "probe", "--tasks", "probe_tasks", "--dsn", "host=/nonexistent/vigil-probe"])
    except Exception as error:  # the first connection fails: the start got that far
        assert type(error).__name__ == "OperationalError", error
    else:
        raise AssertionError("the worker ran without a database")
print(json.dumps(sorted(sys.modules)))
""",
}

#: Never in a worker process.
NEVER = ("kubernetes", "pydantic", "yaml", "croniter", "alembic", "sqlalchemy", "jinja2", "vigil.cli",
         "vigil.runtime", "vigil.kube", "vigil.model", "vigil.settings", "vigil.api", "vigil.history")  # fmt: skip
#: Loaded by the loop, not by `--help`.
LOOP_ONLY = ("psycopg", "asyncio", "prometheus_client", "vigil.metrics", "vigil.queue.workerstore", "vigil.worker.running")
#: The operator's parts of the queue store and the core, which a worker never runs: the store's
#: composition (`vigil.queue.store`: submit, upkeep), the ports module that loads the trigger's
#: core (chains, schedules, buckets), and the declarative tier's executions and dispatch (the
#: worker needs only their retry policy, vigil.core.backoff).
OPERATOR_ONLY = ("vigil.queue.store", "vigil.queue.submitstore", "vigil.queue.upkeepstore", "vigil.core.ports",
                 "vigil.core.chain", "vigil.core.schedule", "vigil.core.buckets", "vigil.core.executions",
                 "vigil.core.dispatch")  # fmt: skip


def loaded(path: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(OPERATOR)}
    answer = subprocess.run(
        [sys.executable, "-c", PROBES[path]], env=env, capture_output=True, text=True, check=True, timeout=120
    )
    return set(json.loads(answer.stdout))


@pytest.fixture(scope="module")
def modules() -> dict[str, set[str]]:
    return {path: loaded(path) for path in PROBES}


def rows() -> list[object]:
    found: list[object] = []
    for module in (*NEVER, *LOOP_ONLY, *OPERATOR_ONLY):
        found.append(pytest.param("help", module, id=f"help-{module}"))
    for module in (*NEVER, *OPERATOR_ONLY):
        found.append(pytest.param("run", module, id=f"run-{module}"))
    return found


@pytest.mark.parametrize(("path", "module"), rows())
def test_a_worker_does_not_import(modules: dict[str, set[str]], path: str, module: str) -> None:
    assert module not in modules[path]


def test_the_loop_path_loads_what_the_loop_needs(modules: dict[str, set[str]]) -> None:
    """The probe itself works: the run path does load the driver, the loop and the store."""
    assert set(LOOP_ONLY) <= modules["run"]

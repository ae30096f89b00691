"""What a `vigil worker` process imports: what its start pays for before the first lease.

Each path runs in a fresh interpreter (a subprocess) and reports its `sys.modules`:

* `help`: the entry point's dispatch of `vigil worker --help` (and of bad input): it loads
  none of the heavy modules, not even the PostgreSQL driver, asyncio or the metrics.
* `run`: what the worker's loop imports once its arguments are read (`vigil.worker.command.run`:
  the loop, the queue store, the metrics). The PostgreSQL driver, asyncio and the Prometheus
  client belong to it; the Kubernetes client, the CRD models, pydantic, YAML and the operator's
  adapters never do. SQLAlchemy and Jinja2 still come in through `vigil.queue.store`'s
  module-level imports (migrations and the recurring-job catalogue, which a worker never runs):
  those rows are expected to fail until that module loads them lazily.
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
import json, sys
import vigil.__main__, vigil.worker.command
import vigil.worker.running, vigil.worker.tasks, vigil.queue.store, vigil.metrics  # what run() imports
print(json.dumps(sorted(sys.modules)))
""",
}

#: Never in a worker process.
NEVER = ("kubernetes", "pydantic", "yaml", "croniter", "alembic", "vigil.cli", "vigil.runtime", "vigil.kube",
         "vigil.model", "vigil.settings", "vigil.api", "vigil.history")  # fmt: skip
#: Loaded by the loop, not by `--help`.
LOOP_ONLY = ("psycopg", "asyncio", "prometheus_client", "vigil.metrics", "vigil.queue.store", "vigil.worker.running")
#: What vigil.queue.store uses only for the operator (migrations, the catalogue's templates): it
#: loads them on use, never on a worker's path.
STORE_TOP = ("sqlalchemy", "jinja2")


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
    for module in (*NEVER, *LOOP_ONLY, *STORE_TOP):
        found.append(pytest.param("help", module, id=f"help-{module}"))
    for module in (*NEVER, *STORE_TOP):
        found.append(pytest.param("run", module, id=f"run-{module}"))
    return found


@pytest.mark.parametrize(("path", "module"), rows())
def test_a_worker_does_not_import(modules: dict[str, set[str]], path: str, module: str) -> None:
    assert module not in modules[path]


def test_the_loop_path_loads_what_the_loop_needs(modules: dict[str, set[str]]) -> None:
    """The probe itself works: the run path does load the driver and the store."""
    assert set(LOOP_ONLY) <= modules["run"]

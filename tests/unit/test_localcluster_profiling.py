"""The local API server serves its profiles only when asked (`VIGIL_APISERVER_PROFILING=1`)."""

from __future__ import annotations

import pytest

from e2e.cluster.localcluster import PROFILING_ENV, profiling_flag


@pytest.mark.parametrize(("value", "flag"), [(None, "false"), ("0", "false"), ("yes", "false"), ("1", "true")])
def test_profiling_is_on_only_when_asked(value: str | None, flag: str) -> None:
    environ = {} if value is None else {PROFILING_ENV: value}
    assert profiling_flag(environ) == f"--profiling={flag}"

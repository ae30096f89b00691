"""The HTTP API's benchmark section is registered and its load generator counts what it sends (bench/api.py).

`make bench api` must reach the section: it is one of `python -m bench`'s sections and its
flags parse there. The load generator (`drive`) is run for a moment against the real server
over a stand-in route, so a section that reports nothing because it sent nothing cannot pass
for a fast one. The full figures are benchmarks, never run here.
"""

from __future__ import annotations

import pytest

from bench import __main__ as bench_main
from bench import api as api_bench
from vigil.api.router import ApiServer


def test_the_api_section_is_one_of_the_benchmarks_and_its_flags_parse(capsys: pytest.CaptureFixture[str]) -> None:
    assert "api" in bench_main.SECTIONS
    with pytest.raises(SystemExit) as done:
        bench_main.main(["api", "--api-rate", "20", "--api-seconds", "1", "--help"])
    assert done.value.code == 0
    assert "--api-rate" in capsys.readouterr().out


def test_the_load_generator_sends_every_request_on_keep_alive_connections() -> None:
    api = ApiServer(leader=lambda: None, find_execution=lambda execution_id: None, timeline=lambda execution_id: [])
    serving = api.serve(0)
    try:
        got = api_bench.drive(serving.server_address[1], ["/healthz"], rate=40, seconds=0.5, connections=2)
    finally:
        serving.shutdown()
        serving.server_close()
    assert (got.expected, len(got.ms), got.errors) == (20, 20, 0)
    assert all(ms >= 0 for ms in got.ms)

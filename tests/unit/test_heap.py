"""vigil.heap on this machine's glibc: a fragmented heap's free pages go back to the system."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from vigil import heap

# Run apart, so the figures are one small process's and the suite's own heap is left alone:
# 100,000 blocks of 2 KB (malloc's, not pymalloc's), every 50th kept, so the freed ones are
# holes between live blocks that glibc would not give back from the top of the heap.
FRAGMENT = textwrap.dedent(
    """
    import json
    from pathlib import Path
    from vigil import heap

    def rss_mib():
        line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmRSS:"))
        return int(line.split()[1]) / 1024

    blocks = [bytes(2000) for _ in range(100_000)]
    kept = blocks[::50]
    del blocks
    before = rss_mib()
    trimmed = heap.trim()
    print(json.dumps({"before": before, "after": rss_mib(), "trimmed": trimmed, "kept": len(kept)}))
    """
)


@pytest.fixture
def glibc() -> None:
    if heap._glibc() is None:  # the runtime's fallback; every machine this suite runs on has glibc
        pytest.fail("no glibc: vigil.heap would do nothing here")


@pytest.mark.usefixtures("glibc")
def test_trim_gives_a_fragmented_heaps_free_pages_back() -> None:
    out = subprocess.run([sys.executable, "-c", FRAGMENT], check=True, capture_output=True, text=True)
    got = json.loads(out.stdout)
    assert got["trimmed"] is True
    assert got["before"] > 150, got  # ~200 MB were allocated, and freeing most of them kept them resident
    assert got["after"] < got["before"] - 100, got  # the holes went back


@pytest.mark.usefixtures("glibc")
def test_limit_arenas_is_accepted() -> None:
    assert heap.limit_arenas(heap.ARENAS) is True

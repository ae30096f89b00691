"""What a pod or an occurrence costs the machine (bench/cpu.py): on 2 cores the soak's share of the
floor's rate is bounded by how much more CPU an occurrence costs than a bare pod, so the soak
prints that cost beside the floor's."""

from __future__ import annotations

import math
import os
from pathlib import Path

from bench.cpu import CLIENT, TICKS, CpuUse, cpu_seconds, snapshot
from bench.steady import Rate, Soak, cpu_row, soak_rows


def stat(name: str, utime: int, stime: int, cutime: int, cstime: int) -> str:
    """A /proc/<pid>/stat line: pid (comm) state, then fields 4.. with utime at 14."""
    fields = ["S", *["0"] * 10, str(utime), str(stime), str(cutime), str(cstime), *["0"] * 37]
    return f"4242 ({name}) {' '.join(fields)}"


def test_cpu_counts_user_system_and_reaped_children_whatever_the_name() -> None:
    assert cpu_seconds(stat("python", 100, 20, 3, 1)) == 124 / TICKS
    assert cpu_seconds(stat("a) b (c", 7, 0, 0, 0)) == 7 / TICKS  # a name may hold ") "


def test_a_process_not_there_at_both_ends_is_left_out() -> None:
    use = CpuUse.between({"kube-apiserver": 10.0, "old": 1.0}, {"kube-apiserver": 13.0, "new": 5.0}, 100)
    assert dict(use.seconds) == {"kube-apiserver": 3.0}
    assert use.per_item_ms() == 30.0


def test_the_largest_spenders_are_named_the_rest_summed() -> None:
    use = CpuUse({"kube-apiserver": 4.0, "operator": 2.0, "etcd": 1.0, "kube-scheduler": 0.5, CLIENT: 0.5}, 100)
    assert use.shares() == "kube-apiserver 40, operator 20, etcd 10, rest 10"
    assert math.isnan(CpuUse({}, 0).per_item_ms())


def test_the_snapshot_reads_each_pid_file_and_this_process(tmp_path: Path) -> None:
    (tmp_path / "pids").mkdir()
    (tmp_path / "pids" / "kube-apiserver.pid").write_text(f"{os.getpid()}\n")
    (tmp_path / "pids" / "gone.pid").write_text("999999999")
    (tmp_path / "pids" / "garbled.pid").write_text("not a pid")
    seen = snapshot(tmp_path)
    assert set(seen) == {CLIENT, "kube-apiserver"}
    assert abs(seen["kube-apiserver"] - seen[CLIENT]) < 1  # the same process, read twice


def test_the_soak_prints_its_cost_per_occurrence_beside_the_floors_per_pod() -> None:
    floor = Rate(40, 24_000, 0.08, 1, CpuUse({"kube-apiserver": 480.0}, 24_000))  # 20 ms a pod
    row = cpu_row(CpuUse({"kube-apiserver": 264.0, "operator": 96.0}, 6_000), 20, floor)  # 60 ms an occurrence
    assert row.measured.startswith("60 ms (kube-apiserver 44, operator 16")
    assert row.reference == "20 ms per pod (the floor at 40/s)"
    assert row.ratio == "3.00x"


def test_without_the_floor_the_cost_has_no_reference() -> None:
    row = cpu_row(CpuUse({"kube-apiserver": 1.0}, 100), 16, None)
    assert row.reference.startswith("n/a") and row.ratio == "n/a"
    soak = Soak(16, 480, [], [], 0, 0, [], CpuUse({"kube-apiserver": 1.0}, 100))
    assert soak_rows(soak, 600)[-1].figure == "soak 16/s: CPU per occurrence, all processes"
    assert len(soak_rows(Soak(16, 480, [], [], 0, 0, []), 600)) == 4  # not measured: no row

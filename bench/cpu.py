"""CPU spent over a window by a bench cluster's processes and by this process, per process.

A steady rate on this machine is bounded by its cores: what each pod (or occurrence) costs in
CPU, summed over every process that handles it, says how high a rate the cores allow. Read from
/proc: user + system time, with that of reaped children (the node's pod processes), for each
process named by a pid file of the cluster (`<state>/pids/<name>.pid`: the API server, etcd, the
scheduler, the controller manager, the node, an operator) and for this process (`client`: the
floor's creates and deletes; in a soak, its watch).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

CLIENT = "client"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(stat: str) -> float:
    """utime + stime + cutime + cstime of one /proc/<pid>/stat line, in seconds."""
    fields = stat.rsplit(")", 1)[1].split()  # the name in parentheses may hold spaces
    return sum(int(f) for f in fields[11:15]) / TICKS


def snapshot(state: Path) -> dict[str, float]:
    """CPU seconds so far of each process with a pid file under `state`, and of this one."""
    pids = {CLIENT: os.getpid()}
    for pidfile in sorted((state / "pids").glob("*.pid")):
        try:
            pids[pidfile.stem] = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            continue
    seconds: dict[str, float] = {}
    for name, pid in pids.items():
        try:
            seconds[name] = cpu_seconds(Path(f"/proc/{pid}/stat").read_text())
        except OSError:
            continue  # gone
    return seconds


@dataclasses.dataclass(frozen=True)
class CpuUse:
    """CPU seconds each process spent over a window, and what the window handled (pods, occurrences)."""

    seconds: Mapping[str, float]
    handled: int

    @staticmethod
    def between(before: Mapping[str, float], after: Mapping[str, float], handled: int) -> CpuUse:
        """Processes present at both ends only: one that started or ended inside the window is
        not measured whole."""
        return CpuUse({n: after[n] - before[n] for n in after if n in before}, handled)

    def per_item_ms(self) -> float:
        """Milliseconds of CPU, over all processes, per pod or occurrence handled."""
        return 1000 * sum(self.seconds.values()) / self.handled if self.handled else float("nan")

    def shares(self, top: int = 3) -> str:
        """The largest spenders, in ms per item: `kube-apiserver 31, operator 12, ...`."""
        ranked = sorted(self.seconds.items(), key=lambda kv: -kv[1])
        head = ", ".join(f"{name} {1000 * s / self.handled:.0f}" for name, s in ranked[:top])
        rest = sum(s for _, s in ranked[top:])
        return f"{head}, rest {1000 * rest / self.handled:.0f}" if self.handled else "n/a"

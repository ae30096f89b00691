"""The workflows' floor runs the graph as a workflow would: a step's pod only once every pod it
depends on has Succeeded, each exactly once, the roots at once (bench/dagfloor.py). The API server
is a stand-in that records the creates: the bookkeeping is what is tested here; the bench runs it
against the real one."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from bench.dagfloor import Graph, Runner, pod_name
from bench.workflows import ten_steps


class Creates:
    def __init__(self) -> None:
        self.names: list[str] = []
        self._lock = threading.Lock()

    def create_namespaced_pod(self, namespace: str, body: dict[str, Any]) -> None:
        with self._lock:
            self.names.append(body["metadata"]["name"])


def run(ends: list[str], count: int = 2) -> list[str]:
    core = Creates()
    runner = Runner(SimpleNamespace(core=core), "ns", Graph(ten_steps()), count)
    runner.start()
    for name in ends:
        runner.ended(name)
    runner.close(wait=True)
    return sorted(core.names)


def test_only_the_roots_start():
    assert run([]) == [pod_name(0, "s0"), pod_name(1, "s0")]


def test_a_step_starts_once_what_it_depends_on_succeeded_and_only_in_its_own_copy():
    created = run([pod_name(1, "s0"), pod_name(1, "s1")])
    fans = [pod_name(1, f"f{i}") for i in range(8)]
    assert created == sorted([pod_name(0, "s0"), pod_name(1, "s0"), pod_name(1, "s1"), *fans])


def test_a_step_waiting_for_two_starts_after_the_second():
    steps = [{"id": "a"}, {"id": "b"}, {"id": "c", "dependsOn": ["a", "b"]}]
    core = Creates()
    runner = Runner(SimpleNamespace(core=core), "ns", Graph(steps), 1)
    runner.ended(pod_name(0, "a"))
    runner.close(wait=True)
    assert core.names == []
    runner = Runner(SimpleNamespace(core=core), "ns", Graph(steps), 1)
    runner.ended(pod_name(0, "a"))
    runner.ended(pod_name(0, "b"))
    runner.close(wait=True)
    assert core.names == [pod_name(0, "c")]

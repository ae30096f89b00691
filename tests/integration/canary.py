"""Another tenant's job beside hostile input: a canary that fires every 2 s in a namespace of its
own, and the check that every occurrence it had while the hostile input was fed fired on time.

    canary = Canary.start(cluster)          # its namespace, its job, its first occurrence fired
    ...                                      # the hostile input, in another namespace
    canary.assert_fired_on_time()            # every occurrence since start: Fired, none late
    canary.remove()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import (
    create_job,
    delete_namespaces,
    make_namespace,
    parse_time,
    wait_for_ledger,
)

#: How often the canary is due.
EVERY = timedelta(seconds=2)
#: How late a canary occurrence may fire on this shared machine (the bench's target is 1 s p99).
CANARY_LAG = timedelta(seconds=3)


def now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Canary:
    cluster: KubeCluster
    namespace: str
    name: str = "canary"
    since: datetime = field(default_factory=now)

    @classmethod
    def start(cls, cluster: KubeCluster, *, name: str = "canary") -> Canary:
        """The canary's namespace and job, once its first occurrence is in its ledger; the window
        checked by :meth:`assert_fired_on_time` opens then."""
        namespace = make_namespace(cluster, "canary")
        create_job(cluster, namespace, name, every="2s", jitter="0s")
        wait_for_ledger(cluster, namespace, name, through=now(), timeout=30)
        return cls(cluster, namespace, name, since=now())

    def assert_fired_on_time(self) -> list[dict[str, Any]]:
        """Every occurrence due since :meth:`start`: in the ledger, Fired, at most CANARY_LAG late,
        with no gap in the schedule. The occurrences checked, for the caller's own assertions."""
        until = now()
        entries = wait_for_ledger(self.cluster, self.namespace, self.name, through=until + EVERY, timeout=30)
        during = sorted(
            (e for e in entries if self.since <= parse_time(e["nominal"]) <= until), key=lambda e: e["nominal"]
        )
        due = int((until - self.since) / EVERY)
        assert len(during) >= due, f"the canary had {len(during)} occurrences in a window of {due}: {during}"
        assert all(e["outcome"] == "Fired" for e in during), [e for e in during if e["outcome"] != "Fired"]
        late = [e for e in during if parse_time(e["at"]) - parse_time(e["nominal"]) > CANARY_LAG]
        assert not late, f"canary occurrences fired late beside the hostile input: {late}"
        return during

    def remove(self) -> None:
        delete_namespaces(self.cluster, self.namespace)

"""Which operator replica should run which trigger shard: rendezvous hashing with bounded loads, pure.

Every replica computes the same answer from the same set of live replicas, so
they agree on an assignment without talking to each other. Each shard ranks the
replicas by sha256(shard, replica) (rendezvous, or highest random weight,
hashing) and goes to the best-ranked one that holds fewer than
ceil(shards / replicas) so far: plain rendezvous spreads 8 shards over 3
replicas as unevenly as 5/2/1, the bound keeps it to 3/3/2. When a replica dies
its shards go to the survivors, and most other shards stay where they run.
The Leases (vigil.kube.kits.shardleases) make sure that, whatever the replicas
believe, one holds a shard at a time; this module only says who should.
"""

from __future__ import annotations

import collections
import hashlib
import math
from collections.abc import Iterable


def assignment(members: Iterable[str], *, shards: int) -> dict[int, str]:
    """Each shard's owner among `members` (empty when there are none)."""
    everyone = sorted(set(members))
    if not everyone:
        return {}
    cap = math.ceil(shards / len(everyone))
    load: collections.Counter[str] = collections.Counter()
    owners: dict[int, str] = {}
    for shard in range(shards):
        ranked = sorted(everyone, key=lambda member: (_score(shard, member), member), reverse=True)
        owner = next(member for member in ranked if load[member] < cap)
        load[owner] += 1
        owners[shard] = owner
    return owners


def assigned_shards(me: str, members: Iterable[str], *, shards: int) -> set[int]:
    """The shards `me` should run among `members` (`me` counts as a member whatever the list says)."""
    return {shard for shard, owner in assignment({*members, me}, shards=shards).items() if owner == me}


def _score(shard: int, member: str) -> bytes:
    return hashlib.sha256(f"{shard}|{member}".encode()).digest()

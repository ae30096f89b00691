"""Assigning trigger shards to replicas: total, the same from every replica, and balanced."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from vigil.core.shards import assigned_shards, assignment

members_st = st.sets(st.text(alphabet="abcdefghij0123456789-", min_size=1, max_size=12), min_size=1, max_size=6)
shards_st = st.integers(min_value=1, max_value=64)


@given(members=members_st, shards=shards_st)
def test_every_shard_has_exactly_one_owner_and_no_member_more_than_its_share(members: set[str], shards: int) -> None:
    owned = [assigned_shards(m, members, shards=shards) for m in members]
    assert sorted(s for mine in owned for s in mine) == list(range(shards))
    assert max(len(mine) for mine in owned) <= math.ceil(shards / len(members))


@given(members=members_st, shards=shards_st)
def test_every_replica_computes_the_same_assignment_whatever_order_it_lists_members_in(
    members: set[str], shards: int
) -> None:
    listed = sorted(members)
    assert assignment(listed, shards=shards) == assignment(reversed(listed), shards=shards)


def test_eight_shards_over_three_replicas_and_over_the_two_left_after_one_dies() -> None:
    three = ["operator-7d9f-abcde", "operator-7d9f-fghij", "operator-7d9f-klmno"]
    assert sorted(len(assigned_shards(m, three, shards=8)) for m in three) == [2, 3, 3]
    two = three[:2]
    assert sorted(len(assigned_shards(m, two, shards=8)) for m in two) == [4, 4]
    assert assignment([], shards=8) == {}

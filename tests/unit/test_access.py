"""The HTTP API's review cache (vigil.core.access): answers reused for the TTL and no longer,
a bounded number kept (oldest out first), refusals cached like grants, tokens kept only as
digests, and a failed review never cached.
"""

from __future__ import annotations

import pytest

from vigil.core.access import (
    Access,
    CachedAuthenticator,
    CachedAuthorizer,
    ReviewUnavailable,
    TtlCache,
    User,
    token_digest,
)

ALICE = User("alice", groups=("devs",))
GET = Access(verb="get", group="vigil.dev", resource="executions", namespace="ns", name="ex-1")


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Counting:
    """Reviews that count their calls; `fail` makes the next ones raise."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail = False

    def authenticate(self, token: str) -> User | None:
        self.calls += 1
        if self.fail:
            raise ReviewUnavailable("down")
        return ALICE if token == "good" else None

    def allowed(self, user: User, access: Access) -> bool:
        self.calls += 1
        if self.fail:
            raise ReviewUnavailable("down")
        return access.namespace == "ns"


def test_an_answer_is_reused_for_the_ttl_and_then_asked_again() -> None:
    ticks, inner = Ticks(), Counting()
    auth = CachedAuthenticator(inner, TtlCache(ttl_seconds=10, entries=8, ticks=ticks))
    assert auth.authenticate("good") == ALICE
    ticks.now = 9.9
    assert auth.authenticate("good") == ALICE and inner.calls == 1
    ticks.now = 10.0
    assert auth.authenticate("good") == ALICE and inner.calls == 2


def test_a_refusal_is_cached_like_a_grant() -> None:
    ticks, inner = Ticks(), Counting()
    auth = CachedAuthenticator(inner, TtlCache(ttl_seconds=10, entries=8, ticks=ticks))
    authz = CachedAuthorizer(inner, TtlCache(ttl_seconds=10, entries=8, ticks=ticks))
    assert auth.authenticate("bad") is None and auth.authenticate("bad") is None
    other = Access(verb="get", group="vigil.dev", resource="executions", namespace="other")
    assert authz.allowed(ALICE, other) is False and authz.allowed(ALICE, other) is False
    assert authz.allowed(ALICE, GET) is True and authz.allowed(ALICE, GET) is True
    assert inner.calls == 3


def test_a_failed_review_is_not_cached() -> None:
    ticks, inner = Ticks(), Counting()
    authz = CachedAuthorizer(inner, TtlCache(ttl_seconds=10, entries=8, ticks=ticks))
    inner.fail = True
    with pytest.raises(ReviewUnavailable):
        authz.allowed(ALICE, GET)
    inner.fail = False
    assert authz.allowed(ALICE, GET) is True


def test_the_cache_is_bounded_and_evicts_the_oldest() -> None:
    ticks = Ticks()
    cache: TtlCache[str, int] = TtlCache(ttl_seconds=60, entries=3, ticks=ticks)
    for index, key in enumerate("abcd"):
        cache.put(key, index)
    assert len(cache) == 3
    assert cache.get("a") == (False, None)
    assert cache.get("d") == (True, 3)


def test_expired_answers_leave_as_new_ones_come_in() -> None:
    """A caller reading many objects once each (timelines by id) kept `entries` stale decisions."""
    ticks = Ticks()
    cache: TtlCache[str, int] = TtlCache(ttl_seconds=10, entries=100, ticks=ticks)
    for index, key in enumerate("abc"):
        ticks.now = float(index)
        cache.put(key, index)
    ticks.now = 11.0  # "a" (expired at 10) and "b" (at 11) are stale, "c" is fresh until 12
    cache.put("d", 3)
    assert len(cache) == 2
    assert cache.get("c") == (True, 2) and cache.get("d") == (True, 3)


def test_a_zero_ttl_caches_nothing() -> None:
    inner = Counting()
    auth = CachedAuthenticator(inner, TtlCache(ttl_seconds=0, entries=8, ticks=Ticks()))
    auth.authenticate("good")
    auth.authenticate("good")
    assert inner.calls == 2


def test_tokens_are_kept_only_as_digests() -> None:
    cache: TtlCache[str, User | None] = TtlCache(ttl_seconds=60, entries=8, ticks=Ticks())
    CachedAuthenticator(Counting(), cache).authenticate("good")
    assert cache.get(token_digest("good")) == (True, ALICE)
    assert cache.get("good") == (False, None)
    assert "good" not in token_digest("good")

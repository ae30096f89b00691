"""Who is calling, and may they: the HTTP API's questions to the API server, and their cache.

The operator's HTTP API serves what the API server would refuse to most callers (an
execution's spec, status, failure messages and history rows), so it asks the API server the
same two questions a delegated-auth server asks (metrics-server, Argo Server): *who is this
bearer token?* (a TokenReview) and *may that user do this?* (a SubjectAccessReview, e.g. `get
executions` in the execution's namespace). Kubernetes RBAC stays the one place access is
granted; the operator grants nothing of its own.

Both answers are cached briefly (seconds, a bounded number of entries, oldest evicted first),
like the API server's own delegating authenticator and authorizer: a burst of requests costs
one review, and a revoked binding or token stops working within the TTL. Tokens are kept only
as SHA-256 digests. The adapters (vigil.kube.kits.accessreview) make the calls; this module is pure.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar


@dataclasses.dataclass(frozen=True, slots=True)
class User:
    """An authenticated caller, as the TokenReview described them."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    #: Extra attributes (e.g. the pod a ServiceAccount token is bound to), passed on to reviews.
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Access:
    """What a request does, in a SubjectAccessReview's resource attributes.

    ``namespace=""`` asks about every namespace (a ClusterRole binding); ``name=""`` about any
    object of the kind; ``subresource`` (e.g. "executions" of ``taskqueues``) asks about that
    subresource instead of the object itself, as RBAC's ``taskqueues/executions``.
    """

    verb: str
    group: str
    resource: str
    namespace: str = ""
    name: str = ""
    subresource: str = ""


class ReviewUnavailable(Exception):
    """The API server could not answer (down, timed out, refused the operator): try again later."""


class Authenticator(Protocol):
    def authenticate(self, token: str) -> User | None:
        """The token's user; None when the API server does not accept the token.

        Raises ReviewUnavailable when it cannot tell.
        """
        ...


class Authorizer(Protocol):
    def allowed(self, user: User, access: Access) -> bool:
        """Whether RBAC (or whatever authorizes the cluster) lets `user` do `access`.

        Raises ReviewUnavailable when it cannot tell.
        """
        ...


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """At most `entries` answers, each kept `ttl_seconds` (by `ticks`, a monotonic clock).

    Answers that have expired leave as each new one comes in (they are kept in the order they
    expire), not only when read again or pushed out by the count: a caller reading many
    objects once each (an execution's timeline by id) otherwise kept `entries` stale decisions.
    """

    def __init__(self, *, ttl_seconds: float, entries: int, ticks: Callable[[], float]) -> None:
        self._ttl = ttl_seconds
        self._entries = entries
        self._ticks = ticks
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> tuple[bool, V | None]:
        """(True, value) while a fresh value is cached, else (False, None)."""
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return False, None
            expires, value = found
            if self._ticks() >= expires:
                del self._items[key]
                return False, None
            return True, value

    def put(self, key: K, value: V) -> None:
        if self._ttl <= 0 or self._entries <= 0:
            return
        with self._lock:
            now = self._ticks()
            self._items.pop(key, None)
            self._items[key] = (now + self._ttl, value)
            while len(self._items) > self._entries:
                self._items.popitem(last=False)
            while next(iter(self._items.values()))[0] <= now:  # the newest is fresh: it stops there
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def token_digest(token: str) -> str:
    """What the cache keeps of a token: never the credential itself."""
    return hashlib.sha256(token.encode()).hexdigest()


class CachedAuthenticator:
    """An Authenticator that remembers each token's answer (accepted or not) for the TTL."""

    def __init__(self, inner: Authenticator, cache: TtlCache[str, User | None]) -> None:
        self._inner = inner
        self._cache = cache

    def authenticate(self, token: str) -> User | None:
        key = token_digest(token)
        hit, user = self._cache.get(key)
        if hit:
            return user
        user = self._inner.authenticate(token)
        self._cache.put(key, user)
        return user


class CachedAuthorizer:
    """An Authorizer that remembers each (user, access) decision for the TTL."""

    def __init__(self, inner: Authorizer, cache: TtlCache[tuple[User, Access], bool]) -> None:
        self._inner = inner
        self._cache = cache

    def allowed(self, user: User, access: Access) -> bool:
        hit, decision = self._cache.get((user, access))
        if hit and decision is not None:
            return decision
        decision = self._inner.allowed(user, access)
        self._cache.put((user, access), decision)
        return decision

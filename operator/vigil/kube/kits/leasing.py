"""Leader election on a coordination.k8s.io/v1 Lease.

Only the leader triggers, so at most one process enqueues an occurrence. The
rules follow client-go's leaderelection:

* every write to the Lease is conditional on the resourceVersion last read or
  written, so two candidates can never both believe they took it;
* a candidate judges a holder dead by its *own* monotonic clock — the Lease has
  not changed for `lease_duration` since this process first saw that version —
  never by comparing timestamps written by another machine's clock;
* the leader renews `renew_period` after its last renewal was sent (one
  conditional write of the Lease it last wrote; a failed renewal is tried again
  after a quarter period) and gives up if it has not renewed for
  `renew_deadline` (two thirds of the duration), before any standby may take
  over. A renewal counts from the moment it was *sent*, so a slow answer can
  never stretch the leader's claim past what the standbys see. Like client-go,
  which bounds each renewal by the renew deadline, a renewal request may take
  what is left until the deadline, never longer: a slow API server is waited
  for while waiting can still help. The deadline itself is watched by a thread
  of its own, against the injected monotonic clock: a renewal that hangs (a
  half-open connection) cannot keep a leader acting, and `is_leader` turns false
  at the deadline whatever the threads are doing. Losing the lease — the
  deadline passed, or another holder's write found in it — calls `on_lost`,
  which exits the process: a replica that is no longer sure it leads must stop
  acting at once. The elector itself stops too; it never campaigns again;
* every other request of the elector (a standby's polls, the release) takes at
  most `request_timeout`, half the deadline, as every request of the operator
  does (kube/kits/apiclient.py); a 429 on the elector's own client is waited out for
  at most `election_retry_after_cap`;
* a leader shutting down gracefully releases the Lease (clears its holder), so
  a standby takes over at its next poll rather than after a whole duration.

Each write that takes or renews the Lease also brings the API server's time: its answer's
`Date` header, with the monotonic instants the request was sent and answered, goes to
`on_server_time` (`vigil.core.servertime`: the leader's clock is bounded by it, so a clock that
runs ahead of the cluster's fires nothing early).

Runs in its own threads so a busy trigger pass can never starve the renewals.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.ports import Clock
from vigil.core.servertime import ServerTimeReading
from vigil.kube.kits.clocks import SYSTEM_CLOCK

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0  # seconds a claim lasts unrenewed
    renew_period: float = 5.0  # seconds between renewals

    def __post_init__(self) -> None:
        if not 0 < self.renew_period < self.renew_deadline:
            raise ValueError(
                f"the renew period ({self.renew_period}s) must be below the renew deadline "
                f"({self.renew_deadline:g}s, two thirds of the lease duration {self.lease_duration}s)"
            )

    @property
    def renew_deadline(self) -> float:
        """Seconds without a renewal after which the leader stops: a third of the duration before
        any standby may take the Lease (client-go's 10 s of 15)."""
        return self.lease_duration * 2 / 3

    @property
    def election_retry_after_cap(self) -> float:
        """Seconds a 429's Retry-After may make the elector wait: twice that fits between a
        renewal's due time and the deadline."""
        return (self.renew_deadline - self.renew_period) / 2

    @property
    def request_timeout(self) -> float:
        """Seconds any other request of the operator may take (connect and read): half the
        deadline, so a thread stuck on a dead connection notices well before the Lease could
        pass to another replica."""
        return self.renew_deadline / 2


#: The shortest timeout a renewal is sent with (a zero timeout would mean none at all).
MIN_ATTEMPT_SECONDS = 0.1
#: Seconds between checks of the renew deadline: how late after it the leader stops at the most.
#: Reading a clock costs nothing; the margin to the Lease's expiry is a third of its duration.
DEADLINE_CHECK_SECONDS = 0.1


def _micro_time(at: datetime) -> datetime:
    # The client serialises with isoformat(), which drops a zero fraction; MicroTime wants one.
    at = at.astimezone(UTC)
    return at.replace(microsecond=at.microsecond or 1)


def server_time_of(headers: Mapping[str, str] | None, *, sent: float, received: float) -> ServerTimeReading | None:
    """The API server's time from an answer's `Date` header; None without one (or unreadable)."""
    found = next((value for key, value in (headers or {}).items() if key.lower() == "date"), None)
    if not found:
        return None
    try:
        date = parsedate_to_datetime(found)
    except (TypeError, ValueError):
        return None
    if date.tzinfo is None:
        return None
    return ServerTimeReading(date.astimezone(UTC), sent=sent, received=received)


class LeaseApi(Protocol):
    """What the elector uses of `CoordinationV1Api` (a stand-in in unit tests). Its writes that
    take or renew the Lease ask for the answer's headers too (`*_with_http_info`: the object,
    the status and the headers), for the API server's `Date`."""

    def read_namespaced_lease(self, name: str, namespace: str, **kwargs: Any) -> Any: ...
    def create_namespaced_lease_with_http_info(self, namespace: str, body: Any, **kwargs: Any) -> Any: ...
    def replace_namespaced_lease_with_http_info(self, name: str, namespace: str, body: Any, **kwargs: Any) -> Any: ...
    def replace_namespaced_lease(self, name: str, namespace: str, body: Any, **kwargs: Any) -> Any: ...


class LeaderElector:
    def __init__(
        self,
        leases: LeaseApi,
        config: LeaseConfig,
        *,
        on_lost: Callable[[], None],
        on_transition: Callable[[str], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        monotonic: Callable[[], float] = time.monotonic,
        on_server_time: Callable[[ServerTimeReading], None] = lambda reading: None,
    ) -> None:
        self._api = leases
        self._config = config
        self._on_lost = on_lost
        self._on_transition = on_transition or (lambda holder: None)
        #: The wall clock: only the times written into the Lease (acquireTime, renewTime), which
        #: other processes display; nothing here decides by them.
        self._clock = clock
        #: Every decision's clock: expiry, renew deadline, when to renew.
        self._monotonic = monotonic
        #: Told the API server's time on each write of ours that took (its `Date`, timed by `monotonic`).
        self._on_server_time = on_server_time
        self._lock = threading.Lock()  # leading, stopped and the last renewal change together
        self._leading = threading.Event()
        self._stopped = threading.Event()
        self._last_renew = 0.0  # monotonic() when our last successful write was sent
        self._mine: Any = None  # the Lease as our last write left it: the next renewal replaces it
        self._observed: tuple[str, float] | None = None  # (resourceVersion, monotonic() first seen)
        self._holder: str | None = None
        self._threads = [
            threading.Thread(target=self._run, name="leader-election", daemon=True),
            threading.Thread(target=self._guard, name="leader-deadline", daemon=True),
        ]

    @property
    def is_leader(self) -> bool:
        """Leading, and renewed within the deadline: false from the deadline on, even before the
        deadline thread has noticed."""
        return self._leading.is_set() and self._monotonic() - self._last_renew <= self._config.renew_deadline

    @property
    def holder(self) -> str | None:
        return self._holder

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def wait_until_leader(self, timeout: float | None = None) -> bool:
        return self._leading.wait(timeout)

    def stop(self) -> None:
        """Stop campaigning and renewing; a leader no longer counts as one (the Lease expires)."""
        with self._lock:
            self._stopped.set()
            self._leading.clear()

    def release(self) -> None:
        """Stop, and if this process holds the Lease, clear its holder so a standby takes it at
        once instead of waiting out the lease duration (a graceful shutdown: SIGTERM). The write
        is conditional on the version read, so it can never clear another holder's claim."""
        self.stop()
        self._threads[0].join(timeout=self._config.renew_deadline)
        cfg = self._config
        try:
            lease = self._api.read_namespaced_lease(cfg.name, cfg.namespace, _request_timeout=self._timeout())
            if lease.spec.holder_identity != cfg.identity:
                return
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            self._api.replace_namespaced_lease(cfg.name, cfg.namespace, lease, _request_timeout=self._timeout())
            log.info("released lease %s/%s", cfg.namespace, cfg.name)
        except ApiException as err:
            log.warning("lease %s/%s not released (%s %s): it expires instead", cfg.namespace, cfg.name, err.status, err.reason)
        except Exception as err:  # a timeout or a dead connection: the Lease expires on its own
            log.warning("lease %s/%s not released (%s): it expires instead", cfg.namespace, cfg.name, err)

    def check_deadline(self) -> None:
        """Lose the lease if this leader has not renewed within the deadline."""
        silent = self._monotonic() - self._last_renew
        if self._leading.is_set() and silent > self._config.renew_deadline:
            self._lose(f"no renewal for {silent:.1f}s (renew deadline {self._config.renew_deadline:g}s)")

    def _guard(self) -> None:
        while not self._stopped.wait(DEADLINE_CHECK_SECONDS):
            self.check_deadline()

    def _run(self) -> None:
        cfg = self._config
        while not self._stopped.is_set():
            started = self._monotonic()
            renewed = self._attempt()
            if not self.is_leader:
                wait = cfg.renew_period / 2
            elif renewed:  # the next renewal is due a period after this one was sent
                wait = self._last_renew + cfg.renew_period - self._monotonic()
            else:  # a quarter period after the failed attempt began: at once if it timed out
                wait = started + cfg.renew_period / 4 - self._monotonic()
            self._stopped.wait(max(0.0, wait))
        self._leading.clear()  # a write racing stop() may have set it again

    def _timeout(self) -> float:
        """A leader's request may take what is left until its deadline; any other, the
        operator's request timeout."""
        if not self._leading.is_set():
            return self._config.request_timeout
        left = self._last_renew + self._config.renew_deadline - self._monotonic()
        return max(MIN_ATTEMPT_SECONDS, left)

    def _attempt(self) -> bool:
        """One round of acquire-or-renew; whether it wrote the Lease as ours."""
        cfg = self._config
        try:
            return self._try_acquire_or_renew()
        except ApiException as err:
            log.warning("lease %s/%s: %s %s", cfg.namespace, cfg.name, err.status, err.reason)
        except Exception as err:  # urllib3's timeouts and dropped connections among them
            log.warning("lease %s/%s: %s", cfg.namespace, cfg.name, err)
        return False

    def _lose(self, why: str) -> None:
        """Leadership is gone: stop acting and campaigning, then tell the owner."""
        with self._lock:
            if self._stopped.is_set() or not self._leading.is_set():
                return  # stopped on purpose, or already lost
            self._stopped.set()
            self._leading.clear()
        log.error("lost leadership of lease %s/%s: %s", self._config.namespace, self._config.name, why)
        self._on_lost()

    def _try_acquire_or_renew(self) -> bool:
        if self._mine is not None and self._leading.is_set():
            return self._write(self._mine, acquired=self._mine.spec.acquire_time)
        cfg = self._config
        try:
            lease = self._api.read_namespaced_lease(cfg.name, cfg.namespace, _request_timeout=self._timeout())
        except ApiException as err:
            if err.status != 404:
                raise
            return self._create()
        spec = lease.spec
        holder = spec.holder_identity
        self._note_holder(holder)
        version = lease.metadata.resource_version
        if holder == cfg.identity:
            return self._write(lease, acquired=spec.acquire_time)
        if holder and not self._expired(version, spec.lease_duration_seconds or cfg.lease_duration):
            if self._leading.is_set():  # someone else holds it while we think we lead: stop at once
                self._lose(f"the lease is held by {holder}")
            return False
        return self._write(lease, acquired=None, transition=True)

    def _expired(self, version: str, duration: float) -> bool:
        observed = self._observed
        if observed is None or observed[0] != version:
            self._observed = (version, self._monotonic())
            return False
        return self._monotonic() - observed[1] > duration

    def _create(self) -> bool:
        cfg = self._config
        now = self._clock.now()
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=cfg.name, namespace=cfg.namespace),
            spec=self._spec(now, now, transitions=0),
        )
        sent = self._monotonic()
        try:
            answer = self._api.create_namespaced_lease_with_http_info(cfg.namespace, body, _request_timeout=self._timeout())
        except ApiException as err:
            if err.status == 409:
                return False  # someone else created it first; next round reads it
            raise
        return self._became_leader(self._answered(answer, sent=sent), sent=sent)

    def _spec(self, now: datetime, acquired: datetime | None, *, transitions: int) -> client.V1LeaseSpec:
        cfg = self._config
        return client.V1LeaseSpec(
            holder_identity=cfg.identity,
            lease_duration_seconds=max(1, round(cfg.lease_duration)),
            acquire_time=_micro_time(acquired or now),
            renew_time=_micro_time(now),
            lease_transitions=transitions,
        )

    def _write(self, lease: Any, *, acquired: datetime | None, transition: bool = False) -> bool:
        """Replace `lease` with our claim, conditional on its resourceVersion; whether it took."""
        transitions = (lease.spec.lease_transitions or 0) + (1 if transition else 0)
        # replace carries metadata.resourceVersion: the write is conditional on what we last saw
        lease.spec = self._spec(self._clock.now(), acquired, transitions=transitions)
        sent = self._monotonic()
        try:
            answer = self._api.replace_namespaced_lease_with_http_info(
                lease.metadata.name, lease.metadata.namespace, lease, _request_timeout=self._timeout()
            )
        except ApiException as err:
            if err.status == 409:
                self._mine = None  # someone else wrote it: the next round reads it again
                return False
            raise
        return self._became_leader(self._answered(answer, sent=sent), sent=sent)

    def _answered(self, answer: Any, *, sent: float) -> Any:
        """The Lease of a write's answer (the object, the status, the headers); its `Date` goes to
        `on_server_time` first, so a new leader's clock is bounded before it acts."""
        written, _, headers = answer
        reading = server_time_of(headers, sent=sent, received=self._monotonic())
        if reading is not None:
            try:
                self._on_server_time(reading)
            except Exception:  # the time's second opinion must never cost the Lease
                log.exception("lease %s/%s: the API server's time not taken", self._config.namespace, self._config.name)
        return written

    def _became_leader(self, lease: Any, *, sent: float) -> bool:
        with self._lock:
            if self._stopped.is_set():  # a write that raced stop() or a loss claims nothing
                return False
            self._mine = lease
            self._last_renew = sent
            if self._leading.is_set():
                return True
            self._leading.set()
        log.info("acquired leadership as %s", self._config.identity)
        self._note_holder(self._config.identity)
        return True

    def _note_holder(self, holder: str | None) -> None:
        if holder != self._holder:
            self._holder = holder
            self._on_transition(holder or "")

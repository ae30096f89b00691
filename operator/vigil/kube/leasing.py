"""Leader election on a coordination.k8s.io/v1 Lease.

Only the leader triggers, so at most one process enqueues an occurrence. The
rules follow client-go's leaderelection:

* every write to the Lease is conditional on the resourceVersion just read, so
  two candidates can never both believe they took it;
* a candidate judges a holder dead by its *own* monotonic clock — the Lease has
  not changed for `lease_duration` since this process first saw that version —
  never by comparing timestamps written by another machine's clock;
* the leader renews every `renew_period` and gives up if it has not renewed for
  `renew_deadline` (two thirds of the duration), before any standby may take
  over. Losing the lease — renewals failing past the deadline, or another
  holder's write found in it — calls `on_lost`, which exits the process: a
  replica that is no longer sure it leads must stop acting at once. The elector
  itself stops too; it never campaigns again;
* a leader shutting down gracefully releases the Lease (clears its holder), so
  a standby takes over at its next poll rather than after a whole duration.

Runs in its own thread so a busy trigger pass can never starve the renewals.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0  # seconds a claim lasts unrenewed
    renew_period: float = 5.0  # seconds between renewals

    @property
    def renew_deadline(self) -> float:
        return self.lease_duration * 2 / 3


def _micro_time(at: datetime) -> datetime:
    # The client serialises with isoformat(), which drops a zero fraction; MicroTime wants one.
    at = at.astimezone(UTC)
    return at.replace(microsecond=at.microsecond or 1)


class LeaderElector:
    def __init__(
        self,
        api: client.ApiClient,
        config: LeaseConfig,
        *,
        on_lost: Callable[[], None],
        on_transition: Callable[[str], None] | None = None,
    ) -> None:
        self._api = client.CoordinationV1Api(api)
        self._config = config
        self._on_lost = on_lost
        self._on_transition = on_transition or (lambda holder: None)
        self._leading = threading.Event()
        self._stopped = threading.Event()
        self._last_renew = 0.0  # monotonic time of our last successful write
        self._observed: tuple[str, float] | None = None  # (resourceVersion, monotonic first seen)
        self._holder: str | None = None
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    @property
    def holder(self) -> str | None:
        return self._holder

    def start(self) -> None:
        self._thread.start()

    def wait_until_leader(self, timeout: float | None = None) -> bool:
        return self._leading.wait(timeout)

    def stop(self) -> None:
        """Stop campaigning and renewing; a leader no longer counts as one (the Lease expires)."""
        self._stopped.set()
        self._leading.clear()

    def release(self) -> None:
        """Stop, and if this process holds the Lease, clear its holder so a standby takes it at
        once instead of waiting out the lease duration (a graceful shutdown: SIGTERM). The write
        is conditional on the version read, so it can never clear another holder's claim."""
        self.stop()
        self._thread.join(timeout=self._config.renew_deadline)
        cfg = self._config
        try:
            lease = self._api.read_namespaced_lease(cfg.name, cfg.namespace)
            if lease.spec.holder_identity != cfg.identity:
                return
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            self._api.replace_namespaced_lease(cfg.name, cfg.namespace, lease)
            log.info("released lease %s/%s", cfg.namespace, cfg.name)
        except ApiException as err:
            log.warning("lease %s/%s not released (%s %s): it expires instead", cfg.namespace, cfg.name, err.status, err.reason)

    def _run(self) -> None:
        cfg = self._config
        while not self._stopped.is_set():
            try:
                self._try_acquire_or_renew()
            except ApiException as err:
                log.warning("lease %s/%s: %s %s", cfg.namespace, cfg.name, err.status, err.reason)
            except Exception:
                log.exception("lease %s/%s: unexpected error", cfg.namespace, cfg.name)
            if self.is_leader and time.monotonic() - self._last_renew > cfg.renew_deadline:
                self._lose(f"no renewal for {time.monotonic() - self._last_renew:.1f}s")
            self._stopped.wait(cfg.renew_period if self.is_leader else cfg.renew_period / 2)
        self._leading.clear()  # a write racing stop() may have set it again

    def _lose(self, why: str) -> None:
        """Leadership is gone: stop acting and campaigning, then tell the owner."""
        log.error("lost leadership of lease %s/%s: %s", self._config.namespace, self._config.name, why)
        self._stopped.set()
        self._leading.clear()
        self._on_lost()

    def _try_acquire_or_renew(self) -> None:
        cfg = self._config
        now = datetime.now(UTC)
        try:
            lease = self._api.read_namespaced_lease(cfg.name, cfg.namespace)
        except ApiException as err:
            if err.status != 404:
                raise
            self._create(now)
            return
        spec = lease.spec
        holder = spec.holder_identity
        self._note_holder(holder)
        version = lease.metadata.resource_version
        if holder == cfg.identity:
            self._write(lease, now, transitions=spec.lease_transitions or 0, acquired=spec.acquire_time)
            return
        if holder and not self._expired(version, spec.lease_duration_seconds or cfg.lease_duration):
            if self.is_leader:  # someone else holds it while we think we lead: stop at once
                self._lose(f"the lease is held by {holder}")
            return
        self._write(lease, now, transitions=(spec.lease_transitions or 0) + 1, acquired=now)

    def _expired(self, version: str, duration: float) -> bool:
        observed = self._observed
        if observed is None or observed[0] != version:
            self._observed = (version, time.monotonic())
            return False
        return time.monotonic() - observed[1] > duration

    def _create(self, now: datetime) -> None:
        cfg = self._config
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=cfg.name, namespace=cfg.namespace),
            spec=self._spec(now, now, transitions=0),
        )
        try:
            self._api.create_namespaced_lease(cfg.namespace, body)
        except ApiException as err:
            if err.status == 409:
                return  # someone else created it first; next round reads it
            raise
        self._became_leader()

    def _spec(self, now: datetime, acquired: datetime | None, *, transitions: int) -> client.V1LeaseSpec:
        cfg = self._config
        return client.V1LeaseSpec(
            holder_identity=cfg.identity,
            lease_duration_seconds=max(1, round(cfg.lease_duration)),
            acquire_time=_micro_time(acquired or now),
            renew_time=_micro_time(now),
            lease_transitions=transitions,
        )

    def _write(self, lease: Any, now: datetime, *, transitions: int, acquired: datetime | None) -> None:
        lease.spec = self._spec(now, acquired, transitions=transitions)
        try:
            # replace carries metadata.resourceVersion: the write is conditional on what we read
            self._api.replace_namespaced_lease(lease.metadata.name, lease.metadata.namespace, lease)
        except ApiException as err:
            if err.status == 409:
                return  # lost the race; the next round re-reads
            raise
        self._became_leader()

    def _became_leader(self) -> None:
        if self._stopped.is_set():  # a write that raced stop() or a loss claims nothing
            return
        self._last_renew = time.monotonic()
        if not self._leading.is_set():
            log.info("acquired leadership as %s", self._config.identity)
            self._note_holder(self._config.identity)
            self._leading.set()

    def _note_holder(self, holder: str | None) -> None:
        if holder != self._holder:
            self._holder = holder
            self._on_transition(holder or "")

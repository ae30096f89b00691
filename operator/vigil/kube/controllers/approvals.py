"""Approval tokens in the cluster: the signing key's Secret, delivery to the notifier, the verb check.

Where tokens never go. A token decides a step in its approver's name, so it is
a credential of that approver, and nobody else may read it: it is never written
to the workflow's namespace (whose Secrets the authors of the workflow may read
through the built-in ``edit`` role), never logged, never put in status. It
reaches its approver through the notifier alone; the operator can mint the
same token again whenever it needs to (tokens are deterministic), so no copy is
kept anywhere.

The key. Every replica signs and verifies with the same HMAC key, kept in the
Secret ``vigil-approval-key`` (settings ``approvals.keySecret``) of the operator
namespace, which only the operator's ServiceAccount (and cluster admins) read.
Whoever needs it first and finds none creates it with 32 random bytes; a
concurrent creator gets AlreadyExists and reads the winner's. A replica re-reads
the Secret after ``approvals.keyRefreshSeconds``. When the key is older than
``approvals.keyRotation.period`` (annotation ``vigil.dev/rotated-at``), the
replica that notices replaces it — conditional on the resourceVersion it read,
so one replica wins — with a new random key, keeping the old one as
``previous``: tokens signed with it still verify for ``keyRotation.overlap``
after the rotation, while the leader sends tokens signed with the new key.
Deleting the Secret is the emergency rotation: a new key, no previous one, and
every outstanding token is refused at once.

Delivery. When an approval step starts waiting (``StepStarted`` of kind
approval), escalates (``Escalated``), or when a token of a step without a
timeout reaches the end of its lifetime, the leader mints one token per current
approver of the step (:mod:`vigil.core.approvaltokens`) and POSTs each, as JSON
with its approve and reject links, to ``approvals.notifier.url``
(:class:`WebhookNotifier`). A token is sent once per process: the publisher
remembers what it delivered, and a token that did not change (an approver kept
across an escalation, a recheck) is not sent again. The sending happens off the
engine: a pass only offers the workflow to a bounded outbox
(:mod:`vigil.kube.kits.outbox`), whose own sender threads read it, mint and POST, so
a notifier that takes its whole timeout holds a sender, never a pass. A failed
delivery is tried again after ``notifier.retrySeconds``, then after twice that,
and so on up to ``recheckSeconds`` (each with up to a fifth more, at random); a
full outbox refuses a new workflow, which its next pass offers again. A new leader sends the tokens of waiting
steps again; each notification carries an ``id`` (a digest of the token) by
which the bridge can drop a repeat. The publisher is level-triggered: a sender reads
the Workflow and sends for every approval step that waits *now*; it is offered on
the first pass this process sees of it, when a pass recorded an approval start or
escalation, when a token's lifetime ends, after a key rotation, and otherwise
every ``approvals.recheckSeconds``. The HTTP callback's own decisions may start
the next approval step: :meth:`TokenPublisher.after_submit` offers those at once.

The verb. A token proves who it was sent to; whether that approver may decide
is the API server's to say, as for a ``kubectl vigil approve``:
:func:`approver_review` is the SubjectAccessReview for the verb ``approve`` on
the workflow, asked as the token's user (or group), which the HTTP callback
makes through the same port as the HTTP API's other reviews
(:class:`vigil.kube.kits.accessreview.AccessReviews`), uncached: a revoked binding
stops the next decision.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import logging
import secrets
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException

from vigil.core.access import Access, User
from vigil.core.approvaltokens import (
    MIN_KEY_BYTES,
    BoundApprover,
    WaitingApproval,
    mint,
    waiting_approvals,
)
from vigil.core.checkpoint import Checkpoint, resume
from vigil.core.ports import Clock, Conflict
from vigil.core.steps import spec_named
from vigil.core.timeparse import format_rfc3339, parse_rfc3339
from vigil.core.workflow import (
    TERMINAL_WORKFLOW_PHASES,
    Event,
    Record,
    normal_approver,
    records_from_data,
)
from vigil.core.workflowpass import Pass
from vigil.kube.kits.conflicts import retry_on_conflict
from vigil.kube.kits.coreapi import CoreApi
from vigil.kube.kits.outbox import Outbox
from vigil.model import GROUP
from vigil.model.names import (
    ANNOTATION_PURPOSE,
    ANNOTATION_ROTATED_AT,
    LABEL_MANAGED,
    MANAGED_BY_APPROVALS,
    WORKFLOWS,
)
from vigil.model.workflowspec import definition_of

log = logging.getLogger(__name__)

KEY_SECRET = "vigil-approval-key"
KEY_FIELD = "key"
PREVIOUS_FIELD = "previous"
KEY_BYTES = 32
#: The RBAC verb that decides an approval, whatever path the decision takes.
APPROVE_VERB = "approve"

FindWorkflow = Callable[[str, str], Mapping[str, Any] | None]


class KeyUnavailable(Exception):
    """The signing key could not be read or created (the API server is down, or RBAC refuses)."""


@dataclasses.dataclass(frozen=True)
class KeyRing:
    """The keys in the Secret: the one that signs, and the one it replaced (and when)."""

    current: bytes
    previous: bytes | None
    rotated_at: datetime


class SigningKey:
    """The shared HMAC key: read from its Secret (created when missing, rotated when old), cached."""

    def __init__(
        self,
        core: CoreApi,
        *,
        namespace: str,
        clock: Clock,
        name: str = KEY_SECRET,
        refresh_seconds: float = 60.0,
        rotation_period: timedelta | None = None,
        overlap: timedelta = timedelta(hours=24),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core = core
        self._namespace = namespace
        self._clock = clock
        self._name = name
        self._refresh = refresh_seconds
        self._period = rotation_period
        self._overlap = overlap
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._ring: KeyRing | None = None
        self._read_at = float("-inf")

    def current(self) -> bytes:
        """The key that signs now."""
        return self._cached().current

    def keys(self) -> list[bytes]:
        """The keys that verify now: the current one, and the previous one during the overlap."""
        ring = self._cached()
        if ring.previous is not None and self._clock.now() < ring.rotated_at + self._overlap:
            return [ring.current, ring.previous]
        return [ring.current]

    def fingerprint(self) -> str:
        """A short digest of the current key: it changes exactly when the key is rotated."""
        return hashlib.sha256(self.current()).hexdigest()[:16]

    def _cached(self) -> KeyRing:
        """The keys; a stale cached ring is kept (and the failure logged) while the API is down."""
        with self._lock:
            if self._ring is None or self._monotonic() - self._read_at >= self._refresh:
                try:
                    self._ring = self._load()
                    self._read_at = self._monotonic()
                except (ApiException, KeyUnavailable) as error:
                    if self._ring is None:
                        raise KeyUnavailable(f"approval key {self._namespace}/{self._name}: {error}") from error
                    log.warning("approval key not re-read (%s); keeping the cached one", error)
            return self._ring

    def _load(self) -> KeyRing:
        try:
            return retry_on_conflict(self._load_once)
        except Conflict:
            raise KeyUnavailable("the key Secret kept changing under every write") from None

    def _load_once(self) -> KeyRing:
        """Read (and rotate), or create; a lost race (404 or 409) is a Conflict: read again."""
        secret = _read_secret(self._core, self._namespace, self._name)
        try:
            if secret is None:
                return self._create()
            ring = self._ring_of(secret)
            if self._due(ring):
                return self._rotate(secret, ring)
            return ring
        except ApiException as error:
            if error.status in (404, 409):
                raise Conflict(f"approval key {self._namespace}/{self._name}: {error.reason}") from error
            raise

    def _due(self, ring: KeyRing) -> bool:
        return self._period is not None and self._clock.now() >= ring.rotated_at + self._period

    def _create(self) -> KeyRing:
        now = self._clock.now()
        key = secrets.token_bytes(KEY_BYTES)
        self._core.create_namespaced_secret(self._namespace, self._body(key, None, now))
        log.info("created approval key Secret %s/%s", self._namespace, self._name)
        return KeyRing(key, None, now)

    def _rotate(self, secret: dict[str, Any], ring: KeyRing) -> KeyRing:
        now = self._clock.now()
        key = secrets.token_bytes(KEY_BYTES)
        body = self._body(key, ring.current, now)
        body["metadata"]["resourceVersion"] = secret["metadata"]["resourceVersion"]
        self._core.replace_namespaced_secret(self._name, self._namespace, body)
        log.info("rotated approval key %s/%s; the previous key verifies until %s",
                 self._namespace, self._name, format_rfc3339(now + self._overlap))  # fmt: skip
        return KeyRing(key, ring.current, now)

    def _body(self, key: bytes, previous: bytes | None, rotated_at: datetime) -> dict[str, Any]:
        data = {KEY_FIELD: _b64(key)}
        if previous is not None:
            data[PREVIOUS_FIELD] = _b64(previous)
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": self._name,
                "namespace": self._namespace,
                "labels": {LABEL_MANAGED: MANAGED_BY_APPROVALS},
                "annotations": {
                    ANNOTATION_PURPOSE: "HMAC keys of approval tokens; delete to refuse every token at once",
                    ANNOTATION_ROTATED_AT: format_rfc3339(rotated_at),
                },
            },
            "type": "Opaque",
            "data": data,
        }

    def _ring_of(self, secret: dict[str, Any]) -> KeyRing:
        data = secret.get("data") or {}
        key = _key_field(data, KEY_FIELD)
        if key is None:
            raise KeyUnavailable(
                f"its '{KEY_FIELD}' has fewer than {MIN_KEY_BYTES} bytes "
                "(delete the Secret and the operator creates a new key)"
            )
        meta = secret.get("metadata") or {}
        created = parse_rfc3339(meta["creationTimestamp"]) if meta.get("creationTimestamp") else None
        stamp = (meta.get("annotations") or {}).get(ANNOTATION_ROTATED_AT)
        try:
            rotated_at = parse_rfc3339(stamp) if stamp else created
        except ValueError:
            rotated_at = created
        if rotated_at is None:
            rotated_at = self._clock.now()
        return KeyRing(key, _key_field(data, PREVIOUS_FIELD), rotated_at)


def _key_field(data: Mapping[str, str], field: str) -> bytes | None:
    encoded = data.get(field)
    key = base64.b64decode(encoded) if encoded else b""
    return key if len(key) >= MIN_KEY_BYTES else None


def _read_secret(core: CoreApi, namespace: str, name: str) -> dict[str, Any] | None:
    """The Secret, or None when there is none of that name."""
    try:
        return core.read_namespaced_secret(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def approval_urls(base_url: str, token: str) -> tuple[str, str]:
    """(approveURL, rejectURL): path-only when ``base_url`` is empty."""
    base = base_url.rstrip("/")
    return f"{base}/approvals/{token}/approve", f"{base}/approvals/{token}/reject"


def starts_waiting(records: Iterable[Record]) -> bool:
    """Whether any record starts an approval step's wait or moves it to a new level."""
    return any(
        (r.event is Event.STEP_STARTED and _awaits_decision(r.detail.get("kind")))
        or r.event is Event.ESCALATED
        for r in records
    )


def _awaits_decision(kind: object) -> bool:
    spec = spec_named(kind)
    return spec is not None and spec.awaits_decision


def notification_id(token: str) -> str:
    """A stable id of one token's notification: a repeat of it has the same id."""
    return hashlib.sha256(token.encode("ascii")).hexdigest()[:32]


def notification(
    meta: Mapping[str, Any], approval: WaitingApproval, bound: BoundApprover, *, token: str, base_url: str
) -> dict[str, Any]:
    """The JSON the notifier receives for one approver of one waiting step."""
    approve, reject = approval_urls(base_url, token)
    return {
        "kind": "ApprovalWaiting",
        "id": notification_id(token),
        "namespace": meta["namespace"],
        "workflow": meta["name"],
        "uid": meta["uid"],
        "step": approval.step,
        "attempt": approval.attempt,
        "level": approval.level,
        "approver": bound.approver,
        "approvers": [a.approver for a in approval.approvers],
        "expires": format_rfc3339(approval.expires),
        "token": token,
        "approveURL": approve,
        "rejectURL": reject,
    }


# --- the notifier -----------------------------------------------------------------------------


class NotifierFailed(Exception):
    """A notification was not accepted (no answer in time, or not a 2xx)."""


class Notifier(Protocol):
    def send(self, body: Mapping[str, Any]) -> None:
        """Deliver one notification; NotifierFailed when it was not accepted."""
        ...


class WebhookNotifier:
    """POSTs each notification as JSON to one URL; any 2xx is delivered."""

    def __init__(self, url: str, *, timeout_seconds: float) -> None:
        self._url = url
        self._timeout = timeout_seconds

    def send(self, body: Mapping[str, Any]) -> None:
        request = urllib.request.Request(
            self._url,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "User-Agent": "vigil-approvals"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as answer:
                status = answer.status
        except urllib.error.HTTPError as error:
            error.close()
            raise NotifierFailed(f"the notifier answered {error.code}") from None
        except (OSError, ValueError) as error:  # refused, unreachable, timed out, a bad URL
            raise NotifierFailed(f"the notifier could not be reached: {error}") from None
        if not 200 <= status < 300:
            raise NotifierFailed(f"the notifier answered {status}")


# --- the verb ---------------------------------------------------------------------------------


def approver_review(namespace: str, workflow: str, approver: str) -> tuple[User, Access]:
    """The SubjectAccessReview that says whether `approver` may decide: the verb `approve` on
    the workflow, asked as the user (``user:NAME``) or as a member of the group
    (``group:NAME``) alone, since a token names one identity and no group memberships."""
    kind, _, name = normal_approver(approver).partition(":")
    user = User(name=name) if kind == "user" else User(name="", groups=(name,))
    return user, Access(verb=APPROVE_VERB, group=GROUP, resource=WORKFLOWS, namespace=namespace, name=workflow)


# --- the publisher ----------------------------------------------------------------------------


class Offering(Protocol):
    """What the publisher needs of its outbox (vigil.kube.kits.outbox.Outbox): to offer a workflow's key."""

    def offer(self, key: tuple[str, str]) -> bool: ...


class TokenPublisher:
    """Sends a token to the notifier for every approver of every waiting step (the leader's half).

    The engine's passes and the HTTP callback only *offer* a workflow (:meth:`on_pass`,
    :meth:`after_submit`: no read, no key, no network); the outbox's sender threads read it,
    mint and POST (:meth:`deliver`), and retry a failed delivery with backoff
    (:mod:`vigil.kube.kits.outbox`). Without an outbox (``outbox=None``: a tool or a test calling
    :meth:`refresh` itself) nothing is offered.
    """

    def __init__(
        self,
        *,
        key: SigningKey,
        notifier: Notifier,
        clock: Clock,
        find_workflow: FindWorkflow,
        default_lifetime: timedelta,
        base_url: str = "",
        recheck: timedelta = timedelta(minutes=10),
        retry: timedelta = timedelta(seconds=30),
    ) -> None:
        self._key = key
        self._notifier = notifier
        self._clock = clock
        self._find = find_workflow
        self._lifetime = default_lifetime
        self._base_url = base_url
        self._recheck = recheck
        self._retry = retry
        self._lock = threading.Lock()
        #: Per workflow checked by this process: when to check it again (a token's lifetime
        #: ends, or `recheck` passed). A workflow missing here is checked on its next pass.
        self._check_at: dict[tuple[str, str], datetime] = {}
        #: Per workflow: the ids of the notifications delivered for its current tokens.
        self._sent: dict[tuple[str, str], frozenset[str]] = {}
        self._fingerprint: str | None = None
        self._outbox: Offering | None = None

    def sending_with(self, outbox: Offering) -> None:
        """Deliver through ``outbox`` (whose deliveries call :meth:`deliver`)."""
        self._outbox = outbox

    # --- hooks (the engine's and the callback's threads: they only offer) ----------------------

    def on_pass(self, done: Pass) -> None:
        """The engine's after-pass hook: offer the workflow when the pass (or anything before it)
        calls for a check. Reads nothing and sends nothing: a slow notifier holds no pass."""
        key = (done.namespace, done.name)
        if done.phase in TERMINAL_WORKFLOW_PHASES:
            self._forget(key)
            return
        with self._lock:
            check_at = self._check_at.get(key)
        if check_at is None or self._clock.now() >= check_at or starts_waiting(done.records):
            self._offer(key)

    def after_submit(self, namespace: str, name: str, records: Sequence[Record]) -> None:
        """After the HTTP callback recorded a decision: offer the workflow when it started an
        approval step (delivered at once by a sender, not in the callback's request)."""
        if starts_waiting(records):
            self._offer((namespace, name))

    def _offer(self, key: tuple[str, str]) -> None:
        if self._outbox is None:
            return
        if not self._outbox.offer(key):
            self._forget(key)  # refused (the outbox is full): due again on the workflow's next pass

    # --- sending (the outbox's sender threads) ------------------------------------------------

    def deliver(self, key: tuple[str, str]) -> bool:
        """One delivery of the outbox's: send what ``key``'s waiting steps have not had yet.
        False (retried with backoff) when a notification was not accepted; an error reading
        the workflow or the key propagates (retried the same way)."""
        self.notice_rotation()
        return self._refresh(*key)[1]

    def refresh(self, namespace: str, name: str) -> list[str]:
        """Read the workflow and send the tokens not yet delivered; the ids of those sent now."""
        return self._refresh(namespace, name)[0]

    def _refresh(self, namespace: str, name: str) -> tuple[list[str], bool]:
        obj = self._find(namespace, name)
        if obj is None:
            self._forget((namespace, name))
            return [], True
        sent, wake, complete = self.deliveries(obj)
        with self._lock:
            self._check_at[(namespace, name)] = wake
        return sent, complete

    def send_tokens(self, workflow: Mapping[str, Any]) -> tuple[list[str], datetime]:
        """Send a token for every approver of every approval step of ``workflow`` that waits now
        and has not had it yet. Returns the ids sent, and when to check the workflow again (after
        ``retry`` when one was not accepted)."""
        sent, wake, complete = self.deliveries(workflow)
        return sent, wake if complete else min(wake, self._clock.now() + self._retry)

    def deliveries(self, workflow: Mapping[str, Any]) -> tuple[list[str], datetime, bool]:
        """:meth:`send_tokens`'s work: the ids sent, when the workflow next needs a check
        unprompted (recheck, or a token's lifetime ending), and whether every token was accepted."""
        meta, status = workflow["metadata"], workflow.get("status") or {}
        now = self._clock.now()
        if not status.get("definition"):
            return [], now + self._recheck, True
        definition = definition_of(status["definition"], uid=meta["uid"])
        checkpoint = Checkpoint.from_data(status.get("checkpoint"))
        state = resume(definition, checkpoint, records_from_data(status.get("history") or []))
        waiting = waiting_approvals(definition, state, now=now, default_lifetime=self._lifetime)
        key = (meta["namespace"], meta["name"])
        with self._lock:
            delivered = self._sent.get(key, frozenset())
        current: set[str] = set()
        sent: list[str] = []
        failed = False
        for approval in waiting:
            for bound in approval.approvers:
                body = self._notification(meta, approval, bound)
                current.add(body["id"])
                if body["id"] in delivered:
                    continue
                try:
                    self._notifier.send(body)
                except NotifierFailed as error:
                    failed = True
                    current.discard(body["id"])
                    log.warning("workflow %s/%s: token for %s (step %s) not delivered: %s",
                                *key, bound.approver, approval.step, error)  # fmt: skip
                    continue
                sent.append(body["id"])
                log.info("workflow %s/%s: token for %s (step %s) delivered",
                         *key, bound.approver, approval.step)  # fmt: skip
        with self._lock:
            self._sent[key] = frozenset(current)
        wakes = [now + self._recheck, *(a.expires for a in waiting if a.renews)]
        return sent, min(wakes), not failed

    def _notification(
        self, meta: Mapping[str, Any], approval: WaitingApproval, bound: BoundApprover
    ) -> dict[str, Any]:
        token = mint(
            self._key.current(),
            namespace=meta["namespace"],
            workflow=meta["name"],
            uid=meta["uid"],
            step=approval.step,
            approver=bound.approver,
            attempt=approval.attempt,
            level=bound.level,
            expires=approval.expires,
        )
        return notification(meta, approval, bound, token=token, base_url=self._base_url)

    # --- bookkeeping --------------------------------------------------------------------------

    def _forget(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._check_at.pop(key, None)
            self._sent.pop(key, None)

    def notice_rotation(self) -> None:
        """A new key signs new tokens: check every workflow again on its next pass (the old
        tokens still verify during the overlap). Reads the key Secret when the cached copy is
        older than ``keyRefreshSeconds``: the runtime calls it that often on a thread of its own,
        and each delivery calls it, never a pass."""
        fingerprint = self._key.fingerprint()
        with self._lock:
            if self._fingerprint is not None and fingerprint != self._fingerprint:
                log.info("approval key rotated: sending new tokens for waiting approval steps")
                self._check_at.clear()
            self._fingerprint = fingerprint


# --- the outbox -----------------------------------------------------------------------------

#: Sender threads of the approval outbox: each holds one POST for up to
#: ``notifier.timeoutSeconds``. Two keep tokens flowing while one waits on a slow answer; more
#: would only open more connections to a notifier that is slow already.
SENDERS = 2
#: Workflows that may wait in the outbox (ready, backing off, or being sent): far above the
#: approval steps a cluster has waiting at once, and a set of names, so a few hundred KiB at most.
#: Past it a new workflow is refused and offered again on its next pass (nothing is lost).
OUTBOX_CAPACITY = 10_000


def approval_outbox(
    publisher: TokenPublisher,
    *,
    retry_seconds: float,
    max_retry_seconds: float,
    on_depth: Callable[[int], None] = lambda depth: None,
    on_failed: Callable[[], None] = lambda: None,
    on_refused: Callable[[], None] = lambda: None,
) -> Outbox[tuple[str, str]]:
    """The outbox that sends ``publisher``'s tokens, wired to it: failed deliveries retried after
    ``retry_seconds``, doubling up to ``max_retry_seconds``. Its senders run in :meth:`Outbox.run`."""
    outbox: Outbox[tuple[str, str]] = Outbox(
        "approval-notifier",
        publisher.deliver,
        senders=SENDERS,
        capacity=OUTBOX_CAPACITY,
        first_retry=retry_seconds,
        max_retry=max_retry_seconds,
        on_depth=on_depth,
        on_failed=on_failed,
        on_refused=on_refused,
    )
    publisher.sending_with(outbox)
    return outbox

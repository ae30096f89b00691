"""Approval tokens in the cluster: the signing key's Secret, and one token Secret per waiting step.

The key. Every replica signs and verifies with the same HMAC key, kept in the
Secret ``vigil-approval-key`` (settings ``approvals.keySecret``) of the operator
namespace. Whoever needs it first and finds none creates it with 32 random
bytes; a concurrent creator gets AlreadyExists and reads the winner's. A
replica re-reads the Secret after ``approvals.keyRefreshSeconds``, so deleting
it rotates the key everywhere within that time: tokens signed with the old key
are refused from then on, and the leader publishes new ones.

The tokens. When an approval step starts waiting (``StepStarted`` of kind
approval), escalates (``Escalated``), or when a step without a timeout reaches
the end of its token's lifetime, the leader mints a token
(:mod:`vigil.core.approvaltokens`) and writes it to the Secret
``<workflow>-approval-<step>`` in the workflow's namespace, owned by the
Workflow (so it is garbage-collected with it)::

    token       the token
    approveURL  <approvals.baseURL>/approvals/<token>/approve
    rejectURL   <approvals.baseURL>/approvals/<token>/reject

The Secret is written only when its content changes; a token is deterministic,
so republishing the same one is a no-op. The publisher is level-triggered: it
reads the Workflow and publishes for every approval step that waits *now*. It
reads a workflow when a pass recorded an approval start or escalation, on the
first pass this process sees of it (so a new leader repairs what a crashed one
left unpublished), when a token's lifetime ends, after a key rotation, and
otherwise every ``approvals.recheckSeconds`` (a deleted token Secret, or a pass
the engine did not report, is repaired then). The HTTP callback's own decisions
may start the next approval step: :meth:`TokenPublisher.after_submit` publishes
those at once.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.approvaltokens import MIN_KEY_BYTES, WaitingApproval, mint, waiting_approvals
from vigil.core.ports import Clock
from vigil.core.timeparse import format_rfc3339
from vigil.core.workflow import Event, Record, StepKind, fold, records_from_data
from vigil.kube.pods import LABEL_MANAGED, label_value, owner_reference
from vigil.kube.workflowpods import LABEL_STEP, LABEL_WORKFLOW, LABEL_WORKFLOW_UID
from vigil.kube.workflows import FINISHED_PHASES, Pass
from vigil.workflowspec import definition_of

log = logging.getLogger(__name__)

KEY_SECRET = "vigil-approval-key"
KEY_FIELD = "key"
KEY_BYTES = 32
MANAGED_BY_APPROVALS = "vigil-approvals"
ANNOTATION_ATTEMPT = "vigil.dev/attempt"
ANNOTATION_LEVEL = "vigil.dev/level"
ANNOTATION_EXPIRES = "vigil.dev/expires"
#: Longest Kubernetes object name (DNS-1123 subdomain).
NAME_MAX = 253
CONFLICT_TRIES = 4  # concurrent writers of one token Secret tolerated

FindWorkflow = Callable[[str, str], Mapping[str, Any] | None]


class KeyUnavailable(Exception):
    """The signing key could not be read or created (the API server is down, or RBAC refuses)."""


class SigningKey:
    """The shared HMAC key: read from its Secret (created when missing), cached for a while."""

    def __init__(
        self,
        core: client.CoreV1Api,
        *,
        namespace: str,
        name: str = KEY_SECRET,
        refresh_seconds: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core = core
        self._namespace = namespace
        self._name = name
        self._refresh = refresh_seconds
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._key: bytes | None = None
        self._read_at = float("-inf")

    def current(self) -> bytes:
        """The key; a stale cached key is kept (and the failure logged) while the API is down."""
        with self._lock:
            if self._key is None or self._monotonic() - self._read_at >= self._refresh:
                try:
                    self._key = self._load()
                    self._read_at = self._monotonic()
                except (ApiException, KeyUnavailable) as error:
                    if self._key is None:
                        raise KeyUnavailable(f"approval key {self._namespace}/{self._name}: {error}") from error
                    log.warning("approval key not re-read (%s); keeping the cached one", error)
            return self._key

    def fingerprint(self) -> str:
        """A short digest of the current key: it changes exactly when the key is rotated."""
        return hashlib.sha256(self.current()).hexdigest()[:16]

    def _load(self) -> bytes:
        for _ in range(3):  # read, or create, or lose the create race and read
            secret = _read_secret(self._core, self._namespace, self._name)
            if secret is not None:
                return self._key_of(secret)
            body = client.V1Secret(
                metadata=client.V1ObjectMeta(
                    name=self._name,
                    namespace=self._namespace,
                    labels={LABEL_MANAGED: MANAGED_BY_APPROVALS},
                    annotations={"vigil.dev/purpose": "HMAC key of approval tokens; delete to rotate"},
                ),
                type="Opaque",
                data={KEY_FIELD: _b64(secrets.token_bytes(KEY_BYTES))},
            )
            try:
                created = self._core.create_namespaced_secret(self._namespace, body)
            except ApiException as error:
                if error.status != 409:
                    raise
                continue  # someone else created it first: read theirs
            log.info("created approval key Secret %s/%s", self._namespace, self._name)
            return self._key_of(created)
        raise KeyUnavailable("the key Secret kept appearing and disappearing")

    def _key_of(self, secret: Any) -> bytes:
        encoded = (secret.data or {}).get(KEY_FIELD)
        key = base64.b64decode(encoded) if encoded else b""
        if len(key) < MIN_KEY_BYTES:
            raise KeyUnavailable(
                f"its '{KEY_FIELD}' has {len(key)} bytes, at least {MIN_KEY_BYTES} needed "
                "(delete the Secret and the operator creates a new key)"
            )
        return key


def _read_secret(core: client.CoreV1Api, namespace: str, name: str) -> Any:
    """The Secret (a V1Secret), or None when there is none of that name."""
    try:
        return core.read_namespaced_secret(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def token_secret_name(workflow: str, step: str) -> str:
    """``<workflow>-approval-<step>`` as an object name.

    Step ids may hold '_', which names may not: it becomes '-', and a short hash of the
    step id is appended so that ``a_b`` and ``a-b`` keep apart. A name past 253 characters
    is cut and ends in a hash of the whole.
    """
    readable = step.replace("_", "-")
    name = f"{workflow}-approval-{readable}"
    if readable != step:
        name += "-" + hashlib.sha256(step.encode()).hexdigest()[:6]
    if len(name) > NAME_MAX:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = re.sub(r"[-.]+$", "", name[: NAME_MAX - len(digest) - 1]) + "-" + digest
    return name


def approval_urls(base_url: str, token: str) -> tuple[str, str]:
    """(approveURL, rejectURL): path-only when ``base_url`` is empty."""
    base = base_url.rstrip("/")
    return f"{base}/approvals/{token}/approve", f"{base}/approvals/{token}/reject"


def starts_waiting(records: Iterable[Record]) -> bool:
    """Whether any record starts an approval step's wait or moves it to a new level."""
    return any(
        (r.event is Event.STEP_STARTED and r.detail.get("kind") == str(StepKind.APPROVAL))
        or r.event is Event.ESCALATED
        for r in records
    )


class TokenPublisher:
    """Publishes a token Secret for every approval step that waits (the leader's half)."""

    def __init__(
        self,
        core: client.CoreV1Api,
        *,
        key: SigningKey,
        clock: Clock,
        find_workflow: FindWorkflow,
        default_lifetime: timedelta,
        base_url: str = "",
        recheck: timedelta = timedelta(minutes=10),
    ) -> None:
        self._core = core
        self._key = key
        self._clock = clock
        self._find = find_workflow
        self._lifetime = default_lifetime
        self._base_url = base_url
        self._recheck = recheck
        self._lock = threading.Lock()
        #: Per workflow checked by this process: when to check it again (a token's lifetime
        #: ends, or `recheck` passed). A workflow missing here is checked on its next pass.
        self._check_at: dict[tuple[str, str], datetime] = {}
        self._fingerprint: str | None = None

    # --- hooks --------------------------------------------------------------------------------

    def on_pass(self, done: Pass) -> None:
        """The engine's after-pass hook: publish when the pass (or anything before it) calls for it."""
        key = (done.namespace, done.name)
        try:
            if done.phase in FINISHED_PHASES:
                self._forget(key)
                return
            self._notice_rotation()
            with self._lock:
                check_at = self._check_at.get(key)
            due = check_at is None or self._clock.now() >= check_at
            if due or starts_waiting(done.records):
                self.refresh(*key)
        except KeyUnavailable as error:
            self._forget(key)
            log.warning("workflow %s/%s: approval tokens not published: %s", *key, error)
        except Exception:
            self._forget(key)  # checked again on its next pass
            log.exception("workflow %s/%s: approval tokens not published; retrying next pass", *key)

    def after_submit(self, namespace: str, name: str, records: Sequence[Record]) -> None:
        """After the HTTP callback recorded a decision: publish for approval steps it started."""
        if starts_waiting(records):
            try:
                self.refresh(namespace, name)
            except Exception:
                self._forget((namespace, name))
                log.exception("workflow %s/%s: approval tokens not published", namespace, name)

    # --- publishing ---------------------------------------------------------------------------

    def refresh(self, namespace: str, name: str) -> list[str]:
        """Read the workflow and publish its tokens; the names of the Secrets written."""
        obj = self._find(namespace, name)
        if obj is None:
            self._forget((namespace, name))
            return []
        written, renew_at = self._publish(obj)
        check_at = self._clock.now() + self._recheck
        with self._lock:
            self._check_at[(namespace, name)] = min(check_at, renew_at) if renew_at else check_at
        return written

    def publish_tokens(self, workflow: Mapping[str, Any]) -> list[str]:
        """Publish a token for every approval step of ``workflow`` that waits now.

        Idempotent: a Secret already holding the right token is left alone. Returns the
        names of the Secrets created or changed.
        """
        return self._publish(workflow)[0]

    def _publish(self, workflow: Mapping[str, Any]) -> tuple[list[str], datetime | None]:
        meta, status = workflow["metadata"], workflow.get("status") or {}
        if not status.get("definition"):
            return [], None
        definition = definition_of(status["definition"], uid=meta["uid"])
        state = fold(definition, records_from_data(status.get("history") or []))
        now = self._clock.now()
        waiting = waiting_approvals(definition, state, now=now, default_lifetime=self._lifetime)
        written = [
            name for approval in waiting if (name := self._apply(workflow, approval)) is not None
        ]
        renewals = [a.expires for a in waiting if a.renews]
        return written, min(renewals) if renewals else None

    def _apply(self, workflow: Mapping[str, Any], approval: WaitingApproval) -> str | None:
        """Create or update one token Secret; its name when written, None when already right."""
        meta = workflow["metadata"]
        token = mint(
            self._key.current(),
            namespace=meta["namespace"],
            workflow=meta["name"],
            uid=meta["uid"],
            step=approval.step,
            attempt=approval.attempt,
            level=approval.level,
            expires=approval.expires,
        )
        approve, reject = approval_urls(self._base_url, token)
        body = token_secret(workflow, approval, token=token, approve_url=approve, reject_url=reject)
        name: str = body["metadata"]["name"]
        namespace: str = meta["namespace"]
        for _ in range(CONFLICT_TRIES):
            current = _read_secret(self._core, namespace, name)
            try:
                if current is None:
                    self._core.create_namespaced_secret(namespace, body)
                elif not _ours(current):
                    log.warning(
                        "Secret %s/%s exists and is not Vigil's: token for step %s not published",
                        namespace, name, approval.step,
                    )
                    return None
                elif _same(current, body):
                    return None
                else:
                    body["metadata"]["resourceVersion"] = current.metadata.resource_version
                    self._core.replace_namespaced_secret(name, namespace, body)
            except ApiException as error:
                if error.status == 409:
                    continue  # created or changed meanwhile: read again
                raise
            return name
        raise RuntimeError(f"Secret {namespace}/{name} kept changing")

    # --- bookkeeping --------------------------------------------------------------------------

    def _forget(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._check_at.pop(key, None)

    def _notice_rotation(self) -> None:
        """A new key makes every published token worthless: check every workflow again."""
        fingerprint = self._key.fingerprint()
        with self._lock:
            if self._fingerprint is not None and fingerprint != self._fingerprint:
                log.info("approval key rotated: republishing the tokens of waiting approval steps")
                self._check_at.clear()
            self._fingerprint = fingerprint


def token_secret(
    workflow: Mapping[str, Any],
    approval: WaitingApproval,
    *,
    token: str,
    approve_url: str,
    reject_url: str,
) -> dict[str, Any]:
    """The token Secret of one waiting approval step, owned by its Workflow."""
    meta = workflow["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": token_secret_name(meta["name"], approval.step),
            "namespace": meta["namespace"],
            "labels": {
                LABEL_MANAGED: MANAGED_BY_APPROVALS,
                LABEL_WORKFLOW: label_value(meta["name"]),
                LABEL_WORKFLOW_UID: meta["uid"],
                LABEL_STEP: approval.step,
            },
            "annotations": {
                ANNOTATION_ATTEMPT: str(approval.attempt),
                ANNOTATION_LEVEL: str(approval.level),
                ANNOTATION_EXPIRES: format_rfc3339(approval.expires),
            },
            "ownerReferences": [owner_reference(workflow, "Workflow", block_owner_deletion=False)],
        },
        "data": {
            "token": _b64(token.encode()),
            "approveURL": _b64(approve_url.encode()),
            "rejectURL": _b64(reject_url.encode()),
        },
    }


def _ours(current: Any) -> bool:
    return (current.metadata.labels or {}).get(LABEL_MANAGED) == MANAGED_BY_APPROVALS


def _same(current: Any, wanted: Mapping[str, Any]) -> bool:
    """Same token, same annotations, and owned by the same Workflow instance."""
    owners = [owner.uid for owner in current.metadata.owner_references or []]
    return bool(
        (current.data or {}) == wanted["data"]
        and all(
            (current.metadata.annotations or {}).get(k) == v
            for k, v in wanted["metadata"]["annotations"].items()
        )
        and owners == [wanted["metadata"]["ownerReferences"][0]["uid"]]
    )

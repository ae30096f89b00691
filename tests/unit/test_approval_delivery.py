"""The approval key's rotation and the tokens' delivery (vigil.kube.controllers.approvals), with in-memory twins.

A fake of the core API (vigil.kube.kits.coreapi) keeps the key Secret (create, read, conditional replace: a stale
resourceVersion is a 409, as on the API server) and a fake clock moves time, so the rotation is
checked without a cluster: the key is created when missing; once older than the period it is
replaced, the old one kept as `previous`; both verify during the overlap and only the new one
after it; two replicas rotating at once make one rotation. The publisher, given a workflow
whose approval step waits, sends one notification per approver, each once; a failed delivery
is sent again on the next check; a rotation sends new tokens. The verb is reviewed as the
token's one identity (a user, or a group). The real API server, notifier and HTTP callback are
tests/integration/test_approval_trust.py.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException

from tests.unit.workflowsim import World
from vigil.core.access import Access, User
from vigil.core.approvaltokens import verify_any
from vigil.core.workflow import Definition, StepDef, StepKind
from vigil.kube.controllers.approvals import (
    ANNOTATION_ROTATED_AT,
    KEY_SECRET,
    NotifierFailed,
    SigningKey,
    TokenPublisher,
    approver_review,
)

NAMESPACE = "vigil-system"
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
PERIOD, OVERLAP = timedelta(days=30), timedelta(hours=24)


class Clock:
    def __init__(self) -> None:
        self.at = T0

    def now(self) -> datetime:
        return self.at


class FakeCore:
    """The key Secret's store: create, read and replace conditional on the resourceVersion."""

    def __init__(self) -> None:
        self.secret: dict[str, Any] | None = None
        self.version = 0
        self.writes = 0
        #: Answers to the next reads, before the stored Secret: what a replica read earlier.
        self.stale: list[dict[str, Any]] = []

    def read_namespaced_secret(self, name: str, namespace: str) -> dict[str, Any]:
        if self.stale:
            return self.stale.pop(0)
        if self.secret is None:
            raise ApiException(status=404)
        return copy.deepcopy(self.secret)

    def create_namespaced_secret(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.secret is not None:
            raise ApiException(status=409)
        return self._store(body)

    def replace_namespaced_secret(self, name: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.secret is None or body["metadata"].get("resourceVersion") != self.secret["metadata"]["resourceVersion"]:
            raise ApiException(status=409)
        return self._store(body)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.writes += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.secret = stored
        return copy.deepcopy(stored)


def key_of(core: FakeCore, clock: Clock) -> SigningKey:
    """A replica's view of the key: re-read on every call (refresh 0)."""
    return SigningKey(
        core,  # a twin of the calls SigningKey makes
        namespace=NAMESPACE,
        clock=clock,
        refresh_seconds=0,
        rotation_period=PERIOD,
        overlap=OVERLAP,
    )


def test_the_key_is_created_when_missing_and_kept_until_the_period_ends() -> None:
    core, clock = FakeCore(), Clock()
    key = key_of(core, clock)
    first = key.current()
    assert core.secret is not None and core.secret["metadata"]["name"] == KEY_SECRET
    assert core.secret["metadata"]["annotations"][ANNOTATION_ROTATED_AT] == "2026-11-01T12:00:00Z"
    clock.at += PERIOD - timedelta(seconds=1)
    assert key.current() == first and key.keys() == [first] and core.writes == 1


def test_an_old_key_is_rotated_and_the_previous_one_verifies_during_the_overlap() -> None:
    core, clock = FakeCore(), Clock()
    key = key_of(core, clock)
    first = key.current()
    clock.at += PERIOD
    second = key.current()
    assert second != first
    assert key.keys() == [second, first]
    assert core.secret is not None and set(core.secret["data"]) == {"key", "previous"}
    clock.at += OVERLAP - timedelta(seconds=1)
    assert key.keys() == [second, first]
    clock.at += timedelta(seconds=1)
    assert key.keys() == [second]


def test_two_replicas_due_at_once_make_one_rotation() -> None:
    core, clock = FakeCore(), Clock()
    one, other = key_of(core, clock), key_of(core, clock)
    first = one.current()
    clock.at += PERIOD
    before = core.read_namespaced_secret(KEY_SECRET, NAMESPACE)
    rotated = one.current()
    core.stale.append(before)  # the other replica read before the rotation landed: its replace
    assert other.current() == rotated  # meets the new resourceVersion (409), and it reads again
    assert other.keys() == [rotated, first] and core.writes == 2


class Notifier:
    def __init__(self) -> None:
        self.sent: list[Mapping[str, Any]] = []
        self.down = False

    def send(self, body: Mapping[str, Any]) -> None:
        if self.down:
            raise NotifierFailed("the notifier answered 503")
        self.sent.append(body)


def waiting_workflow(clock: Clock, *, hours: int = 2) -> dict[str, Any]:
    """A workflow whose approval step waits on carol and the editors (for `hours`), as the API
    server holds it."""
    steps = [{"id": "approve", "type": "approval", "timeout": f"{hours}h",
              "approval": {"approvers": ["user:carol", "group:editors"]}}]  # fmt: skip
    definition = Definition("uid-1", (StepDef(id="approve", kind=StepKind.APPROVAL,
                                              approvers=("user:carol", "group:editors"),
                                              timeout=timedelta(hours=hours)),))  # fmt: skip
    world = World(definition, at=clock.now())
    return {
        "metadata": {"namespace": "media", "name": "publish", "uid": "uid-1"},
        "status": {
            "definition": {"source": {"inline": True}, "steps": steps, "onFailure": "fail"},
            "history": [r.to_data() for r in world.history],
        },
    }


def publisher_of(key: SigningKey, notifier: Notifier, clock: Clock, workflow: dict[str, Any]) -> TokenPublisher:
    return TokenPublisher(
        key=key,
        notifier=notifier,
        clock=clock,
        find_workflow=lambda namespace, name: workflow,
        default_lifetime=timedelta(hours=24),
        recheck=timedelta(minutes=10),
        retry=timedelta(seconds=30),
    )


def test_each_approver_is_sent_their_own_token_once() -> None:
    core, clock, notifier = FakeCore(), Clock(), Notifier()
    key = key_of(core, clock)
    publisher = publisher_of(key, notifier, clock, waiting_workflow(clock))
    assert len(publisher.refresh("media", "publish")) == 2
    assert publisher.refresh("media", "publish") == []  # already delivered
    assert [n["approver"] for n in notifier.sent] == ["user:carol", "group:editors"]
    for sent in notifier.sent:
        claims = verify_any(key.keys(), sent["token"], now=clock.now())
        assert (claims.approver, claims.expires) == (sent["approver"], T0 + timedelta(hours=2))


def test_a_failed_delivery_is_tried_again_soon_and_then_sent_once() -> None:
    core, clock, notifier = FakeCore(), Clock(), Notifier()
    workflow = waiting_workflow(clock)
    publisher = publisher_of(key_of(core, clock), notifier, clock, workflow)
    notifier.down = True
    sent, wake = publisher.send_tokens(workflow)
    assert (sent, wake) == ([], T0 + timedelta(seconds=30))
    notifier.down = False
    assert len(publisher.send_tokens(workflow)[0]) == 2
    assert publisher.send_tokens(workflow)[0] == []


def test_a_rotation_sends_new_tokens() -> None:
    core, clock, notifier = FakeCore(), Clock(), Notifier()
    workflow = waiting_workflow(clock, hours=24 * 90)
    key = key_of(core, clock)
    publisher = publisher_of(key, notifier, clock, workflow)
    publisher.send_tokens(workflow)
    clock.at += PERIOD
    key.current()  # a replica rotates
    assert len(publisher.send_tokens(workflow)[0]) == 2
    assert len({n["id"] for n in notifier.sent}) == 4


def test_no_token_is_sent_past_its_expiry() -> None:
    """A deadline passed and its timer not yet recorded: the step waits no more in truth."""
    core, clock, notifier = FakeCore(), Clock(), Notifier()
    workflow = waiting_workflow(clock)
    clock.at += timedelta(hours=2)
    assert publisher_of(key_of(core, clock), notifier, clock, workflow).send_tokens(workflow)[0] == []


def test_the_verb_is_reviewed_as_the_tokens_one_identity() -> None:
    user, access = approver_review("media", "publish", "user:carol")
    assert (user, access) == (
        User(name="carol"),
        Access(verb="approve", group="vigil.dev", resource="workflows", namespace="media", name="publish"),
    )
    assert approver_review("media", "publish", "carol")[0] == User(name="carol")
    assert approver_review("media", "publish", "group:editors")[0] == User(name="", groups=("editors",))

"""Approval tokens: mint and verify (round trip, tampering, expiry, key rotation), and which tokens
a state needs.

Pure: keys are fixed bytes and `now` is passed in (the URLs and notifications of
vigil.kube.controllers.approvals are pure functions too, and checked at the end). Hypothesis checks that every
minted token verifies to its own claims (the bound approver among them), that changing any single
byte of a token gets it refused, and that a token is valid exactly while `now` is before its
expiry (rounded down to the second). Version 1 tokens (bound to nobody) are refused. A token
signed with the previous key verifies only when that key is offered. A table of named workflow
states checks `waiting_approvals`: which steps get tokens, one per current approver, with which
attempt and level (where each approver joined), and until when.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.workflowsim import T0, World, pod
from vigil.core.approvaltokens import (
    BoundApprover,
    Claims,
    InvalidToken,
    Problem,
    mint,
    verify,
    verify_any,
    waiting_approvals,
)
from vigil.core.workflow import (
    Definition,
    Event,
    Level,
    StepDef,
    StepKind,
    TimeoutAction,
)
from vigil.kube.controllers.approvals import (
    approval_urls,
    notification,
    notification_id,
    starts_waiting,
)

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
EXPIRES = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BEFORE = EXPIRES - timedelta(hours=1)
WEEK = timedelta(days=7)


def token(
    *,
    uid: str = "6f1c-uid",
    step: str = "approve",
    approver: str = "user:carol",
    level: int = 0,
    attempt: int = 1,
    expires: datetime = EXPIRES,
    key: bytes = KEY,
) -> str:
    return mint(
        key,
        namespace="media",
        workflow="publish-42",
        uid=uid,
        step=step,
        approver=approver,
        level=level,
        attempt=attempt,
        expires=expires,
    )


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def signed(claims: object = None, *, payload: str | None = None) -> str:
    """A token with arbitrary claims (or encoded payload), signed with KEY the way mint signs."""
    if payload is None:
        payload = b64(json.dumps(claims).encode())
    return payload + "." + b64(hmac.new(KEY, payload.encode(), hashlib.sha256).digest())


# --- mint and verify --------------------------------------------------------------------------

names = st.text(min_size=0, max_size=80)
approvers = st.builds(lambda kind, name: f"{kind}:{name}", st.sampled_from(["user", "group"]), st.text(min_size=1, max_size=80))
instants = st.datetimes(
    min_value=datetime(1990, 1, 1),  # noqa: DTZ001 - hypothesis requires naive bounds; timezones= makes the values aware
    max_value=datetime(2200, 1, 1),  # noqa: DTZ001 - hypothesis requires naive bounds; timezones= makes the values aware
    timezones=st.just(UTC),
)


@settings(max_examples=300, deadline=None)
@given(
    namespace=names,
    workflow=names,
    uid=names,
    step=names,
    approver=approvers,
    level=st.integers(0, 10),
    attempt=st.integers(1, 1000),
    expires=instants,
)
def test_a_minted_token_verifies_to_its_claims(
    namespace: str, workflow: str, uid: str, step: str, approver: str, level: int, attempt: int, expires: datetime
) -> None:
    minted = mint(
        KEY,
        namespace=namespace,
        workflow=workflow,
        uid=uid,
        step=step,
        approver=approver,
        level=level,
        attempt=attempt,
        expires=expires,
    )
    exp = expires.replace(microsecond=0)
    claims = verify(KEY, minted, now=exp - timedelta(microseconds=1))
    assert claims == Claims(namespace, workflow, uid, step, approver, attempt, level, exp)


def test_a_bare_approver_name_is_bound_as_a_user() -> None:
    assert verify(KEY, token(approver="carol"), now=BEFORE).approver == "user:carol"
    assert token(approver="carol") == token(approver="user:carol")


@settings(max_examples=500, deadline=None)
@given(data=st.data())
def test_changing_any_single_byte_gets_the_token_refused(data: st.DataObject) -> None:
    raw = bytearray(token().encode())
    index = data.draw(st.integers(0, len(raw) - 1), label="index")
    value = data.draw(st.integers(0, 255).filter(lambda b: b != raw[index]), label="byte")
    raw[index] = value
    with pytest.raises(InvalidToken) as refused:
        verify(KEY, raw.decode("latin-1"), now=BEFORE)  # http.server decodes paths as latin-1
    assert refused.value.problem in (Problem.MALFORMED, Problem.BAD_SIGNATURE)


@settings(max_examples=300, deadline=None)
@given(expires=instants, offset=st.integers(-5_000_000, 5_000_000))
def test_a_token_is_valid_exactly_while_now_is_before_its_expiry(expires: datetime, offset: int) -> None:
    minted = token(expires=expires)
    now = expires + timedelta(microseconds=offset)
    valid_until = expires.replace(microsecond=0)
    if now < valid_until:
        assert verify(KEY, minted, now=now).expires == valid_until
    else:
        with pytest.raises(InvalidToken) as refused:
            verify(KEY, minted, now=now)
        assert refused.value.problem is Problem.EXPIRED


def test_the_expiry_boundary_itself() -> None:
    minted = token()
    assert verify(KEY, minted, now=EXPIRES - timedelta(microseconds=1)).step == "approve"
    with pytest.raises(InvalidToken, match="expired at 2026-12-01T12:00:00"):
        verify(KEY, minted, now=EXPIRES)


def test_another_key_is_a_bad_signature() -> None:
    with pytest.raises(InvalidToken) as refused:
        verify(OTHER_KEY, token(), now=BEFORE)
    assert refused.value.problem is Problem.BAD_SIGNATURE


def test_a_rotated_out_key_verifies_only_while_it_is_offered() -> None:
    """The callback offers the previous key during the rotation's overlap, and then no more."""
    old = token(key=OTHER_KEY)
    assert verify_any([KEY, OTHER_KEY], old, now=BEFORE).approver == "user:carol"
    assert verify_any([KEY, OTHER_KEY], token(), now=BEFORE).approver == "user:carol"
    with pytest.raises(InvalidToken) as refused:
        verify_any([KEY], old, now=BEFORE)
    assert refused.value.problem is Problem.BAD_SIGNATURE
    with pytest.raises(ValueError, match="no key"):
        verify_any([], old, now=BEFORE)


def test_tokens_are_deterministic_and_differ_per_claim() -> None:
    assert token() == token()
    variants = {
        token(), token(level=1), token(attempt=2), token(uid="other"), token(step="x"), token(approver="user:erin"),
        token(approver="group:carol"),
    }  # fmt: skip
    assert len(variants) == 7


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("empty", "", Problem.MALFORMED),
        ("no signature", "eyJ2IjoxfQ", Problem.MALFORMED),
        ("three parts", "a.b.c", Problem.MALFORMED),
        ("padding", token() + "=", Problem.MALFORMED),
        ("too long", "a" * 5000 + ".b", Problem.MALFORMED),
        ("unsigned claims", token().split(".")[0] + ".AAAA", Problem.BAD_SIGNATURE),
        ("signed non-JSON", signed(payload=b64(b"not json")), Problem.MALFORMED),
        ("signed non-base64", signed(payload="a"), Problem.MALFORMED),
        ("signed list", signed([1, 2]), Problem.MALFORMED),
        ("signed other version", signed({"v": 3}), Problem.MALFORMED),
        (
            "signed version 1: bound to nobody",
            signed({"v": 1, "ns": "a", "wf": "b", "uid": "c", "step": "d", "att": 1, "lvl": 0, "exp": 2**40}),
            Problem.MALFORMED,
        ),
        (
            "signed wrong types",
            signed({"v": 2, "ns": "a", "wf": "b", "uid": "c", "step": "d", "sub": "user:e", "att": True, "lvl": 0,
                    "exp": 9}),
            Problem.MALFORMED,
        ),
        (
            "signed approver in no normal spelling",
            signed({"v": 2, "ns": "a", "wf": "b", "uid": "c", "step": "d", "sub": "carol", "att": 1, "lvl": 0,
                    "exp": 2**40}),
            Problem.MALFORMED,
        ),
        (
            "signed absurd expiry",
            signed({"v": 2, "ns": "a", "wf": "b", "uid": "c", "step": "d", "sub": "user:e", "att": 1, "lvl": 0,
                    "exp": 10**20}),
            Problem.MALFORMED,
        ),
    ],
)
def test_malformed_tokens_are_refused_with_a_reason(name: str, text: str, problem: Problem) -> None:
    with pytest.raises(InvalidToken) as refused:
        verify(KEY, text, now=BEFORE)
    assert refused.value.problem is problem, name


def test_short_keys_and_naive_expiries_are_programming_errors() -> None:
    with pytest.raises(ValueError, match="at least 32"):
        mint(b"short", namespace="a", workflow="b", uid="c", step="d", approver="user:e", level=0, expires=EXPIRES)
    with pytest.raises(ValueError, match="timezone-aware"):
        token(expires=datetime(2026, 12, 1))  # noqa: DTZ001 - a naive time on purpose: the call must refuse it


# --- which tokens a workflow's state calls for --------------------------------------------------


def approval(step_id: str = "approve", *deps: str, **options: Any) -> StepDef:
    options.setdefault("approvers", ("user:alice",))
    return StepDef(id=step_id, kind=StepKind.APPROVAL, depends_on=deps, **options)


ESCALATING: dict[str, Any] = {
    "timeout": timedelta(hours=24),
    "on_timeout": TimeoutAction.ESCALATE,
    "escalation": (
        Level(approvers=("user:carol",), after=timedelta(hours=12)),
        Level(approvers=("user:dave",), after=timedelta(hours=6)),
    ),
}


def waiting(world: World) -> list[tuple[str, int, int, datetime, bool]]:
    found = waiting_approvals(world.definition, world.state, now=world.now, default_lifetime=WEEK)
    return [(a.step, a.attempt, a.level, a.expires, a.renews) for a in found]


def bound(world: World) -> list[tuple[str, int]]:
    """(approver, level joined) of every token the first waiting step needs."""
    (found,) = waiting_approvals(world.definition, world.state, now=world.now, default_lifetime=WEEK)
    return [(b.approver, b.level) for b in found.approvers]


def test_a_step_with_a_timeout_gets_a_token_until_its_deadline() -> None:
    world = World(Definition("u", (approval(timeout=timedelta(hours=2)),)))
    assert waiting(world) == [("approve", 1, 0, T0 + timedelta(hours=2), False)]


def test_an_escalating_step_keeps_one_expiry_across_levels() -> None:
    """The token minted at level 0 lasts until the last level's time runs out, like level 1's."""
    world = World(Definition("u", (approval(**ESCALATING),)))
    end = T0 + timedelta(hours=24 + 12 + 6)
    assert waiting(world) == [("approve", 1, 0, end, False)]
    world.run_until_timer()  # level 1, exactly at the deadline
    assert waiting(world) == [("approve", 1, 1, end, False)]
    world.run_until_timer()  # level 2
    assert waiting(world) == [("approve", 1, 2, end, False)]


def test_a_step_without_a_timeout_gets_renewed_tokens_of_the_default_lifetime() -> None:
    world = World(Definition("u", (approval(),)))
    assert waiting(world) == [("approve", 1, 0, T0 + WEEK, True)]
    world.tick(WEEK.total_seconds())
    assert waiting(world) == [("approve", 1, 0, T0 + 2 * WEEK, True)]


def test_only_waiting_approval_steps_of_a_running_workflow_get_tokens() -> None:
    definition = Definition("u", (pod("build"), approval("approve", "build"), approval("ship", "approve")))
    world = World(definition)
    assert waiting(world) == []  # build runs; nothing waits for a decision
    world.pod_result("build")
    assert [w[0] for w in waiting(world)] == ["approve"]
    world.request(Event.APPROVED, "approve", by="alice", request="r1")
    assert [w[0] for w in waiting(world)] == ["ship"]
    world.request(Event.CANCEL_REQUESTED, by="alice", request="r2")
    assert waiting(world) == []


def test_each_approver_gets_a_token_of_their_own_bound_where_they_joined() -> None:
    """Escalation adds approvers: those already asked keep their level-0 token; the added ones
    get tokens of level 1; a name given twice, or in two spellings, gets one token."""
    world = World(Definition("u", (approval(approvers=("user:alice", "group:editors", "alice"), **ESCALATING),)))
    assert bound(world) == [("user:alice", 0), ("group:editors", 0)]
    world.run_until_timer()
    assert bound(world) == [("user:alice", 0), ("group:editors", 0), ("user:carol", 1)]
    world.run_until_timer()
    assert bound(world) == [("user:alice", 0), ("group:editors", 0), ("user:carol", 1), ("user:dave", 2)]


def test_a_retried_approval_needs_a_token_for_its_new_attempt() -> None:
    world = World(Definition("u", (approval(),)))
    world.request(Event.REJECTED, "approve", by="alice", request="r1")
    assert waiting(world) == []
    world.request(Event.RETRY_REQUESTED, "approve", by="alice", request="r2")
    assert [(w[0], w[1]) for w in waiting(world)] == [("approve", 2)]


# --- what the notifier receives (the pure parts of vigil.kube.controllers.approvals) ------------------------


def test_urls_are_path_only_unless_a_base_is_configured() -> None:
    assert approval_urls("", "T") == ("/approvals/T/approve", "/approvals/T/reject")
    assert approval_urls("https://vigil.example.com/", "T")[0] == "https://vigil.example.com/approvals/T/approve"


def test_a_notification_carries_one_approvers_token_and_links() -> None:
    world = World(Definition("u", (approval(approvers=("user:carol", "user:erin"), timeout=timedelta(hours=2)),)))
    (waiting_step,) = waiting_approvals(world.definition, world.state, now=world.now, default_lifetime=WEEK)
    meta = {"namespace": "media", "name": "publish-42", "uid": "u"}
    body = notification(meta, waiting_step, BoundApprover("user:erin", 0), token="T.S", base_url="https://v.example")
    assert body == {
        "kind": "ApprovalWaiting",
        "id": notification_id("T.S"),
        "namespace": "media",
        "workflow": "publish-42",
        "uid": "u",
        "step": "approve",
        "attempt": 1,
        "level": 0,
        "approver": "user:erin",
        "approvers": ["user:carol", "user:erin"],
        "expires": "2026-11-01T14:00:00Z",
        "token": "T.S",
        "approveURL": "https://v.example/approvals/T.S/approve",
        "rejectURL": "https://v.example/approvals/T.S/reject",
    }
    assert notification_id("T.S") == notification_id("T.S") != notification_id("T.R")


def test_publishing_is_due_when_an_approval_starts_waiting_or_escalates() -> None:
    world = World(Definition("u", (pod("build"), approval("approve", "build", **ESCALATING))))
    assert not starts_waiting(world.history)
    assert starts_waiting(world.pod_result("build"))
    assert starts_waiting(world.run_until_timer())

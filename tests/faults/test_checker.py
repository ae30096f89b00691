"""The fault checker (tests/faults/checker.py) on hand-made histories: a clean history passes, and
each kind of violation is found and named — an occurrence lost, one fired before it was due, one recorded Missed against its
catch-up policy, one fired twice, a submission acknowledged then lost, an execution run again with
no excuse, acknowledged twice or leased while another lease of it is open, a fault never recovered
from — while reruns after a lease expiry or an ambiguous acknowledgement are allowed and counted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.faults.checker import check, table
from tests.faults.history import AttemptPhase, FaultPhase, History, Submission

T0 = datetime(2026, 12, 6, 1, 0, tzinfo=UTC)
N1, N2 = T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)


class Clock:
    def __init__(self) -> None:
        self.now = N2  # the histories are recorded once their occurrences have come due

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def clean() -> History:
    h = History(Clock(), scenario="clean", seed=7)
    h.due("job-a", N1)
    h.due("job-a", N2, may_miss=True)
    h.fired("job-a", N1, "ex-1", by="trigger-0")
    h.missed("job-a", N2, by="trigger-0", reason="catch-up window")
    h.submitted("op-1", Submission.INVOKE)
    h.submitted("op-1", Submission.OK, "ex-2")
    h.fault("connection dropped", FaultPhase.START)
    h.fault("connection dropped", FaultPhase.END)
    for execution in ("ex-1", "ex-2"):
        h.attempt(execution, 1, AttemptPhase.LEASED, worker="w1")
        h.attempt(execution, 1, AttemptPhase.ACKNOWLEDGED, worker="w1")
        h.held(execution, "succeeded")
    return h


def test_a_clean_history_passes_and_its_table_says_so() -> None:
    verdict = check(clean())
    assert verdict.ok, verdict.problems()
    assert (verdict.due, verdict.reruns_allowed, verdict.recovery) == (2, 0, timedelta(seconds=2))
    printed = table([verdict])
    assert "clean" in printed and "7" in printed and printed.splitlines()[1].rstrip().endswith("yes")


def test_an_occurrence_neither_fired_nor_missed_is_lost() -> None:
    h = clean()
    h.due("job-b", N1)
    verdict = check(h)
    assert verdict.lost == [("job-b", N1)] and not verdict.ok
    assert "NO" in table([verdict])


def test_an_occurrence_recorded_missed_where_its_policy_says_fire_is_lost() -> None:
    h = clean()
    h.due("job-b", N1, may_miss=False)
    h.missed("job-b", N1, reason="skipped to now")
    assert check(h).lost == [("job-b", N1)]


def test_an_occurrence_ended_twice_is_fired_twice() -> None:
    for second in ("fired", "missed"):
        h = clean()
        if second == "fired":
            h.fired("job-a", N1, "ex-1", by="trigger-1")
        else:
            h.missed("job-a", N1, by="trigger-1")
        assert check(h).fired_twice == [("job-a", N1)], second


def test_an_occurrence_fired_before_its_nominal_time_is_fired_early() -> None:
    h = clean()
    later = T0 + timedelta(hours=1)
    h.due("job-b", later)
    h.fired("job-b", later, "ex-b")  # seen (by the clock of the history) an hour before it was due
    verdict = check(h)
    assert verdict.fired_early == [("job-b", later)] and not verdict.ok
    assert "1 fired early" in " ".join(verdict.problems())


def test_an_acknowledged_submission_or_fired_execution_the_store_no_longer_holds_is_lost() -> None:
    h = clean()
    h.submitted("op-2", Submission.INVOKE)
    h.submitted("op-2", Submission.OK, "ex-3")
    h.due("job-c", N1)
    h.fired("job-c", N1, "ex-4")
    assert check(h).acked_lost == ["ex-3", "ex-4"]


def test_a_failed_or_unknown_submission_may_be_absent() -> None:
    h = clean()
    h.submitted("op-2", Submission.INVOKE)
    h.submitted("op-2", Submission.FAIL)
    h.submitted("op-3", Submission.INVOKE)
    h.submitted("op-3", Submission.UNKNOWN)
    assert check(h).ok


def test_a_rerun_after_a_lease_expiry_or_an_ambiguous_acknowledgement_is_allowed_and_counted() -> None:
    h = clean()
    h.attempt("ex-5", 1, AttemptPhase.LEASED, worker="w1")
    h.attempt("ex-5", 1, AttemptPhase.EXPIRED, worker="w1")
    h.attempt("ex-5", 2, AttemptPhase.LEASED, worker="w2")
    h.attempt("ex-5", 1, AttemptPhase.REFUSED, worker="w1")  # the frozen holder's late report
    h.attempt("ex-5", 2, AttemptPhase.ACKNOWLEDGED, worker="w2")
    h.attempt("ex-6", 1, AttemptPhase.LEASED, worker="w1")
    h.attempt("ex-6", 1, AttemptPhase.ACK_UNKNOWN, worker="w1")
    h.attempt("ex-6", 2, AttemptPhase.LEASED, worker="w2")
    h.attempt("ex-6", 2, AttemptPhase.ACKNOWLEDGED, worker="w2")
    verdict = check(h)
    assert verdict.ok, verdict.problems()
    assert verdict.reruns_allowed == 2
    strict = check(h, strict_leases=True)  # the history knows the deadlines: ex-6's lease still held
    assert (strict.reruns_allowed, strict.reruns_violating) == (1, ["ex-6"])


def test_a_retry_after_a_reported_failure_is_no_rerun() -> None:
    h = clean()
    h.attempt("ex-7", 1, AttemptPhase.LEASED)
    h.attempt("ex-7", 1, AttemptPhase.FAILED)
    h.attempt("ex-7", 2, AttemptPhase.LEASED)
    h.attempt("ex-7", 2, AttemptPhase.ACKNOWLEDGED)
    verdict = check(h)
    assert verdict.ok and verdict.reruns_allowed == 0


def test_a_rerun_with_no_excuse_is_a_violation() -> None:
    after_success, concurrent, twice = clean(), clean(), clean()
    after_success.attempt("ex-1", 2, AttemptPhase.LEASED, worker="w2")  # ex-1 was acknowledged
    concurrent.attempt("ex-8", 1, AttemptPhase.LEASED, worker="w1")
    concurrent.attempt("ex-8", 2, AttemptPhase.LEASED, worker="w2")  # no expiry of the first lease
    twice.attempt("ex-1", 1, AttemptPhase.ACKNOWLEDGED, worker="w1")
    assert check(after_success).reruns_violating == ["ex-1"]
    assert check(concurrent).reruns_violating == ["ex-8"]
    assert check(twice).reruns_violating == ["ex-1"]


def test_recovery_is_the_longest_wait_for_a_success_and_a_fault_with_work_asked_but_none_done_is_named() -> None:
    h = clean()
    h.fault("postgres restarted", FaultPhase.END)
    h.clock()  # time passes with nothing done
    h.clock()
    h.submitted("op-9", Submission.OK, "ex-9")
    h.held("ex-9", "ready")
    verdict = check(h)
    assert verdict.recovery == timedelta(seconds=3) and verdict.ok
    h.fault("api server restarted", FaultPhase.END)
    assert check(h).ok, "nothing was asked after the fault: nothing to recover"
    h.submitted("op-10", Submission.INVOKE)
    assert check(h).unrecovered and not check(h).ok

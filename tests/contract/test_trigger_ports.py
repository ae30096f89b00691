"""The trigger's JobCatalogue, Launcher and Ledger contracts, run against every implementation.

The in-memory twins (`vigil.core.memory`) and the Kubernetes adapters (`vigil.kube.stores.jobs.
KubeCatalogue`, `vigil.kube.controllers.launcher.ExecutionLauncher`, `vigil.kube.stores.ledger.KubeLedger` through
the job's one status writer, flushed after each plan, on ScheduledJobs in a namespace of the
test's own, with no operator running) must agree on:

* catalogue — a lookup returns the job as it is now (an edit shows at once); no job for a
  name never created or once deleted; no job but `invalid` for a spec that cannot be
  scheduled.
* launcher — a launch creates the occurrence's execution, named by its execution id; a
  second launch of the same occurrence, even racing the first from another thread, answers
  created=False and leaves one execution; other occurrences get executions of their own.
* ledger — outcomes are kept on the job once per (nominal time, outcome), so recording a
  plan again changes nothing; the job's last handled nominal time advances with what a plan
  fired or missed and never moves back for an older plan — nor when a second trigger
  (a failover overlap) recorded a later one after this one's lookup; a plan for a job that
  is gone records nothing and does not fail.

The overlap case is why the Kubernetes ledger writes conditionally on the version it read
and merges again on a conflict: a plain merge patch of a status built from its own lookup
let the later writer replace the other's entries and move lastNominal back.

As the trigger does, each test looks a job up before launching or recording for it: the
Kubernetes launcher and ledger work on the object that lookup fetched.

Concurrency policy is tested on Kubernetes only. The Launcher port is handed a `Fire`, whose
JobView carries neither the job's concurrencyPolicy nor its running executions; the
Kubernetes launcher reads both from the API server. The twin could follow only through a
side channel invented for tests, which would then be what the trigger's unit tests exercise.
The decision itself is the core's pure `concurrency()` (tests/unit/test_executions.py), and
the trigger's handling of a skipped launch is tested with a stub launcher
(tests/unit/test_trigger.py). The same holds for a workflowTemplate job, whose occurrence
starts a Workflow instead of an Execution. So does the payload check at fire time (a pod job
whose rendered payload holds a value refused at the door: its occurrence fails, no Execution):
the twin renders no payloads.
"""

from __future__ import annotations

import copy
import dataclasses
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pytest

from tests.integration.conftest import KubeCluster
from tests.integration.jobstatuses import FlushedLedger
from vigil.core.buckets import Mark, Outcome
from vigil.core.chain import CatchUp, EntryPlan, Fire, JobLookup, JobView, Reason, Record
from vigil.core.executions import Execution, Phase, cancel
from vigil.core.ids import execution_id
from vigil.core.memory import FakeClock, MemoryCatalogue, MemoryLauncher, MemoryLedger
from vigil.core.ports import JobCatalogue, Launch, Launcher, Ledger
from vigil.core.schedule import Schedule, next_occurrences, occurrence_at
from vigil.core.timeparse import parse_rfc3339
from vigil.kube.controllers.launcher import ExecutionLauncher
from vigil.kube.kits.events import EventRecorder
from vigil.kube.stores.executions import ExecutionStore, execution_cache, execution_from_object
from vigil.kube.stores.jobs import KubeCatalogue
from vigil.kube.stores.results import JobResults
from vigil.model import GROUP, VERSION
from vigil.model.jobspec import job_view

JOBS = "scheduledjobs"
EVERY = timedelta(minutes=1)
EDITED_EVERY = timedelta(minutes=5)
POD_TEMPLATE = {"spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}}
UNSCHEDULABLE_ZONE = "Mars/Olympus_Mons"  # the API server admits it; converting the job fails
ANCHOR = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)  # the memory twin's creation time
RECORDED_AT = datetime(2026, 5, 1, 13, 0, 0, 125_000, tzinfo=UTC)


class Home(Protocol):
    """Where the trigger's jobs live: the three ports, and what a test does to and reads from them."""

    @property
    def namespace(self) -> str: ...

    @property
    def catalogue(self) -> JobCatalogue: ...

    @property
    def launcher(self) -> Launcher: ...

    @property
    def ledger(self) -> Ledger: ...

    def create(self, name: str, **spec: Any) -> JobView:
        """A job firing every EVERY, as it was created; `spec`: more fields (Kubernetes-only cases)."""
        ...

    def edit(self, name: str, *, every: timedelta | None = None, suspend: bool | None = None) -> None: ...

    def delete(self, name: str) -> None: ...

    def make_unschedulable(self, name: str) -> None: ...

    def executions(self) -> set[str]:
        """The names of the executions that exist."""
        ...

    def outcomes(self, name: str) -> set[tuple[datetime, str, str]]:
        """The job's recorded outcomes: (nominal, outcome, execution id if Fired else reason)."""
        ...

    def another_trigger(self) -> tuple[JobCatalogue, Ledger]:
        """The catalogue and ledger of a second trigger (a failover overlap) on the same jobs."""
        ...


class MemoryHome:
    def __init__(self) -> None:
        self.namespace = "team-a"
        self.catalogue = MemoryCatalogue()
        self.launcher = MemoryLauncher()
        self.ledger = MemoryLedger(self.catalogue)

    def create(self, name: str, **spec: Any) -> JobView:
        assert not spec, f"the twin's jobs have no {', '.join(spec)}: a Kubernetes-only case"
        job = JobView(
            namespace=self.namespace,
            name=name,
            uid=str(uuid.uuid4()),
            generation=1,
            schedule=Schedule.from_interval(EVERY, anchor=ANCHOR),
            schedule_hash=f"every-{EVERY.total_seconds():g}",
            jitter=timedelta(0),
            catch_up=CatchUp(),
        )
        self.catalogue.put(job)
        return job

    def edit(self, name: str, *, every: timedelta | None = None, suspend: bool | None = None) -> None:
        job = self.catalogue.jobs[(self.namespace, name)]
        if every is not None:
            schedule = Schedule.from_interval(every, anchor=ANCHOR)
            job = dataclasses.replace(job, schedule=schedule, schedule_hash=f"every-{every.total_seconds():g}")
        if suspend is not None:
            job = dataclasses.replace(job, suspended=suspend)
        self.catalogue.put(dataclasses.replace(job, generation=job.generation + 1))

    def delete(self, name: str) -> None:
        del self.catalogue.jobs[(self.namespace, name)]

    def make_unschedulable(self, name: str) -> None:
        self.catalogue.invalid.add((self.namespace, name))

    def executions(self) -> set[str]:
        return set(self.launcher.executions)

    def outcomes(self, name: str) -> set[tuple[datetime, str, str]]:
        return {
            (nominal, outcome, detail)
            for (namespace, job, nominal, outcome), detail in self.ledger.outcomes.items()
            if (namespace, job) == (self.namespace, name)
        }

    def another_trigger(self) -> tuple[JobCatalogue, Ledger]:
        # The twin's outcomes and chain progress are the jobs' status: one state, shared by every
        # trigger, which the ledger reads when it writes rather than at lookup.
        return self.catalogue, self.ledger


class KubeHome:
    """The adapters wired as vigil.runtime wires them, on the test's namespace of a real API server."""

    def __init__(self, cluster: KubeCluster, namespace: str) -> None:
        self.namespace = namespace
        self.custom = cluster.custom
        self.api = cluster.api
        self.core = cluster.core
        self.store = ExecutionStore(cluster.api)
        self.clock = FakeClock(datetime.now(UTC))
        self.events = EventRecorder(cluster.api, instance="contract")
        self.catalogue = KubeCatalogue(cluster.api)
        self.ledger = FlushedLedger(cluster.api, catalogue=self.catalogue, events=self.events)
        self.writer = self.ledger.writer  # the job's one status writer, as the leader's
        self.launcher = self.launcher_on(self.store)

    def launcher_on(self, store: ExecutionStore) -> ExecutionLauncher:
        return ExecutionLauncher(
            store=store,
            catalogue=self.catalogue,
            clock=self.clock,
            results=JobResults(store=store, events=self.events, clock=self.clock, writer=self.writer),
            pods=self.core,
        )

    def create(self, name: str, **spec: Any) -> JobView:
        runs = {"template": POD_TEMPLATE} if "workflowTemplate" not in spec else {}
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ScheduledJob",
            "metadata": {"name": name},
            "spec": {"every": f"{EVERY.total_seconds():g}s", "jitter": "0s", **runs, **spec},
        }
        created = self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, JOBS, body)
        return job_view(created)[0]

    def edit(self, name: str, *, every: timedelta | None = None, suspend: bool | None = None) -> None:
        spec: dict[str, Any] = {}
        if every is not None:
            spec["every"] = f"{every.total_seconds():g}s"
        if suspend is not None:
            spec["suspend"] = suspend
            spec["suspendReason"] = "the contract suite" if suspend else None
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, JOBS, name, {"spec": spec})

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, JOBS, name)

    def make_unschedulable(self, name: str) -> None:
        patch = {"spec": {"timezone": UNSCHEDULABLE_ZONE}}
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, JOBS, name, patch)

    def names(self, plural: str) -> list[str]:
        items = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, plural)["items"]
        return sorted(obj["metadata"]["name"] for obj in items)

    def executions(self) -> set[str]:
        return set(self.names("executions"))

    def outcomes(self, name: str) -> set[tuple[datetime, str, str]]:
        job = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, JOBS, name)
        return {
            (
                parse_rfc3339(entry["nominal"]),
                entry["outcome"],
                entry.get("executionId", "") if entry["outcome"] == Outcome.FIRED else entry.get("reason", ""),
            )
            for entry in (job.get("status") or {}).get("occurrences") or []
        }

    def another_trigger(self) -> tuple[JobCatalogue, Ledger]:
        catalogue = KubeCatalogue(self.api)
        events = EventRecorder(self.api, instance="contract-other")
        return catalogue, FlushedLedger(self.api, catalogue=catalogue, events=events)

    def execution(self, name: str) -> tuple[dict[str, Any], Execution]:
        obj = self.store.get(self.namespace, name)
        assert obj is not None, f"no execution {name}"
        return obj, execution_from_object(obj)

    def end(self, name: str) -> None:
        """The execution `name` ends (cancelled here: any terminal phase frees its job's concurrency)."""
        obj, execution = self.execution(name)
        self.store.write(obj, cancel(execution, reason="Ended", now=self.clock.now()))


def kube_home(request: pytest.FixtureRequest) -> KubeHome:
    return KubeHome(request.getfixturevalue("cluster"), request.getfixturevalue("namespace"))


@pytest.fixture(params=["memory", pytest.param("kube", marks=pytest.mark.integration)])
def home(request: pytest.FixtureRequest) -> Home:
    return MemoryHome() if request.param == "memory" else kube_home(request)


@pytest.fixture(params=[pytest.param("kube", marks=pytest.mark.integration)])
def kube(request: pytest.FixtureRequest) -> KubeHome:
    """For the cases only the Kubernetes launcher can express (see the module docstring)."""
    return kube_home(request)


def lookup(home: Home, name: str) -> JobLookup:
    return home.catalogue.lookup(home.namespace, name)


def nominals(job: JobView, count: int) -> list[datetime]:
    """The job's first `count` nominal times after its creation."""
    return next_occurrences(job.schedule, job.schedule.anchor or ANCHOR, count=count)


def fire(job: JobView, nominal: datetime) -> Fire:
    occurrence = occurrence_at(job.schedule, nominal, jitter=job.offset)
    return Fire(job=job, occurrence=occurrence, execution_id=execution_id(job.uid, nominal), late=False)


def launch(home: Home, job: JobView, nominal: datetime) -> Launch:
    """Launch one occurrence as the trigger does: a lookup of the job, then the launch."""
    found = lookup(home, job.name).job
    assert found is not None
    return home.launcher.launch(fire(found, nominal))


def fired(job: JobView, *at: datetime) -> EntryPlan:
    fires = tuple(fire(job, nominal) for nominal in at)
    mark = Mark(outcome=Outcome.FIRED, at=at[-1], execution_id=fires[-1].execution_id)
    return EntryPlan(namespace=job.namespace, name=job.name, mark=mark, fires=fires)


def ended(job: JobView, nominal: datetime, outcome: Outcome, reason: Reason) -> EntryPlan:
    occurrence = occurrence_at(job.schedule, nominal, jitter=job.offset)
    record = Record(job_namespace=job.namespace, job_name=job.name, occurrence=occurrence, outcome=outcome, reason=reason)
    mark = Mark(outcome=outcome, at=nominal, reason=str(reason))
    return EntryPlan(namespace=job.namespace, name=job.name, mark=mark, records=(record,))


def record(home: Home, plan: EntryPlan) -> None:
    """Record a plan as the trigger does: a lookup of the job, then the ledger write."""
    lookup(home, plan.name)
    launched: dict[str, bool] = {f.execution_id: True for f in plan.fires}
    home.ledger.record(plan, launched=launched, now=RECORDED_AT)


def last_nominal(home: Home, name: str) -> datetime | None:
    job = lookup(home, name).job
    assert job is not None
    return job.last_nominal


# --- catalogue ------------------------------------------------------------------------------


def test_a_lookup_returns_the_job_as_it_is_now(home: Home) -> None:
    created = home.create("nightly")

    found = lookup(home, "nightly")

    assert found == JobLookup(job=created)
    assert (created.schedule.every, created.suspended, created.last_nominal) == (EVERY, False, None)

    home.edit("nightly", every=EDITED_EVERY, suspend=True)
    edited = lookup(home, "nightly").job

    assert edited is not None
    assert (edited.uid, edited.schedule.every, edited.suspended) == (created.uid, EDITED_EVERY, True)
    assert edited.generation > created.generation
    assert edited.schedule_hash != created.schedule_hash


def test_a_lookup_finds_no_job_for_a_name_never_created_or_deleted(home: Home) -> None:
    home.create("brief")
    lookup(home, "brief")  # cached by the Kubernetes catalogue: the deletion must still show

    home.delete("brief")

    assert lookup(home, "brief") == JobLookup(job=None, invalid=False)
    assert lookup(home, "never-created") == JobLookup(job=None, invalid=False)


def test_a_job_that_cannot_be_scheduled_is_found_invalid_without_a_job(home: Home) -> None:
    home.create("martian")
    home.create("earthly")

    home.make_unschedulable("martian")

    assert lookup(home, "martian") == JobLookup(job=None, invalid=True)
    assert lookup(home, "earthly").job is not None


# --- launcher -------------------------------------------------------------------------------


def test_a_launch_creates_the_execution_once(home: Home) -> None:
    job = home.create("once")
    first = nominals(job, 1)[0]

    assert launch(home, job, first) == Launch(created=True)
    assert home.executions() == {execution_id(job.uid, first)}

    assert launch(home, job, first) == Launch(created=False)
    assert home.executions() == {execution_id(job.uid, first)}


def test_two_launches_of_one_occurrence_at_once_create_one_execution(home: Home) -> None:
    job = home.create("raced")
    first = nominals(job, 1)[0]

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda _: launch(home, job, first), range(2)))

    assert sorted(r.created for r in results) == [False, True]
    assert home.executions() == {execution_id(job.uid, first)}


def test_each_occurrence_gets_an_execution_of_its_own(home: Home) -> None:
    job, other = home.create("a"), home.create("b")
    times = nominals(job, 2)

    results = [launch(home, j, t) for j in (job, other) for t in times]

    assert results == [Launch(created=True)] * 4
    assert home.executions() == {execution_id(j.uid, t) for j in (job, other) for t in times}


@pytest.mark.parametrize(
    ("policy", "second", "first_after"),
    [
        pytest.param("Allow", Launch(created=True), Phase.READY, id="Allow starts it beside the first"),
        pytest.param(
            "Forbid", Launch(created=False, skipped="ConcurrencyForbid"), Phase.READY, id="Forbid skips it"
        ),
        pytest.param("Replace", Launch(created=True), Phase.CANCELLED, id="Replace cancels the first"),
    ],
)
def test_a_launch_while_an_execution_runs_follows_the_concurrency_policy(
    kube: KubeHome, policy: str, second: Launch, first_after: Phase
) -> None:
    job = kube.create("overlapping", concurrencyPolicy=policy)
    first, then = nominals(job, 2)
    launch(kube, job, first)

    assert launch(kube, job, then) == second
    assert kube.execution(execution_id(job.uid, first))[1].phase is first_after
    expected = {execution_id(job.uid, first)} | ({execution_id(job.uid, then)} if second.created else set())
    assert kube.executions() == expected


def test_forbid_repeats_its_own_launch_and_starts_the_next_once_the_first_ended(kube: KubeHome) -> None:
    job = kube.create("exclusive", concurrencyPolicy="Forbid")
    first, then = nominals(job, 2)
    launch(kube, job, first)

    assert launch(kube, job, first) == Launch(created=False), "a repeated launch never skips itself"
    kube.end(execution_id(job.uid, first))
    assert launch(kube, job, then) == Launch(created=True)


def test_a_new_leader_whose_cache_has_not_listed_yet_still_forbids(kube: KubeHome) -> None:
    """A new leader fires before its Execution cache has listed: the running execution is read
    from the API server then, and Forbid still skips the next occurrence."""
    job = kube.create("exclusive-after-failover", concurrencyPolicy="Forbid")
    first, then = nominals(job, 2)
    launch(kube, job, first)
    store = ExecutionStore(kube.api, cache=execution_cache(kube.api))  # never run: not listed yet
    leader = copy.copy(kube)
    leader.store, leader.launcher = store, kube.launcher_on(store)
    assert launch(leader, job, then) == Launch(created=False, skipped="ConcurrencyForbid")
    assert kube.executions() == {execution_id(job.uid, first)}


def test_a_workflow_job_starts_one_workflow_per_occurrence_and_no_execution(kube: KubeHome) -> None:
    steps = [{"id": "hold", "type": "wait", "wait": {"duration": "1s"}}]
    job = kube.create("pipeline", workflowTemplate={"steps": steps})
    first = nominals(job, 1)[0]

    assert launch(kube, job, first) == Launch(created=True)
    assert launch(kube, job, first) == Launch(created=False)

    assert kube.names("workflows") == [execution_id(job.uid, first)]
    assert kube.executions() == set()


def test_a_pod_job_whose_rendered_payload_holds_a_value_refused_at_the_door_fails_that_occurrence(
    kube: KubeHome,
) -> None:
    """The pod path checks the payload at fire time (vigil.core.jsonvalues), before any Execution:
    a NUL its pod could not be handed settles the occurrence Failed with the place named, once."""
    job = kube.create("nul-payload", payloadTemplate={"v": '{{ "\\x00" }}'})
    first = nominals(job, 1)[0]
    launched = launch(kube, job, first)
    assert not launched.created and launched.refused.startswith("spec.payloadTemplate.v: holds NUL"), launched
    assert kube.executions() == set()


@pytest.mark.parametrize(
    ("key", "refusal"),
    [
        ('{{ "\\x00" }}', "spec.idempotencyKey: holds NUL"),
        ("{% set a = 'a' * 30000 %}{% set a = a ~ a %}{% set a = a ~ a %}{{ a }}", "spec.idempotencyKey"),
    ],
    ids=["NUL", "past-the-budget"],
)
def test_a_pod_job_whose_idempotency_key_cannot_be_made_fails_that_occurrence(
    kube: KubeHome, key: str, refusal: str
) -> None:
    """The key is checked with the payload at fire time: before, a key that broke a budget (or held
    NUL) left an Execution that the dispatcher could never start, Ready for good."""
    job = kube.create("bad-key", idempotencyKey=key)
    first = nominals(job, 1)[0]
    launched = launch(kube, job, first)
    assert not launched.created and launched.refused.startswith(refusal), launched
    assert kube.executions() == set()


# --- ledger ---------------------------------------------------------------------------------


def test_fired_occurrences_are_recorded_and_advance_the_last_nominal(home: Home) -> None:
    job = home.create("ledgered")
    one, two = nominals(job, 2)

    record(home, fired(job, one, two))

    assert home.outcomes("ledgered") == {
        (one, "Fired", execution_id(job.uid, one)),
        (two, "Fired", execution_id(job.uid, two)),
    }
    assert last_nominal(home, "ledgered") == two


def test_recording_a_plan_again_changes_nothing(home: Home) -> None:
    job = home.create("repeated")
    one, two = nominals(job, 2)
    record(home, ended(job, one, Outcome.MISSED, Reason.CATCH_UP_LATEST))
    record(home, fired(job, two))
    before = (home.outcomes("repeated"), last_nominal(home, "repeated"))

    record(home, fired(job, two))
    record(home, ended(job, one, Outcome.MISSED, Reason.CATCH_UP_LATEST))

    assert (home.outcomes("repeated"), last_nominal(home, "repeated")) == before
    assert len(before[0]) == 2 and before[1] == two


def test_an_older_plan_is_recorded_but_never_moves_the_last_nominal_back(home: Home) -> None:
    job = home.create("late")
    one, two, three = nominals(job, 3)
    record(home, fired(job, three))

    record(home, fired(job, one))
    record(home, ended(job, two, Outcome.MISSED, Reason.CATCH_UP_NONE))

    assert last_nominal(home, "late") == three
    assert {(n, o) for n, o, _ in home.outcomes("late")} == {(one, "Fired"), (two, "Missed"), (three, "Fired")}


@pytest.mark.parametrize(
    ("outcome", "reason"),
    [
        pytest.param(Outcome.SKIPPED, Reason.CONCURRENCY_FORBID, id="Skipped"),
        pytest.param(Outcome.SUPERSEDED, Reason.SCHEDULE_CHANGED, id="Superseded"),
        pytest.param(Outcome.SUSPENDED, Reason.SUSPENDED, id="Suspended"),
    ],
)
def test_outcomes_that_dispose_of_nothing_are_recorded_without_advancing(
    home: Home, outcome: Outcome, reason: Reason
) -> None:
    job = home.create("held")
    first = nominals(job, 1)[0]

    record(home, ended(job, first, outcome, reason))

    assert home.outcomes("held") == {(first, str(outcome), str(reason))}
    assert last_nominal(home, "held") is None


def test_a_ledger_writing_after_another_trigger_keeps_what_the_other_recorded(home: Home) -> None:
    job = home.create("failover")
    one, two = nominals(job, 2)
    lookup(home, "failover")  # this trigger reads the job, then stalls
    other_catalogue, other_ledger = home.another_trigger()
    other_catalogue.lookup(home.namespace, "failover")
    other_ledger.record(fired(job, two), launched={}, now=RECORDED_AT)

    home.ledger.record(fired(job, one), launched={}, now=RECORDED_AT)  # the stalled one writes last

    assert {(n, o) for n, o, _ in home.outcomes("failover")} == {(one, "Fired"), (two, "Fired")}
    assert last_nominal(home, "failover") == two


def test_a_plan_for_a_job_deleted_since_its_lookup_records_nothing_and_does_not_fail(home: Home) -> None:
    job = home.create("gone")
    first = nominals(job, 1)[0]
    lookup(home, "gone")  # the trigger looked it up; it is deleted before the ledger writes
    home.delete("gone")

    home.ledger.record(fired(job, first), launched={execution_id(job.uid, first): True}, now=RECORDED_AT)

    home.create("gone")  # the same name, a new job: nothing of the old one's shows on it
    assert home.outcomes("gone") == set()
    assert last_nominal(home, "gone") is None

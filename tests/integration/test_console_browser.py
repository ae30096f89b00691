"""The console in a real browser: Debian's headless Chromium, driven by Playwright, against a
real operator (the chart's identity) on the real API server, with its SQLite history database.

One operator and one browser serve the whole module (a few tests, a minute or two):

* a viewer logs in with a token (ServiceAccount `alice`, bound in namespace A only) and sees
  A's jobs and not B's; the namespace list holds A alone; the text and health filters filter;
* a one-off job created two hours after its `runAt` with `catchUpPolicy: None` shows its
  `Missed` occurrence and the reason on its page;
* on a job's page Run now creates the manual Execution, Suspend (with a `<script>` reason)
  suspends it in alice's name and shows the reason as text, Resume resumes it;
* an execution whose pod is long gone shows its attempts and stored log tail from the history
  database, a `<script>` in the log shown as text (a dialog would fail the test);
* a workflow's DAG (SVG) changes as its steps move, by htmx polling, without a reload;
  `bob`, who may patch workflows but lacks the `approve` verb, is refused by admission,
  `carol`, who holds the verb but is not among the step's approvers, by the operator, and
  alice (an approver, with the verb) approves, after which the last step runs; a step's output
  (with markup in it) shows as text, and as its dependent's input;
* two dead letters of a TaskQueue (the operator's real PostgreSQL queue store), one's error a
  `<script>`, are retried at once from the Dead letters page; the Task queues page shows the
  queue's breakdown and its recurring job; bob, without `update` on its executions, is refused;
* the Watchdog page shows a job that dead-lettered, and since when.

Screenshots of each page are saved in `.cluster/<test cluster>/console-screenshots/`. Chromium is
Debian's (`scripts/system-deps.sh` installs it); Playwright never downloads a browser.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from kubernetes import client
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.contract.conftest import postgres
from tests.contract.postgres import PostgresServer
from tests.integration.conftest import STATE, KubeCluster
from tests.integration.jobs import create_job, get_job
from tests.integration.operators import OperatorFleet
from tests.integration.test_task_queues import create as create_taskqueue
from tests.integration.viewers import free_port, rules, serving, viewer_token
from tests.integration.workflows import create_workflow, emit, pod_step
from tests.queue.conftest import conninfo
from tests.waiting import wait_for
from vigil.core.executions import RetryPolicy
from vigil.core.history import AttemptRecord, AttemptState
from vigil.core.logtail import LogTail
from vigil.core.queue import AttemptOutcome, Submission, after_failure
from vigil.history.store import SqlHistory
from vigil.queue.store import Finished, QueueStore, WorkerStore

__all__ = ["postgres"]

pytestmark = pytest.mark.postgres

GROUP = "vigil.dev"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
HOSTILE = "<script>alert('owned')</script>"
#: Where each page's screenshot is saved, kept after the run (beside the test cluster's state,
#: which git ignores): the newest run's replace the last.
SHOTS = STATE / "console-screenshots"
#: What every test may wait for a page to show, in milliseconds: an operator pass or two.
EXPECT_MS = 30_000


def make_namespace(cluster: KubeCluster) -> str:
    name = f"con-{uuid.uuid4().hex[:8]}"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


@dataclass
class Setting:
    cluster: KubeCluster
    base: str
    team: str
    other: str
    alice: str
    bob: str
    carol: str
    history: SqlHistory
    queue_dsn: str
    browser: Browser
    shots: Path


@pytest.fixture(scope="module")
def setting(
    cluster: KubeCluster, postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setting]:
    workdir = tmp_path_factory.mktemp("console")
    SHOTS.mkdir(parents=True, exist_ok=True)
    team, other = make_namespace(cluster), make_namespace(cluster)
    queue_dsn = conninfo(postgres, postgres.create_database())
    QueueStore(queue_dsn).migrate()
    fleet = OperatorFleet(cluster, workdir, queue={"dsn": queue_dsn})
    port = free_port()
    fleet.start(http={"apiPort": port})
    base = f"http://127.0.0.1:{port}"
    history = SqlHistory(f"sqlite:///{workdir}/history.db")
    try:
        wait_for(lambda: serving(base), timeout=60, what="the operator serving the console")
        for name in ("nightly", "hourly"):
            create_job(cluster, team, name, cron="0 3 * * *" if name == "nightly" else "0 * * * *", timezone="Europe/Paris")
        create_job(cluster, other, "secret-job", cron="0 4 * * *")
        alice = viewer_token(cluster, team, "alice", rules(approve=True))
        bob = viewer_token(cluster, team, "bob", rules(approve=False))
        carol = viewer_token(cluster, team, "carol", rules(approve=True))  # the verb, but no approver
        with sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                yield Setting(cluster, base, team, other, alice, bob, carol, history, queue_dsn, browser, SHOTS)
            finally:
                browser.close()
                print(f"console screenshots: {sorted(str(p) for p in SHOTS.glob('*.png'))}")
    except BaseException:
        print(fleet.logs())
        raise
    finally:
        history.close()
        fleet.stop()
        for namespace in (team, other, fleet.namespace):
            cluster.clear_namespace(namespace)


def logged_in(setting: Setting, token: str) -> Page:
    """A fresh browser context (its own cookies) logged in with `token`; a page that opens a
    dialog (an injected script ran) fails the test."""
    page = setting.browser.new_context().new_page()

    def injected(dialog: Any) -> None:
        raise AssertionError(f"a script ran on the page: {dialog.message}")

    page.on("dialog", injected)
    page.goto(f"{setting.base}/console")
    expect(page).to_have_url(f"{setting.base}/console/login")
    page.fill("#token", token)
    page.click("#login button")
    expect(page).to_have_url(f"{setting.base}/console/jobs")
    return page


def test_a_viewer_sees_only_the_namespaces_they_may_list_and_filters_jobs(setting: Setting) -> None:
    page = logged_in(setting, setting.alice)
    expect(page.locator("#viewer")).to_have_text(f"system:serviceaccount:{setting.team}:alice")
    jobs = page.locator("#jobs tbody tr.job")
    expect(jobs).to_have_count(2)
    assert set(jobs.locator("td:nth-child(2)").all_inner_texts()) == {"nightly", "hourly"}
    assert setting.other not in page.content() and "secret-job" not in page.content()
    assert page.locator("#namespace option").all_inner_texts()[1:] == [setting.team]
    page.fill("#q", "night")
    page.click("#filter button")
    expect(jobs).to_have_count(1)
    expect(jobs.first).to_contain_text("nightly")
    page.select_option("#health", "invalid")
    page.click("#filter button")
    expect(jobs).to_have_count(0)
    page.goto(f"{setting.base}/console/jobs?q=" + "x" * 101)
    expect(page.locator("#error")).to_contain_text("q: is longer than 100 characters")
    page.goto(f"{setting.base}/console/namespaces/{setting.other}/jobs/secret-job")
    expect(page.locator("#error")).to_contain_text("may not get scheduledjob secret-job")
    page.goto(f"{setting.base}/console/jobs")
    page.screenshot(path=setting.shots / "jobs.png", full_page=True)


def test_run_now_suspend_and_resume_as_the_viewer(setting: Setting) -> None:
    page = logged_in(setting, setting.alice)
    page.click("text=nightly")
    expect(page.locator("h1")).to_have_text("nightly")
    page.click("#run button")
    expect(page.locator("#notice")).to_contain_text("created (request run-")
    uid = get_job(setting.cluster, setting.team, "nightly")["metadata"]["uid"]
    manual = setting.cluster.custom.list_namespaced_custom_object(
        GROUP, "v1alpha1", setting.team, "executions", label_selector=f"vigil.dev/job-uid={uid}"
    )["items"]
    assert [e["spec"].get("source") for e in manual] == ["Manual"]

    page.fill("#suspend-reason", HOSTILE)
    page.click("#suspend button")
    expect(page.locator("#notice")).to_contain_text(f"suspended by system:serviceaccount:{setting.team}:alice")
    expect(page.locator("#suspension")).to_contain_text(HOSTILE)  # shown as text, not run
    spec = get_job(setting.cluster, setting.team, "nightly")["spec"]
    assert (spec["suspend"], spec["suspendReason"], spec["suspendedBy"]) == (
        True, HOSTILE, f"system:serviceaccount:{setting.team}:alice"
    )  # fmt: skip
    page.screenshot(path=setting.shots / "job-suspended.png", full_page=True)
    page.click("#resume button")
    expect(page.locator("#notice")).to_contain_text("resumed")
    assert not get_job(setting.cluster, setting.team, "nightly")["spec"].get("suspend")


def test_a_missed_occurrence_and_its_reason(setting: Setting) -> None:
    late = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    create_job(setting.cluster, setting.team, "missed-once", runAt=late.isoformat().replace("+00:00", "Z"),
               catchUpPolicy="None")  # fmt: skip
    page = logged_in(setting, setting.alice)
    page.goto(f"{setting.base}/console/namespaces/{setting.team}/jobs/missed-once")
    row = page.locator("#occurrences tbody tr", has_text="Missed")
    wait_for(lambda: _reloaded_count(page, row) > 0, timeout=EXPECT_MS / 1000, what="the Missed occurrence on the job's page")
    expect(row.locator("td.outcome")).to_have_text("Missed")
    assert row.locator("td.reason").inner_text().strip()  # says why
    page.screenshot(path=setting.shots / "job-missed.png", full_page=True)


def _reloaded_count(page: Page, rows: Any) -> int:
    page.reload()
    return int(rows.count())


def test_a_gone_execution_shows_its_attempts_and_stored_log_escaped(setting: Setting) -> None:
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    uid = get_job(setting.cluster, setting.team, "hourly")["metadata"]["uid"]
    execution_id = "hourly-gone-1"
    setting.history.write([
        AttemptRecord(execution_id=execution_id, attempt=1, namespace=setting.team, job="hourly", job_uid=uid,
                      priority="normal", state=AttemptState.FAILED, scheduled_for=at, reason="Error",
                      started_at=at, finished_at=at + timedelta(seconds=5), pod="hourly-gone-1-1", error=HOSTILE),
    ])  # fmt: skip
    setting.history.write_log_tail(LogTail(
        execution_id=execution_id, attempt=1, namespace=setting.team, job="hourly", pod="hourly-gone-1-1",
        scheduled_for=at, captured_at=at + timedelta(seconds=5), text=f"starting\n{HOSTILE}\nfailed\n",
    ))  # fmt: skip
    page = logged_in(setting, setting.alice)
    page.goto(f"{setting.base}/console/namespaces/{setting.team}/jobs/hourly")
    expect(page.locator("#history")).to_contain_text(execution_id)
    expect(page.locator("#history tr.attempt")).to_contain_text("hourly-gone-1-1")
    log = page.locator("details.log pre")
    expect(log).to_have_text(f"starting\n{HOSTILE}\nfailed\n")
    assert page.locator("script:not([src])").count() == 0  # the payload is text, not an element
    page.screenshot(path=setting.shots / "job-history.png", full_page=True)


def test_the_dag_updates_live_and_only_an_approver_approves(setting: Setting) -> None:
    approver = f"system:serviceaccount:{setting.team}:alice"
    create_workflow(setting.cluster, setting.team, "release", steps=[
        pod_step("build", command=emit({"artifact": "v1 <b>bold</b>"})),
        {"id": "gate", "type": "approval", "dependsOn": ["build"], "approval": {"approvers": [approver]}},
        pod_step("ship", "gate"),
    ])  # fmt: skip
    bob = logged_in(setting, setting.bob)
    bob.goto(f"{setting.base}/console/namespaces/{setting.team}/workflows/release")
    gate = bob.locator('#dag g[data-step="gate"]')
    expect(gate).to_have_attribute("data-phase", "Running", timeout=EXPECT_MS)  # polled in, no reload
    expect(bob.locator('#dag g[data-step="build"]')).to_have_attribute("data-phase", "Succeeded")
    bob.reload()
    bob.fill("#decide-gate input[name=reason]", "ship it")
    bob.click("#decide-gate button:has-text('Approve')")
    expect(bob.locator("#notice")).to_contain_text("refused")
    expect(bob.locator("#notice")).to_contain_text("approve")

    carol = logged_in(setting, setting.carol)  # holds `approve`, is not among the step's approvers
    carol.goto(f"{setting.base}/console/namespaces/{setting.team}/workflows/release")
    carol.fill("#decide-gate input[name=reason]", "me too")
    carol.click("#decide-gate button:has-text('Approve')")
    expect(carol.locator("#notice")).to_contain_text("refused by the operator: NotAnApprover", timeout=EXPECT_MS)
    expect(carol.locator('#dag g[data-step="gate"]')).to_have_attribute("data-phase", "Running")

    alice = logged_in(setting, setting.alice)
    alice.goto(f"{setting.base}/console/namespaces/{setting.team}/workflows/release")
    alice.fill("#decide-gate input[name=reason]", HOSTILE)
    alice.click("#decide-gate button:has-text('Approve')")
    expect(alice.locator("#notice")).to_contain_text("approved step gate of workflow/release", timeout=EXPECT_MS)
    expect(alice.locator('#dag g[data-step="ship"]')).to_have_attribute("data-phase", "Succeeded", timeout=EXPECT_MS)
    expect(bob.locator('#dag g[data-step="gate"]')).to_have_attribute("data-phase", "Succeeded", timeout=EXPECT_MS)
    alice.reload()  # the page a POST redirected to: reloading it decides nothing again
    expect(alice.locator("#notice")).to_have_count(0)
    built = '{"artifact": "v1 <b>bold</b>"}'
    expect(alice.locator('#steps tr[data-step="build"] pre.output')).to_have_text(built)  # text, not markup
    expect(alice.locator('#steps tr[data-step="gate"] pre.inputs')).to_have_text(f"build: {built}")
    expect(alice.locator('#steps tr.attempt[data-step="build"]').first).to_contain_text("1")  # its attempt's entries
    expect(alice.locator('#steps tr.attempt[data-step="gate"]').last).to_contain_text(HOSTILE)  # the decision's reason, as text
    alice.screenshot(path=setting.shots / "workflow.png", full_page=True)


def dead_letters(dsn: str, queue: str, errors: list[str]) -> list[str]:
    """Executions of `queue` that failed their one attempt (through a worker's own calls), one per error."""
    now = datetime.now(UTC).replace(microsecond=0)
    store = QueueStore(dsn)
    ids = store.submit(queue, [Submission(task="record", max_attempts=1) for _ in errors], now=now)

    async def kill() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            worker = WorkerStore(connection, queue=queue, worker="w1")
            held = await worker.lease(["record"], limit=len(errors), lease=timedelta(seconds=30), now=now)
            assert len(held) == len(errors)
            for one, error in zip(held, errors, strict=True):
                dead = after_failure(
                    execution_id=one.execution_id, attempt=one.attempt, max_attempts=one.attempt,
                    backoff=RetryPolicy(), now=now,
                )  # fmt: skip
                await worker.settle([Finished(one, AttemptOutcome.FAILED, now, now, error, dead)], now=now)

    with concurrent.futures.ThreadPoolExecutor(1) as apart:  # Playwright's loop runs on this thread
        apart.submit(lambda: asyncio.run(kill())).result()
    return ids


def test_dead_letters_retried_two_at_once_and_the_queues_page(setting: Setting) -> None:
    create_taskqueue(setting.cluster, setting.team, "orders", {})
    create_job(setting.cluster, setting.team, "orders-hourly", cron="0 * * * *", task={"queue": "orders", "name": "record"})
    ids = dead_letters(setting.queue_dsn, f"{setting.team}/orders", ["Traceback ...\nValueError: poison", f"KeyError: {HOSTILE}"])

    bob = logged_in(setting, setting.bob)
    bob.goto(f"{setting.base}/console/dead-letters")
    queue = bob.locator(f'section.queue[data-queue="{setting.team}/orders"]')
    expect(queue.locator("table.dead tbody tr")).to_have_count(2)
    expect(queue).to_contain_text(f"KeyError: {HOSTILE}")  # as text
    queue.locator("input[name=execution]").first.check()
    queue.locator("button[type=submit]").click()
    expect(bob.locator("#notice")).to_contain_text("refused (403)")

    alice = logged_in(setting, setting.alice)
    alice.goto(f"{setting.base}/console/dead-letters")
    queue = alice.locator(f'section.queue[data-queue="{setting.team}/orders"]')
    for box in queue.locator("input[name=execution]").all():
        box.check()
    alice.screenshot(path=setting.shots / "dead-letters.png", full_page=True)
    queue.locator("button[type=submit]").click()
    expect(alice.locator("#notice")).to_contain_text("retried")
    notice = alice.locator("#notice").inner_text()
    assert sorted(notice.split("; ")) == sorted(f"{i}: retried" for i in ids)
    expect(alice.locator(f'section.queue[data-queue="{setting.team}/orders"]')).to_contain_text("No dead letters.")

    alice.goto(f"{setting.base}/console/taskqueues")
    queue = alice.locator(f'section.queue[data-queue="{setting.team}/orders"]')
    expect(queue.locator("table.breakdown tbody tr td:nth-child(3)")).to_have_text("2")  # the two, ready again
    expect(queue.locator("table.recurring")).to_contain_text("orders-hourly")
    alice.screenshot(path=setting.shots / "taskqueues.png", full_page=True)


def test_the_watchdog_page_shows_a_dead_lettered_job_and_since_when(setting: Setting) -> None:
    soon = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    create_job(setting.cluster, setting.team, "doomed", command="exit 1", runAt=soon.isoformat().replace("+00:00", "Z"),
               retry={"maxAttempts": 1})  # fmt: skip
    page = logged_in(setting, setting.alice)
    page.goto(f"{setting.base}/console/watchdog")
    row = page.locator("#alarms tbody tr", has_text="doomed")
    wait_for(lambda: _reloaded_count(page, row) > 0, timeout=EXPECT_MS / 1000, what="the doomed job on the Watchdog page")
    expect(row).to_contain_text("dead-lettered")
    assert row.locator("td").first.inner_text().startswith(str(soon.year))  # since when
    assert "secret-job" not in page.content()
    page.screenshot(path=setting.shots / "watchdog.png", full_page=True)


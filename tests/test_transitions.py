"""Every crawl transition, allowed and refused, and the one event each records."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from archiver import conf
from archiver.errors import NotAllowed
from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlEvent, CrawlStatus, Intent, Org, StopReason
from crawls.models.statuses import TRANSITIONS, said

S = CrawlStatus
NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
LATER = NOW + dt.timedelta(seconds=5)
FINAL = list(S.FINAL)
NOT_FINAL_OR_FAILED = [s for s in S.FINAL if s not in (S.FAILED, S.CANCELED)]

pytestmark = pytest.mark.django_db


@pytest.fixture
def make_crawl():
    """A crawl of the default org, put straight into `status` with `fields`."""

    def make(status=S.QUEUED, **fields) -> Crawl:
        org = Org.objects.get(slug="default")
        crawl = Crawl.create(org, CrawlConfig(seeds=["https://example.com/"]), now=NOW)
        Crawl.objects.filter(pk=crawl.pk).update(status=status, **fields)
        crawl.refresh_from_db()
        return crawl

    return make


def events(crawl: Crawl) -> list[str]:
    return list(CrawlEvent.objects.filter(crawl=crawl).values_list("name", flat=True))


def claim(crawl: Crawl, owner: str = "runner-a") -> int:
    """Claim `crawl` (made due now) the way a runner does; returns the lease token."""
    Crawl.objects.filter(pk=crawl.pk).update(retry_at=NOW)
    (won,) = Crawl.objects.filter(pk=crawl.pk).claim(owner, NOW, lease_seconds=30)
    crawl.refresh_from_db()
    return won.token


def test_a_new_crawl_is_queued_due_now_with_one_queued_event(make_crawl):
    crawl = make_crawl()
    assert crawl.status == S.QUEUED
    assert crawl.retry_at == NOW
    assert events(crawl) == ["crawl.queued"]


# --- pause ---------------------------------------------------------------------------------


@pytest.mark.parametrize("status", S.NOT_STARTED)
def test_pausing_a_crawl_that_has_not_started_pauses_it_at_once(make_crawl, status):
    crawl = make_crawl(status)
    crawl.pause(LATER)
    crawl.refresh_from_db()
    assert crawl.status == S.PAUSED
    assert crawl.paused_at == LATER
    assert crawl.retry_at == LATER + dt.timedelta(seconds=conf.get().pause_limit)
    assert events(crawl) == ["crawl.queued", "crawl.paused"]


@pytest.mark.parametrize("status", S.RUNNING_STATES)
def test_pausing_a_running_crawl_records_the_intent_for_the_runner(make_crawl, status):
    crawl = make_crawl(status, started_at=NOW)
    crawl.pause(LATER)
    crawl.refresh_from_db()
    assert (crawl.status, crawl.intent) == (status, Intent.PAUSE)
    assert events(crawl) == ["crawl.queued"]


@pytest.mark.parametrize("status", [S.PAUSED, *FINAL])
def test_pausing_a_paused_or_finished_crawl_is_refused(make_crawl, status):
    crawl = make_crawl(status)
    with pytest.raises(NotAllowed, match=f"cannot pause crawl {crawl.short_id}: {re.escape(said(status))}"):
        crawl.pause(LATER)
    crawl.refresh_from_db()
    assert (crawl.status, crawl.intent) == (status, "")
    assert events(crawl) == ["crawl.queued"]


def test_a_runner_that_lost_a_crawl_to_a_user_pause_cannot_make_it_due_again(make_crawl):
    crawl = make_crawl()
    token = claim(crawl)
    crawl.pause(LATER)
    assert not Crawl.objects.release(crawl.pk, token, retry_at=LATER)
    assert not Crawl.objects.renew(crawl.pk, token, LATER, lease_seconds=30)
    crawl.refresh_from_db()
    assert crawl.retry_at == LATER + dt.timedelta(seconds=conf.get().pause_limit)


# --- resume --------------------------------------------------------------------------------


def test_resuming_a_paused_crawl_queues_it_due_now(make_crawl):
    crawl = make_crawl()
    crawl.pause(NOW)
    crawl.resume(LATER)
    crawl.refresh_from_db()
    assert crawl.status == S.QUEUED
    assert crawl.retry_at == LATER
    assert crawl.paused_at is None
    assert events(crawl) == ["crawl.queued", "crawl.paused", "crawl.resumed"]


def test_resuming_withdraws_a_pause_the_runner_has_not_carried_out(make_crawl):
    crawl = make_crawl(S.RUNNING, started_at=NOW)
    crawl.pause(NOW)
    crawl.resume(LATER)
    crawl.refresh_from_db()
    assert (crawl.status, crawl.intent) == (S.RUNNING, "")
    assert events(crawl) == ["crawl.queued"]


@pytest.mark.parametrize("status", [S.QUEUED, S.RUNNING, *FINAL])
def test_resuming_a_crawl_that_is_not_paused_is_refused(make_crawl, status):
    crawl = make_crawl(status)
    with pytest.raises(NotAllowed, match=f"cannot resume crawl {crawl.short_id}: {re.escape(said(status))}"):
        crawl.resume(LATER)
    crawl.refresh_from_db()
    assert crawl.status == status
    assert events(crawl) == ["crawl.queued"]


# --- stop and cancel -----------------------------------------------------------------------


@pytest.mark.parametrize("action", ["stop", "cancel"])
@pytest.mark.parametrize("status", S.NOT_STARTED)
def test_stopping_or_canceling_a_crawl_that_never_started_cancels_it_at_once(make_crawl, action, status):
    crawl = make_crawl(status)
    getattr(crawl, action)(LATER)
    crawl.refresh_from_db()
    assert crawl.status == S.CANCELED
    assert crawl.stop_reason == StopReason.USER
    assert crawl.finished_at == LATER
    assert crawl.retry_at is None
    assert events(crawl) == ["crawl.queued", "crawl.canceled"]


@pytest.mark.parametrize(("action", "intent"), [("stop", Intent.STOP), ("cancel", Intent.CANCEL)])
@pytest.mark.parametrize("status", [*S.RUNNING_STATES, S.WAITING_CAPACITY])
def test_stopping_or_canceling_a_started_crawl_is_left_to_the_runner(make_crawl, action, intent, status):
    crawl = make_crawl(status, started_at=NOW)
    getattr(crawl, action)(LATER)
    crawl.refresh_from_db()
    assert (crawl.status, crawl.intent) == (status, intent)
    assert events(crawl) == ["crawl.queued"]


@pytest.mark.parametrize("action", ["stop", "cancel"])
def test_stopping_a_paused_crawl_makes_it_due_so_a_runner_ends_it(make_crawl, action):
    crawl = make_crawl(S.RUNNING, started_at=NOW)
    token = claim(crawl)
    assert crawl.mark_paused(token, NOW)
    getattr(crawl, action)(LATER)
    crawl.refresh_from_db()
    assert (crawl.status, crawl.intent, crawl.retry_at) == (S.PAUSED, action, LATER)


@pytest.mark.parametrize("action", ["stop", "cancel"])
@pytest.mark.parametrize("status", FINAL)
def test_stopping_or_canceling_a_finished_crawl_is_refused(make_crawl, action, status):
    crawl = make_crawl(status)
    with pytest.raises(NotAllowed, match=f"cannot {action} crawl .*: {re.escape(said(status))}"):
        getattr(crawl, action)(LATER)
    crawl.refresh_from_db()
    assert (crawl.status, crawl.intent) == (status, "")
    assert events(crawl) == ["crawl.queued"]


# --- retry ---------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [S.FAILED, S.CANCELED])
def test_retrying_a_failed_or_canceled_crawl_queues_a_fresh_attempt(make_crawl, status):
    crawl = make_crawl(status, pages_found=9, pages_done=4, error="boom", finished_at=NOW,
                       started_at=NOW, retry_at=None)
    crawl.retry(LATER)
    crawl.refresh_from_db()
    assert crawl.status == S.QUEUED
    assert crawl.attempts == 2
    assert (crawl.pages_found, crawl.pages_done, crawl.error) == (0, 0, "")
    assert (crawl.finished_at, crawl.started_at, crawl.retry_at) == (None, None, LATER)
    assert events(crawl) == ["crawl.queued", "crawl.queued"]


@pytest.mark.parametrize("status", [S.QUEUED, S.RUNNING, S.PAUSED, *NOT_FINAL_OR_FAILED])
def test_retrying_a_crawl_that_did_not_fail_is_refused(make_crawl, status):
    crawl = make_crawl(status)
    with pytest.raises(NotAllowed, match=f"cannot retry crawl .*: {re.escape(said(status))}"):
        crawl.retry(LATER)
    crawl.refresh_from_db()
    assert (crawl.status, crawl.attempts) == (status, 1)
    assert events(crawl) == ["crawl.queued"]


# --- runner transitions --------------------------------------------------------------------


def test_the_runner_takes_a_crawl_from_queued_to_complete_with_one_event_each(make_crawl):
    crawl = make_crawl()
    token = claim(crawl)
    assert crawl.mark_starting(token, NOW)
    assert crawl.mark_running(token, NOW)
    assert crawl.mark_finishing(S.GENERATE_WACZ, token, NOW)
    assert crawl.mark_running(token, NOW)  # back to running: no second "started"
    assert crawl.finish(S.COMPLETE, token, LATER)
    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE
    assert crawl.started_at == NOW
    assert (crawl.finished_at, crawl.retry_at, crawl.lease_owner) == (LATER, None, "")
    assert events(crawl) == ["crawl.queued", "crawl.started", "crawl.completed"]


@pytest.mark.parametrize("step", [
    lambda crawl, token: crawl.mark_starting(token, NOW),
    lambda crawl, token: crawl.mark_waiting(S.WAITING_CAPACITY, "no room", token, NOW),
    lambda crawl, token: crawl.finish(S.FAILED, token, NOW, error="x"),
], ids=["mark_starting", "mark_waiting", "finish"])
def test_a_runner_transition_with_a_wrong_token_changes_nothing(make_crawl, step):
    crawl = make_crawl()
    token = claim(crawl)
    assert not step(crawl, token + 1)
    crawl.refresh_from_db()
    assert crawl.status == S.QUEUED
    assert events(crawl) == ["crawl.queued"]


def test_a_runner_whose_lease_was_taken_over_cannot_finish_the_crawl(make_crawl):
    crawl = make_crawl()
    old = claim(crawl, "runner-a")
    new = claim(crawl, "runner-b")
    assert not crawl.finish(S.COMPLETE, old, LATER)
    assert crawl.finish(S.FAILED, new, LATER, error="crashed")
    crawl.refresh_from_db()
    assert (crawl.status, crawl.error) == (S.FAILED, "crashed")
    assert events(crawl) == ["crawl.queued", "crawl.failed"]


def test_waiting_records_the_reason_and_no_event(make_crawl):
    crawl = make_crawl()
    token = claim(crawl)
    assert crawl.mark_waiting(S.WAITING_ORG_LIMIT, "org default runs 2 of 2 crawls", token, NOW)
    crawl.refresh_from_db()
    assert (crawl.status, crawl.waiting_reason) == (S.WAITING_ORG_LIMIT, "org default runs 2 of 2 crawls")
    assert events(crawl) == ["crawl.queued"]


def test_the_runner_pauses_a_running_crawl_with_one_paused_event(make_crawl):
    crawl = make_crawl(S.RUNNING, started_at=NOW)
    crawl.pause(NOW)
    token = claim(crawl)
    assert crawl.mark_paused(token, LATER)
    crawl.refresh_from_db()
    assert (crawl.status, crawl.intent, crawl.lease_owner) == (S.PAUSED, "", "")
    assert events(crawl) == ["crawl.queued", "crawl.paused"]


def test_mark_running_is_refused_from_a_final_state(make_crawl):
    crawl = make_crawl()
    token = claim(crawl)
    assert crawl.finish(S.CANCELED, token, NOW, stop_reason=StopReason.USER)
    assert not crawl.mark_running(token, LATER)
    assert not crawl.finish(S.COMPLETE, token, LATER)
    crawl.refresh_from_db()
    assert crawl.status == S.CANCELED
    assert events(crawl) == ["crawl.queued", "crawl.canceled"]


def test_a_crawl_canceled_by_a_user_cannot_be_finished_again_by_its_runner(make_crawl):
    crawl = make_crawl()
    token = claim(crawl)
    Crawl.objects.get(pk=crawl.pk).cancel(NOW)
    assert not crawl.mark_starting(token, LATER)
    assert not crawl.finish(S.COMPLETE, token, LATER)
    crawl.refresh_from_db()
    assert crawl.status == S.CANCELED
    assert events(crawl) == ["crawl.queued", "crawl.canceled"]


@pytest.mark.parametrize(("reason", "status", "event"), [
    (StopReason.USER, S.STOPPED_BY_USER, "crawl.stopped"),
    (StopReason.TIME_LIMIT, S.STOPPED_TIME_LIMIT, "crawl.stopped"),
    (StopReason.STORAGE_QUOTA, S.STOPPED_QUOTA_REACHED, "crawl.quota_reached"),
])
def test_finishing_with_a_stop_reason_records_the_matching_event(make_crawl, reason, status, event):
    crawl = make_crawl(S.RUNNING, started_at=NOW)
    token = claim(crawl)
    assert crawl.finish(status, token, LATER, stop_reason=reason)
    crawl.refresh_from_db()
    assert (crawl.status, crawl.stop_reason) == (status, reason)
    assert events(crawl) == ["crawl.queued", event]


# --- the one table -------------------------------------------------------------------------

STATES_DOC = Path(__file__).resolve().parents[1] / "docs" / "states.md"
GROUPS = {"not started": S.NOT_STARTED, "running": S.RUNNING_STATES, "final": S.FINAL,
          "successful": S.SUCCESSFUL, "active": S.ACTIVE}


def documented_states(cell: str) -> set[str]:
    """The states a cell of docs/states.md's table names: `state`s and *group*s."""
    states = set(re.findall(r"`([a-z_]+)`", cell))
    for group in re.findall(r"\*([a-z ]+)\*", cell):
        states.update(GROUPS[group])
    return states


def documented_transitions() -> dict[str, tuple[set[str], set[str]]]:
    section = STATES_DOC.read_text().split("## Transitions", 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and (name := re.fullmatch(r"`(\w+)`", cells[0])):
            table[name[1]] = (documented_states(cells[2]), documented_states(cells[3]))
    return table


def test_docs_states_md_shows_the_transition_table_of_the_code():
    in_code = {name: (set(move.origins), set(move.to)) for name, move in TRANSITIONS.items()}
    assert documented_transitions() == in_code


def test_every_transition_of_the_table_is_made_somewhere():
    models = Path(__file__).resolve().parents[1] / "crawls" / "models"
    code = "\n".join(path.read_text() for path in models.glob("*.py"))
    made = set(re.findall(r'_transition\(\s*"(\w+)"', code)) | set(re.findall(r'TRANSITIONS\["(\w+)"\]', code))
    assert made == set(TRANSITIONS)


def test_a_transition_to_a_state_outside_its_table_is_a_programming_error(make_crawl):
    crawl = make_crawl(S.RUNNING, started_at=NOW)
    token = claim(crawl)
    with pytest.raises(AssertionError):
        crawl.mark_finishing(S.COMPLETE, token, LATER)
    crawl.refresh_from_db()
    assert crawl.status == S.RUNNING

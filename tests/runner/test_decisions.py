"""The runner's pure decisions: exit codes, outcomes, backoff and crawl state."""

from __future__ import annotations

import datetime as dt

import pytest

from crawls.models import (
    Crawl,
    CrawlStatus,
    ExitReason,
    Intent,
    Process,
    ProcessStatus,
    elapsed_with_uncounted,
)
from runner import decide
from runner.daemon import classify_exit, crawl_state_for, decide_outcome, relaunch_delay
from runner.decide import fatal_line
from runner.observe import Observation
from runner.progress import Flag, Progress
from runner.state import Held

S = CrawlStatus
t0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(("code", "oom", "reason"), [
    (0, False, ExitReason.DONE),
    (137, False, ExitReason.CRASH),  # killed, but not by the OOM killer (Docker's flag says)
    (137, True, ExitReason.OOM),
    (1, True, ExitReason.OOM),
    (11, False, ExitReason.INTERRUPTED),
    (13, False, ExitReason.INTERRUPTED),
    (4, False, ExitReason.PERMANENT),
    (17, False, ExitReason.PERMANENT),
    (14, False, ExitReason.LIMIT),
    (15, False, ExitReason.LIMIT),
    (16, False, ExitReason.DISK),
    (3, False, ExitReason.DISK),
    (1, False, ExitReason.CRASH),
    (8, False, ExitReason.REDIS),
    (None, False, ExitReason.CRASH),
])
def test_exit_codes_are_classified_as_the_protocol_says(code, oom, reason):
    assert classify_exit(code, oom) == reason


@pytest.mark.parametrize(("status", "reason"), [
    ("", ExitReason.UNREPORTED), ("running", ExitReason.UNREPORTED),
    ("pending-wait", ExitReason.UNREPORTED), ("canceled", ExitReason.DONE),
    ("interrupted", ExitReason.DONE), (None, ExitReason.DONE),  # None: Redis away, not known
])
def test_an_exit_0_without_a_final_status_is_a_failed_attempt(status, reason):
    assert classify_exit(0, False, status) == reason
    assert (reason in decide.FAILED_ATTEMPT) == (reason == ExitReason.UNREPORTED)


@pytest.mark.parametrize(("code", "status", "reason"), [
    (0, "failed", ExitReason.PERMANENT),  # a fatal error under --restartsOnError
    (0, "done", ExitReason.DONE),
    (9, "failed", ExitReason.NO_PAGE),  # no page succeeded: not a crash
    (9, None, ExitReason.NO_PAGE),
    (11, "interrupted", ExitReason.INTERRUPTED),
    (1, "failed", ExitReason.CRASH),
])
def test_the_crawler_status_an_instance_left_labels_its_exit(code, status, reason):
    assert classify_exit(code, False, status) == reason


def test_the_last_fatal_line_of_a_crawler_log_is_found():
    tail = "\n".join([
        '{"logLevel":"info","message":"Seeds: 1"}',
        '{"logLevel":"fatal","context":"general","message":"No valid seeds. Quitting"}',
        '{"logLevel":"info","message":"Exiting, Crawl status: failed"}',
        "not json with \"fatal\" in it",
    ])
    assert fatal_line(tail) == "No valid seeds. Quitting"
    assert fatal_line('{"logLevel":"error","message":"fatal-ish"}\nplain fatal text') == ""


def outcome(statuses, intent="", stop_reason="", done=5, found=5, files=True, retry=False):
    return decide_outcome(statuses, intent=intent, stop_reason=stop_reason, pages_done=done,
                          pages_found=found, has_files=files, failed_pages_session=retry)


@pytest.mark.parametrize(("statuses", "kwargs", "expected"), [
    (["done"], {}, S.COMPLETE),
    (["done", "failed"], {}, S.COMPLETE),
    (["done", "running"], {}, None),
    (["done", None], {}, None),
    ([], {}, None),
    (["failed", "failed"], {}, S.FAILED),
    (["failed"], {"intent": Intent.STOP, "stop_reason": "user", "done": 0}, S.CANCELED),
    (["failed"], {"intent": Intent.STOP, "stop_reason": "user", "done": 2}, S.FAILED),
    (["done"], {"stop_reason": "user", "intent": Intent.STOP}, S.STOPPED_BY_USER),
    (["done"], {"stop_reason": "time_limit"}, S.STOPPED_TIME_LIMIT),
    (["done"], {"stop_reason": "size_limit"}, S.STOPPED_SIZE_LIMIT),
    (["done"], {"stop_reason": "page_limit"}, S.STOPPED_PAGE_LIMIT),
    (["done"], {"stop_reason": "storage_quota"}, S.STOPPED_QUOTA_REACHED),
    (["done"], {"stop_reason": "exec_quota"}, S.STOPPED_QUOTA_REACHED),
    (["canceled"], {"intent": Intent.CANCEL}, S.CANCELED),
    (["done", "canceled"], {}, S.CANCELED),
    (["done"], {"found": 1, "done": 1, "files": False}, S.FAILED),
    (["done"], {"found": 1, "done": 1, "files": True}, S.COMPLETE),
    (["interrupted", "interrupted"], {"intent": Intent.PAUSE}, S.PAUSED),
    (["interrupted", "done"], {"intent": Intent.PAUSE}, S.PAUSED),
    (["interrupted", "running"], {"intent": Intent.PAUSE}, None),
    (["interrupted"], {}, None),
    ([decide.ENDED], {"intent": Intent.STOP, "stop_reason": "user"}, S.STOPPED_BY_USER),
    ([decide.ENDED], {"stop_reason": "size_limit", "files": False}, S.STOPPED_SIZE_LIMIT),
    ([decide.ENDED], {"intent": Intent.STOP, "stop_reason": "user", "done": 0, "files": False}, S.CANCELED),
    ([decide.ENDED], {"intent": Intent.CANCEL}, S.CANCELED),
    (["failed"], {"retry": True}, S.COMPLETE),  # a failed-pages session: the crawl keeps its pages
    (["failed"], {"retry": True, "files": False}, S.FAILED),
])
def test_the_outcome_is_read_from_the_instances_statuses(statuses, kwargs, expected):
    result = outcome(statuses, **kwargs)
    assert (result.status if result else None) == expected


def test_a_failure_says_why():
    assert outcome(["failed"]).error == "every crawler instance failed"
    assert "one page" in outcome(["done"], found=1, done=1, files=False).error


def test_relaunch_backoff_doubles_and_is_capped():
    assert [relaunch_delay(n) for n in range(5)] == [0, 1, 2, 4, 8]
    assert relaunch_delay(30) == 60


@pytest.mark.parametrize(("statuses", "state"), [
    (["running", "pending-wait"], S.RUNNING),
    (["generate-wacz", "pending-wait"], S.GENERATE_WACZ),
    (["uploading-wacz"], S.GENERATE_WACZ),
    (["pending-wait", "done"], S.PENDING_WAIT),
    (["done"], None),
    (["pending-wait"], None),  # one instance shutting down: not waiting for the others
])
def test_the_crawl_state_follows_the_least_advanced_instance(statuses, state):
    assert crawl_state_for(statuses) == state


# --- the plan: observation -> actions, with a pinned clock and no Redis ------------------


def observation(crawl, now, **fields):
    return Observation(crawl=crawl, now=now, processes=fields.pop("processes", []), **fields)


def test_redis_unreachable_is_a_wait_then_a_failure_after_the_grace():
    rules = decide.Policy(redis_grace=60, corrupt_grace=30, cancel_grace=30, count_every=15,
                          stall_minutes=15)
    crawl = Crawl(id="c" * 32, status=S.RUNNING, scale=1)
    held = Held(token=1, renewed_at=t0)
    obs = observation(crawl, t0, fault=("unreachable", "ConnectionError"))
    assert decide.first_round(obs, held, rules)[0] == decide.RedisDown("ConnectionError")
    held.redis_down_since = t0
    later = observation(crawl, t0 + dt.timedelta(seconds=61), fault=("unreachable", "ConnectionError"))
    assert decide.first_round(later, held, rules)[0] == decide.Fail("Redis was unreachable for 60 s")
    corrupt = observation(crawl, t0, fault=("corrupt", "key x:d holds 'abc'"))
    assert decide.first_round(corrupt, held, rules)[0] == decide.Corrupt("key x:d holds 'abc'")
    assert decide.second_round(corrupt, held, rules) == []  # nothing launched or finished blind


def test_a_full_disk_pauses_and_a_limit_stops_each_command_once():
    crawl = Crawl(id="c" * 32, status=S.RUNNING, scale=1)
    held = Held(token=1, renewed_at=t0)
    obs = observation(crawl, t0, progress=Progress(), disk_reason="waiting: disk 95 % full")
    actions = decide.command_actions(obs, held)
    assert decide.PauseForDisk("waiting: disk 95 % full") in actions and decide.SetFlag(Flag.PAUSED) in actions
    obs = observation(crawl, t0, progress=Progress(), limit_reason="time_limit")
    assert decide.command_actions(obs, held) == [decide.LimitStop("time_limit"), decide.SetFlag(Flag.STOPPING)]
    held.flags.add(Flag.STOPPING)
    crawl.stop_reason, crawl.intent = "time_limit", Intent.STOP
    assert decide.command_actions(obs, held) == []


def test_instances_to_launch_skip_finished_ones_and_wait_for_their_backoff():
    crawl = Crawl(id="c" * 32, status=S.RUNNING, scale=3)
    pending = Process(pk=9, instance=2, status=ProcessStatus.STARTING, retry_at=t0 + dt.timedelta(seconds=4))
    statuses = {f"crawl-{crawl.pk}-0": "done", f"crawl-{crawl.pk}-1": "running"}
    obs = observation(crawl, t0, progress=Progress(statuses=statuses), processes=[pending])
    launches = decide.launch_actions(obs, [pending])
    assert [(a.instance, a.due) for a in launches] == [(1, True), (2, False)]


def test_elapsed_time_includes_what_runs_but_is_not_counted_yet():
    running = Process(status=ProcessStatus.RUNNING, started_at=t0, counted_until=t0 + dt.timedelta(seconds=5))
    assert elapsed_with_uncounted(5.0, [running], t0 + dt.timedelta(seconds=9)) == 9.0


@pytest.mark.parametrize("ending", [{"intent": Intent.CANCEL}, {"intent": Intent.STOP, "stop_reason": "user"},
                                    {"stop_reason": "size_limit"}, {"stop_reason": "time_limit"}])
def test_an_ending_crawl_gets_no_new_instance_and_its_waiting_relaunch_is_dropped(ending):
    rules = decide.Policy(redis_grace=60, corrupt_grace=30, cancel_grace=30, count_every=15,
                          stall_minutes=15)
    crawl = Crawl(id="c" * 32, status=S.RUNNING, scale=2, pages_done=3, **ending)
    pending = Process(pk=9, instance=1, status=ProcessStatus.STARTING, retry_at=t0)
    obs = observation(crawl, t0, progress=Progress(statuses={f"crawl-{crawl.pk}-0": "running"}),
                      processes=[pending], has_files=True)
    assert decide.launch_actions(obs, [pending]) == []
    actions = decide.second_round(obs, Held(token=1, renewed_at=t0), rules)
    assert [type(a) for a in actions] == [decide.DropPending, decide.Finish]
    assert actions[1].outcome.status == (S.CANCELED if ending.get("intent") == Intent.CANCEL
                                         else decide.STOPPED_STATE[ending["stop_reason"]])


def test_a_running_crawl_relaunches_an_instance_that_exited():
    crawl = Crawl(id="c" * 32, status=S.RUNNING, scale=1)
    obs = observation(crawl, t0, progress=Progress(statuses={f"crawl-{crawl.pk}-0": "running"}))
    assert decide.launch_actions(obs, []) == [decide.Launch(0, None, True)]

"""The runner's pure decisions: exit codes, outcomes, backoff and crawl state."""

from __future__ import annotations

import pytest

from crawls.models import CrawlStatus, ExitReason, Intent
from runner.daemon import classify_exit, crawl_state_for, decide_outcome, relaunch_delay

S = CrawlStatus


@pytest.mark.parametrize(("code", "oom", "reason"), [
    (0, False, ExitReason.DONE),
    (137, False, ExitReason.OOM),
    (1, True, ExitReason.OOM),
    (11, False, ExitReason.INTERRUPTED),
    (13, False, ExitReason.INTERRUPTED),
    (4, False, ExitReason.PERMANENT),
    (17, False, ExitReason.PERMANENT),
    (14, False, ExitReason.LIMIT),
    (15, False, ExitReason.LIMIT),
    (16, False, ExitReason.LIMIT),
    (1, False, ExitReason.CRASH),
    (8, False, ExitReason.CRASH),
    (None, False, ExitReason.CRASH),
])
def test_exit_codes_are_classified_as_the_protocol_says(code, oom, reason):
    assert classify_exit(code, oom) == reason


def outcome(statuses, intent="", stop_reason="", done=5, found=5, files=True):
    return decide_outcome(statuses, intent=intent, stop_reason=stop_reason, pages_done=done,
                          pages_found=found, has_files=files)


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
])
def test_the_crawl_state_follows_the_least_advanced_instance(statuses, state):
    assert crawl_state_for(statuses) == state

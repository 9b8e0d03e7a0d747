"""The states and reasons of a crawl, which every aggregate of the package names.

Their own module because org.py and profiles.py need them too and sit below crawl.py
(a crawl has a foreign key to its org, so crawl.py imports org.py, never the reverse).
"""

from __future__ import annotations

from typing import NamedTuple

from django.db import models

DISK_PAUSE = "paused: disk"  # waiting_reason of crawls the runner paused for disk space


class CrawlOrigin(models.TextChoices):
    CRAWL = "crawl"  # crawled by archiver's runner
    IMPORT = "import"  # archives made elsewhere, taken in by `archiver import` (never launched)


class CrawlStatus(models.TextChoices):
    QUEUED = "queued"  # waiting for a runner to claim it
    STARTING = "starting"  # claimed; its instances are being launched
    WAITING_CAPACITY = "waiting_capacity"  # no room on the host, or engine/Redis unavailable
    WAITING_ORG_LIMIT = "waiting_org_limit"  # its org already runs its maximum of crawls
    RUNNING = "running"  # instances are crawling
    PENDING_WAIT = "pending_wait"  # some instances finished, waiting for the others
    GENERATE_WACZ = "generate_wacz"  # instances are packaging their archives
    PAUSED = "paused"  # interrupted on request; its queue is kept for resume
    COMPLETE = "complete"  # finished with every page it found done
    STOPPED_BY_USER = "stopped_by_user"  # stopped gracefully on request, archive kept
    STOPPED_QUOTA_REACHED = "stopped_quota_reached"  # org storage or execution quota reached
    STOPPED_TIME_LIMIT = "stopped_time_limit"  # its running-time limit was reached
    STOPPED_SIZE_LIMIT = "stopped_size_limit"  # its size limit was reached
    STOPPED_PAGE_LIMIT = "stopped_page_limit"  # its page limit was reached
    STOPPED_PAUSE_LIMIT = "stopped_pause_limit"  # it stayed paused longer than allowed
    SKIPPED_QUOTA_REACHED = "skipped_quota_reached"  # never started: storage quota was full
    FAILED = "failed"  # no page could be archived, or a permanent error
    CANCELED = "canceled"  # canceled on request, partial files discarded


S = CrawlStatus
S.NOT_STARTED = (S.QUEUED, S.WAITING_CAPACITY, S.WAITING_ORG_LIMIT)
S.RUNNING_STATES = (S.STARTING, S.RUNNING, S.PENDING_WAIT, S.GENERATE_WACZ)
S.ACTIVE = (*S.NOT_STARTED, *S.RUNNING_STATES, S.PAUSED)
S.FINAL = (
    S.COMPLETE, S.STOPPED_BY_USER, S.STOPPED_QUOTA_REACHED, S.STOPPED_TIME_LIMIT,
    S.STOPPED_SIZE_LIMIT, S.STOPPED_PAGE_LIMIT, S.STOPPED_PAUSE_LIMIT,
    S.SKIPPED_QUOTA_REACHED, S.FAILED, S.CANCELED,
)
S.SUCCESSFUL = (
    S.COMPLETE, S.STOPPED_BY_USER, S.STOPPED_QUOTA_REACHED, S.STOPPED_TIME_LIMIT,
    S.STOPPED_SIZE_LIMIT, S.STOPPED_PAGE_LIMIT, S.STOPPED_PAUSE_LIMIT,
)


# A crawl's state as a refusal says it: "cannot pause crawl 8f22c023: it was stopped on request".
SAID = {
    S.QUEUED: "it is queued",
    S.STARTING: "it is starting",
    S.WAITING_CAPACITY: "it is waiting for room on the host",
    S.WAITING_ORG_LIMIT: "it is waiting for its org's other crawls",
    S.RUNNING: "it is running",
    S.PENDING_WAIT: "it is finishing",
    S.GENERATE_WACZ: "it is packaging its archive",
    S.PAUSED: "it is paused",
    S.COMPLETE: "it is complete",
    S.STOPPED_BY_USER: "it was stopped on request",
    S.STOPPED_QUOTA_REACHED: "it stopped at its org's quota",
    S.STOPPED_TIME_LIMIT: "it stopped at its time limit",
    S.STOPPED_SIZE_LIMIT: "it stopped at its size limit",
    S.STOPPED_PAGE_LIMIT: "it stopped at its page limit",
    S.STOPPED_PAUSE_LIMIT: "it stopped after a pause too long",
    S.SKIPPED_QUOTA_REACHED: "it never started: its org's storage quota was full",
    S.FAILED: "it failed",
    S.CANCELED: "it is canceled",
}


def said(status: str) -> str:
    return SAID.get(status, f"it is {status}")


class Move(NamedTuple):
    """A change of state: the states it may lead to, and the only ones it may leave."""

    to: tuple[str, ...]
    origins: tuple[str, ...]


# Every change of a crawl's state, by the Crawl method that makes it: `Crawl._transition`
# takes its guard from here, so no call site names its own previous states. docs/states.md
# shows the same table (tests/test_transitions.py compares the two).
TRANSITIONS: dict[str, Move] = {
    # What people ask (crawl_intents.py): at once only where no crawler runs.
    "pause": Move((S.PAUSED,), S.NOT_STARTED),
    "resume": Move((S.QUEUED,), (S.PAUSED,)),
    "cancel": Move((S.CANCELED,), S.NOT_STARTED),  # a stop too, before any crawler ran
    "retry": Move((S.QUEUED,), (S.FAILED, S.CANCELED)),
    "retry_failed_pages": Move((S.QUEUED,), (*S.SUCCESSFUL, S.FAILED)),
    # The runner (crawl_runner.py), each with its lease token.
    "mark_waiting": Move((S.WAITING_CAPACITY, S.WAITING_ORG_LIMIT),
                         (*S.NOT_STARTED, S.STARTING, S.RUNNING)),
    "mark_starting": Move((S.STARTING,), (*S.NOT_STARTED, S.RUNNING)),
    "mark_running": Move((S.RUNNING,),
                         (S.STARTING, S.WAITING_CAPACITY, S.PENDING_WAIT, S.GENERATE_WACZ)),
    "mark_finishing": Move((S.PENDING_WAIT, S.GENERATE_WACZ), S.RUNNING_STATES),
    "mark_paused": Move((S.PAUSED,), (*S.RUNNING_STATES, S.WAITING_CAPACITY)),
    "finish": Move(S.FINAL, S.ACTIVE),
    # Due crawls no runner holds, many at once (CrawlQuerySet.wait_for_capacity).
    "wait_for_capacity": Move((S.WAITING_CAPACITY,), S.NOT_STARTED),
}


class StopReason(models.TextChoices):
    USER = "user"
    TIME_LIMIT = "time_limit"
    SIZE_LIMIT = "size_limit"
    PAGE_LIMIT = "page_limit"
    STORAGE_QUOTA = "storage_quota"
    EXEC_QUOTA = "exec_quota"
    PAUSE_LIMIT = "pause_limit"
    STALLED = "stalled"
    REDIS_BUDGET = "redis_budget"  # its Redis database held more than ARCHIVER_CRAWL_REDIS_MAX_BYTES


STOPPED_STATE = {
    StopReason.USER: S.STOPPED_BY_USER,
    StopReason.TIME_LIMIT: S.STOPPED_TIME_LIMIT,
    StopReason.SIZE_LIMIT: S.STOPPED_SIZE_LIMIT,
    StopReason.PAGE_LIMIT: S.STOPPED_PAGE_LIMIT,
    StopReason.STORAGE_QUOTA: S.STOPPED_QUOTA_REACHED,
    StopReason.EXEC_QUOTA: S.STOPPED_QUOTA_REACHED,
    StopReason.PAUSE_LIMIT: S.STOPPED_PAUSE_LIMIT,
    StopReason.REDIS_BUDGET: S.STOPPED_SIZE_LIMIT,
}


class Intent(models.TextChoices):
    NONE = "", "none"
    PAUSE = "pause"
    STOP = "stop"
    CANCEL = "cancel"


EVENT_FOR_FINAL = {
    S.COMPLETE: "crawl.completed",
    S.FAILED: "crawl.failed",
    S.CANCELED: "crawl.canceled",
    S.SKIPPED_QUOTA_REACHED: "crawl.quota_reached",
    S.STOPPED_QUOTA_REACHED: "crawl.quota_reached",
}


"""A crawl's waiting, stop and error reasons as sentences, for `status` and the admin.

The stored reason is a code (`page_limit`); people read a sentence. A crawl can have both a
reason and an error (stopped as stalled, with the crawler's last error): both are shown.
"""

from __future__ import annotations

from crawls.models import Crawl, CrawlStatus, StopReason

STOP_SENTENCES = {
    StopReason.USER: "stopped on request",
    StopReason.TIME_LIMIT: "its running-time limit was reached",
    StopReason.SIZE_LIMIT: "its size limit was reached",
    StopReason.PAGE_LIMIT: "its page limit was reached",
    StopReason.STORAGE_QUOTA: "its org's storage quota was reached",
    StopReason.EXEC_QUOTA: "its org's monthly execution-time quota was reached",
    StopReason.PAUSE_LIMIT: "it stayed paused longer than allowed",
    StopReason.STALLED: "no page was done for too long (stalled)",
}


def reason_sentence(crawl: Crawl) -> str:
    """Why it waits or why it stopped, in words; empty if neither."""
    if crawl.waiting_reason:
        return crawl.waiting_reason
    if not crawl.stop_reason:
        return ""
    sentence = STOP_SENTENCES.get(crawl.stop_reason, crawl.stop_reason)
    if crawl.status == CrawlStatus.SKIPPED_QUOTA_REACHED:
        return f"never started: {sentence}"
    return sentence


def error_sentence(crawl: Crawl) -> str:
    """The first line of its error (the whole error is on its page)."""
    return crawl.error.strip().splitlines()[0] if crawl.error.strip() else ""


def reason_line(crawl: Crawl) -> str:
    """Reason and error in one line, for tables."""
    return " — ".join(part for part in (reason_sentence(crawl), error_sentence(crawl)) if part)

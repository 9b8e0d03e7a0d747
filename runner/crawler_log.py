"""Reading an instance that ended: the status it left, the crawler's last words, its log.

A crawler's log and its Redis lines are hostile input: they are kept within the crawl's
log budget (ARCHIVER_CRAWL_LOG_MB) and only ever quoted, never acted on.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re

import redis

from archiver.errors import ArchiverError, LaunchError
from crawls import crawl_logs
from crawls.models import Crawl, Process
from runner import decide
from runner.decide import HandleExit
from runner.state import Runtime

KEPT_LOG_LINES = 200  # of an exited instance's own log (within the crawl's log budget)
LOG_LEVELS = ("DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL")
FAILED_HOW = {0: "ended with status failed", 4: "refused its configuration",
              9: "ended with no page archived", 17: "hit a fatal error"}
IN_SHORT = {0: "the crawler failed", 4: "configuration refused", 9: "no page archived", 17: "fatal error"}
# What a crawler's words say went wrong, said first: a table cuts a reason at ~40 characters.
# Our crawler's words (aiohttp's), then browsertrix-crawler's (Chromium's net:: codes).
CAUSES = (
    (re.compile(r"refused by the crawl address policy: .*", re.S), "{0}"),
    (re.compile(r"Cannot connect to host (\S+) ssl:\S+ \[(?:Connect call failed|Connection refused)"),
     "connection refused: {1}"),
    (re.compile(r"Cannot connect to host (\S+?)(?::\d+)? ssl:\S+ \[(?:Name or service not known|"
                r"Temporary failure in name resolution|nodename nor servname|No address associated)"),
     "DNS lookup failed: {1}"),
    (re.compile(r"ERR_CONNECTION_REFUSED"), "connection refused"),
    (re.compile(r"ERR_NAME_NOT_RESOLVED"), "DNS lookup failed"),
    (re.compile(r"ERR_(?:CONNECTION_)?TIMED_OUT|TimeoutError"), "timed out"),
)


def exit_status(rt: Runtime, crawl: Crawl, process: Process, action: HandleExit) -> str | None:
    """The crawler status an instance left: what was observed, read again when an exit 0
    seems unreported (it may have written it after this tick's read); None when unknown."""
    status = action.status
    if action.code != 0 or status is None or status in decide.REPORTED_EXIT or crawl.redis_db is None:
        return status
    try:
        return rt.store.statuses(crawl.redis_db, crawl.pk).get(process.hostname, "")
    except (redis.RedisError, ArchiverError):
        return None


def read_tail(rt: Runtime, process: Process) -> str:
    """The end of an instance's own log, as its launcher still has it ("" when it does not)."""
    with contextlib.suppress(LaunchError):
        return rt.launcher.log_tail(rt.launcher.ref_of(process), lines=KEPT_LOG_LINES)
    return ""


def failure(crawl: Crawl, process: Process, code: int | None, tail: str, no_page: bool) -> tuple[str, str]:
    """Why the crawl fails with this exit, cause first, in the crawler's own words when it
    left any; and the detail: which instance, how it ended, the crawler's whole words."""
    words = crawler_words(crawl, tail, errors=no_page) or last_line(tail)
    how = FAILED_HOW.get(code, FAILED_HOW[17])
    detail = f"crawler instance {process.hostname} {how} (exit {code})" + (f": {words[:1000]}" if words else "")
    if not words:
        return f"the crawler {how} (exit {code})", detail
    return f"{cause(words)} ({IN_SHORT.get(code, IN_SHORT[17])}, exit {code})", detail


def cause(words: str) -> str:
    """The crawler's words, or what they name as the cause when it is a known one (connection
    refused, DNS, the address policy, a timeout), with the address it concerns."""
    words = words[:2000]
    for pattern, said in CAUSES:
        if found := pattern.search(words):
            return unwrapped(said.format(found.group(0), *found.groups()))[:500]
    return words[:500]


def unwrapped(said: str) -> str:
    """Without the closing parentheses of the words it was quoted in: "page load failed:
    <url> (refused by the crawl address policy: ... --allowNetworks))" ends with one."""
    while said.endswith(")") and said.count(")") > said.count("("):
        said = said[:-1]
    return said


def crawler_words(crawl: Crawl, tail: str = "", errors: bool = True) -> str:
    """Why the crawler says it failed: its last fatal line (sent to `<id>:e`, or in the log of
    an instance), else (with `errors`) the last error line it sent, else "". A fatal error
    under --restartsOnError is reported nowhere else (exit 0, status `failed`)."""
    crawler_lines = crawl.logs.exclude(source="runner").order_by("-pk").values_list("message", flat=True)
    if fatal := crawler_lines.filter(level="fatal").first():
        return fatal
    tails = crawl.processes.exclude(log_tail="").order_by("-pk").values_list("log_tail", flat=True)
    for text in [tail, *tails[:5]]:
        if fatal := decide.fatal_line(text):
            return fatal
    return (crawler_lines.filter(level="error").first() or "") if errors else ""


def last_line(tail: str) -> str:
    return tail.strip().splitlines()[-1] if tail.strip() else ""


def keep_log(crawl: Crawl, process: Process, tail: str, now: dt.datetime) -> None:
    """The crawler's own log lines (not only the errors it sent to Redis, which are kept
    already): the end of its log, read when it exits. JSON lines (browsertrix-crawler's)
    keep their fields; other lines are kept as text."""
    entries = []
    for line in tail.splitlines():
        entry = parse_log_line(line)
        if entry and str(entry.get("logLevel", "")).lower() not in ("error", "fatal"):
            entries.append({**entry, "context": process.hostname})
    crawl_logs.keep_lines(crawl, entries, now)


def parse_log_line(line: str) -> dict | None:
    line = line.strip()
    if not line:
        return None
    if line.startswith("{"):
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                return value
    words = line.split(maxsplit=3)
    level = next((w.lower() for w in words[:3] if w.upper() in LOG_LEVELS), "info")
    return {"logLevel": level, "message": line}

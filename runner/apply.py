"""Carrying out the runner's decisions: one small function per action of runner/decide.py.

Every write to a crawl names our lease token (through its model methods), so a runner that
lost a crawl's lease changes nothing about it. Functions raise CrawlFailed when the crawl
cannot go on; the supervise step's error boundary fails it with that message.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import redis

from archiver.errors import ArchiverError, EngineUnavailable, ImageMissing, LaunchError
from crawls import crawl_logs, quotas
from crawls.config import CrawlConfig
from crawls.models import (
    DISK_PAUSE,
    PAGE_LOADED,
    Crawl,
    CrawlFile,
    CrawlStatus,
    ExitReason,
    Intent,
    Process,
    ProcessStatus,
    Snapshot,
    SnapshotStatus,
    page_loaded,
)
from crawls.profiles import profile_path
from runner import archive, decide, uploads
from runner.decide import (
    FAILED_ATTEMPT,
    CancelTimeout,
    ClearFlag,
    Corrupt,
    CountTime,
    DropPending,
    EngineState,
    Fail,
    Finish,
    FollowState,
    HandleExit,
    Ingest,
    Launch,
    LimitStop,
    MarkStarted,
    Outcome,
    PauseForDisk,
    RecordProgress,
    RecordUserStop,
    RedisBack,
    RedisDown,
    SendMessages,
    SetFlag,
    Stalled,
    StopOne,
)
from runner.launchers import LaunchSpec, hostname
from runner.redis_server import for_crawlers
from runner.state import Held, Runtime

log = logging.getLogger("runner.daemon")
S = CrawlStatus

ENGINE_RETRY = 2.0  # launch again this long after the engine did not answer
IMAGE_RETRY = 10.0  # look for a missing crawler image again this often
REDIS_RELAUNCH = 2.0  # an instance that exited because Redis was away is relaunched after this
KEPT_LOG_LINES = 200  # of an exited instance's own log (within the crawl's log budget)
LOG_LEVELS = ("DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL")
MAX_DRAIN_BATCHES = 20  # per crawl per tick, so one busy crawl cannot starve the others
READ_REST_BATCHES = 10_000  # when a session ends: everything it reported
ENGINE_WAIT = "waiting: Docker engine unreachable"
REDIS_WAIT = "waiting: Redis unreachable"
CORRUPT_WAIT = "waiting: progress data unreadable"


class CrawlFailed(ArchiverError):
    """The crawl cannot go on (a permanent crawler error, relaunches exhausted...)."""

    def __init__(self, message: str, stop_reason: str = ""):
        super().__init__(message)
        self.stop_reason = stop_reason


def carry_out(rt: Runtime, obs, held: Held, action) -> None:
    """Apply one action, unless an earlier one let the crawl go."""
    if obs.crawl.pk in rt.held:
        APPLY[type(action)](rt, obs, held, action)


# --- Redis faults ---------------------------------------------------------------------------


def redis_down(rt: Runtime, obs, held: Held, action: RedisDown) -> None:
    if held.redis_down_since is not None:
        return
    held.redis_down_since = obs.now
    rt.note(obs.crawl, f"Redis does not answer ({action.what}); waiting for it", "warning", obs.now)
    rt.set_waiting_reason(obs.crawl, REDIS_WAIT, obs.now)
    if rt.on_redis_down:
        rt.on_redis_down()


def corrupt(rt: Runtime, obs, held: Held, action: Corrupt) -> None:
    if held.corrupt_since is not None:
        return
    held.corrupt_since = obs.now
    rt.note(obs.crawl, f"cannot read its progress: {action.message}", "error", obs.now)
    rt.set_waiting_reason(obs.crawl, f"{CORRUPT_WAIT}: {action.message}", obs.now)


def redis_back(rt: Runtime, obs, held: Held, action: RedisBack) -> None:
    if held.redis_down_since:
        rt.note(obs.crawl, "Redis answers again", now=obs.now)
    held.redis_down_since = held.corrupt_since = None
    if obs.crawl.waiting_reason.startswith((REDIS_WAIT, CORRUPT_WAIT)):
        rt.set_waiting_reason(obs.crawl, "", obs.now)


def fail_now(rt: Runtime, obs, held: Held, action: Fail) -> None:
    raise CrawlFailed(action.error, action.stop_reason)


# --- progress ------------------------------------------------------------------------------


def ingest_all(rt: Runtime, obs, held: Held, action: Ingest) -> None:
    progress, crawl = obs.progress, obs.crawl
    ingest(crawl, progress.pages, progress.errors, obs.now, progress.failed_pages)
    batches = 0
    while progress.more and batches < MAX_DRAIN_BATCHES:
        pages, errors = rt.store.drain(crawl.redis_db, crawl.pk)
        ingest(crawl, pages, errors, obs.now)
        progress.more, batches = bool(pages or errors), batches + 1
    held.failed_read = progress.failed


def drain_rest(rt: Runtime, crawl: Crawl, now: dt.datetime) -> None:
    """Every page record and error line still in Redis (before a session's pages are named)."""
    for _ in range(READ_REST_BATCHES):
        pages, errors = rt.store.drain(crawl.redis_db, crawl.pk)
        if not pages and not errors:
            return
        ingest(crawl, pages, errors, now)


def ingest(crawl: Crawl, pages: list[dict], errors: list[dict], now: dt.datetime,
           failed: list[dict] = ()) -> None:
    """Pages become Snapshots, one per URL, by the real crawler's rules (docs/crawlers.md):

    - a failed page (`:f`) is failed, with its reason;
    - a loaded page record (`:pages`, page_loaded()) is done and replaces an earlier report,
      so a retried page that now succeeds is done;
    - a page record that did not load is failed too, but replaces nothing: the crawler also
      put that page on `:f`, before or after, and that record says why. Its load state is kept.

    Error lines become CrawlLog lines. The filename is not the crawler's: it is set once the
    session's WACZ is kept (name_pages)."""
    if not (pages or failed or errors):
        return  # the usual tick: nothing new, no query
    loaded, unloaded = {}, {}
    for page in pages:
        if page.get("url") and page_loaded(page):
            loaded[page["url"]] = snapshot_from(crawl, page, now)
        elif page.get("url"):
            unloaded[page["url"]] = snapshot_from(crawl, page, now, SnapshotStatus.FAILED)
    failures = {page["url"]: snapshot_from(crawl, page, now, SnapshotStatus.FAILED)
                for page in failed if page.get("url") and page["url"] not in loaded}
    # A failed-pages session crawls its pages as seeds (depth 0): they keep the depth they had.
    depth = [] if crawl.config_override else ["depth"]
    upsert(list(loaded.values()), ["status", "http_status", "load_state", "title", "mime",
                                   "captured_at", "error", *depth])
    upsert(list(failures.values()), ["status", "error", *depth])
    new = [row for url, row in unloaded.items() if url not in loaded and url not in failures]
    known = set(Snapshot.objects.filter(crawl=crawl, url__in=[row.url for row in new]).exclude(
        status=SnapshotStatus.QUEUED).values_list("url", flat=True)) if new else set()
    upsert([row for row in new if row.url not in known], ["status", "load_state", "error", *depth])
    for url, row in unloaded.items():  # failed pages are few: one update each
        if url not in loaded and row.load_state is not None:
            Snapshot.objects.filter(crawl=crawl, url=url, status=SnapshotStatus.FAILED).update(
                load_state=row.load_state)
    if errors:
        # Bounded per crawl (ARCHIVER_CRAWL_LOG_MB): a chatty crawler costs at most that.
        crawl_logs.keep_lines(crawl, ({"logLevel": "error", **e} for e in errors), now)


def upsert(snapshots: list[Snapshot], fields: list[str]) -> None:
    """Insert these Snapshots; a URL the crawl has already gets only `fields` changed."""
    if snapshots:
        Snapshot.objects.bulk_create(snapshots, batch_size=500, update_conflicts=True,
                                     unique_fields=["crawl", "url"], update_fields=fields)


def snapshot_from(crawl: Crawl, page: dict, now: dt.datetime,
                  status: str = SnapshotStatus.DONE) -> Snapshot:
    http_status, load_state = page.get("status"), page.get("loadState")
    captured = None
    if page.get("ts"):
        with contextlib.suppress(ValueError, TypeError):
            captured = dt.datetime.fromisoformat(str(page["ts"]).replace("Z", "+00:00"))
    error = str(page.get("reason") or "")[:2000]
    if status == SnapshotStatus.FAILED and not error:
        error = "the page did not load" + (f" (load state {load_state})" if type(load_state) is int else "")
    return Snapshot(
        crawl_id=crawl.pk, url=str(page["url"]), depth=_int(page.get("depth")),
        seed=bool(page.get("seed")), status=status, error=error,
        http_status=http_status if type(http_status) is int and 0 <= http_status < 1000 else None,
        load_state=load_state if type(load_state) is int and 0 <= load_state < 100 else None,
        title=str(page.get("title") or "")[:2000], mime=str(page.get("mime") or "")[:200],
        captured_at=captured, created_at=now,
    )


def _int(value) -> int:
    """A crawler's number, or 0: a hostile page record must not stop ingestion."""
    try:
        return max(int(value or 0), 0)
    except (TypeError, ValueError):
        return 0


def record_progress(rt: Runtime, obs, held: Held, action: RecordProgress) -> None:
    crawl = obs.crawl
    changed = {k: v for k, v in action.values.items() if getattr(crawl, k) != v}
    if changed.get("pages_done", 0) > crawl.pages_done:
        changed["progress_at"] = obs.now
    if changed:
        rt.save(crawl, obs.now, **changed)


# --- commands ------------------------------------------------------------------------------


def pause_for_disk(rt: Runtime, obs, held: Held, action: PauseForDisk) -> None:
    """Pause a running crawl while the disk is full; the disk step queues it again.

    The reason is kept as its waiting reason ("paused: disk 93 % full ..."), which is what
    tells it from a crawl a person paused.
    """
    reason = "paused: " + action.reason.removeprefix("waiting: ").removeprefix("paused: ")
    if obs.crawl.request_disk_pause(reason, held.token, obs.now):
        held.pause_reason = reason[:300]
        rt.note(obs.crawl, f"pausing: {reason.removeprefix('paused: ')}", "warning", obs.now)


def limit_stop(rt: Runtime, obs, held: Held, action: LimitStop) -> None:
    if obs.crawl.request_limit_stop(action.reason, held.token, obs.now):
        rt.note(obs.crawl, f"stopping: {obs.limit_message}", now=obs.now)


def record_user_stop(rt: Runtime, obs, held: Held, action: RecordUserStop) -> None:
    obs.crawl.record_user_stop(held.token, obs.now)


def set_flag(rt: Runtime, obs, held: Held, action: SetFlag) -> None:
    crawl = obs.crawl
    rt.store.set_flag(crawl.redis_db, crawl.pk, action.flag)
    held.flags.add(action.flag)
    rt.note(crawl, f"asked its crawlers to {crawl.intent or 'stop'}", now=obs.now)
    if action.flag == "canceled":
        held.canceled_at = obs.now


def clear_flag(rt: Runtime, obs, held: Held, action: ClearFlag) -> None:
    rt.store.clear_flag(obs.crawl.redis_db, obs.crawl.pk, action.flag)
    held.flags.discard(action.flag)


def send_messages(rt: Runtime, obs, held: Held, action: SendMessages) -> None:
    crawl = obs.crawl
    for message in obs.messages:
        for i in range(crawl.scale):
            rt.store.client(crawl.redis_db).rpush(f"{hostname(crawl.pk, i)}:msg",
                                                  json.dumps(message.payload))
        message.mark_sent(obs.now)


def stop_one(rt: Runtime, obs, held: Held, action: StopOne) -> None:
    rt.store.stop_one(obs.crawl.redis_db, obs.crawl.pk, hostname(obs.crawl.pk, action.instance))
    held.flags.add(f"stopone-{action.instance}")


# --- instances -----------------------------------------------------------------------------


def mark_started(rt: Runtime, obs, held: Held, action: MarkStarted) -> None:
    action.process.mark_running(obs.now, done=obs.crawl.pages_done)


def handle_exit(rt: Runtime, obs, held: Held, action: HandleExit) -> None:
    """Record how an instance ended, keep its WACZ, remove it; raise CrawlFailed if permanent."""
    crawl, process, code, now = obs.crawl, action.process, action.code, obs.now
    reason = decide.classify_exit(code, action.oom, exit_status(rt, crawl, process, action))
    ref = rt.launcher.ref_of(process)
    tail = ""
    with contextlib.suppress(LaunchError):
        tail = rt.launcher.log_tail(ref, lines=KEPT_LOG_LINES)
    keep_log(crawl, process, tail, now)
    keep_session(rt, crawl, process, now)
    if code is None:
        process.mark_lost(ExitReason.CRASH, tail, now)
    else:
        process.mark_exited(code, reason, tail, now)
    with contextlib.suppress(EngineUnavailable):
        rt.launcher.remove(ref)
    if process.instance >= crawl.scale and crawl.redis_db is not None:
        # Scaled down: it finished on `stopone`; the crawl no longer waits for it.
        with contextlib.suppress(redis.RedisError):
            rt.store.forget_instance(crawl.redis_db, crawl.pk, process.hostname)
        held.flags.discard(f"stopone-{process.instance}")
    if code != 0 or reason != ExitReason.DONE:
        what = "vanished" if code is None else f"exited with code {code} ({reason})"
        if reason == ExitReason.UNREPORTED:
            what = "exited with code 0 without reporting how it ended; counted as a failed attempt"
        rt.note(crawl, f"instance {process.hostname} {what}", "warning" if reason != ExitReason.DONE
                else "info", now, exit_code=code, log_tail=tail[-1000:])
    # Exit 9 after a stop or cancel is the outcome's to judge (canceled when nothing was done),
    # and so is a failed-pages session's: the crawl keeps the pages it has.
    if reason == ExitReason.PERMANENT or (reason == ExitReason.NO_PAGE and not
                                          (crawl.intent or crawl.stop_reason or crawl.config_override)):
        words = crawler_words(crawl, tail, errors=reason == ExitReason.NO_PAGE) or last_line(tail)
        raise CrawlFailed(f"crawler instance {process.hostname} {FAILED_HOW.get(code, FAILED_HOW[17])} "
                          f"(exit {code})" + (f": {words[:500]}" if words else ""))
    if reason == ExitReason.DISK and not crawl.intent:
        pause_for_disk(rt, obs, held, PauseForDisk(f"disk: crawler instance {process.hostname} "
                                                   f"ran out of disk space (exit {code})"))


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


FAILED_HOW = {0: "ended with status failed", 4: "refused its configuration",
              9: "ended with no page archived", 17: "hit a fatal error"}


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


def keep_session(rt: Runtime, crawl: Crawl, process: Process, now: dt.datetime) -> None:
    """Keep what an ended instance archived, and forget it in its folder (docs/architecture.md):
    through the file boundary of runner/archive.py, its warnings in the crawl's log. The pages
    its WACZ holds are named after the kept file (with object storage: the recorded object
    whose SHA-256 the session's WACZ has, read before that WACZ is deleted). Then the
    session's counters (count_session)."""
    session: list[str] = []  # the path (or key) of the file kept for this session

    def named(path: str, entries: Iterator[dict]) -> None:
        session.append(path)
        name_listed(rt, crawl, path, entries, now)

    if rt.settings.s3 is not None:
        kept, removed = uploads.keep_uploaded(rt, crawl, process, now, named)
        record_kept(rt, crawl, kept, now)
    else:
        data_dir, limits = rt.settings.data_dir, archive.Limits.of(rt.settings)
        kept, removed = archive.collect_session(data_dir, crawl, process, now, limits)
        record_kept(rt, crawl, kept, now)
        if kept.files:
            session.append(kept.files[0].path)
            name_pages(rt, crawl, kept.files[0], now)
    count_session(crawl, process, session[-1] if session else None)
    for warning in removed.warnings if removed else ():
        rt.note(crawl, warning, "warning", now)
    if removed is not None and crawl.redis_db is not None:
        try:
            rt.store.set_size(crawl.redis_db, crawl.pk, process.hostname, removed.left_bytes)
        except (redis.RedisError, ArchiverError) as exc:
            log.warning("crawl %s: could not reset the size of %s (%s)", crawl.short_id,
                        process.hostname, type(exc).__name__)


def count_session(crawl: Crawl, process: Process, path: str | None) -> None:
    """Process.pages_done and size_bytes (docs/runner.md, "What a session counts"): the done
    pages named after the file kept for the session, and that file's bytes. A session ending
    now that kept none (canceled, crashed) counts what the crawl's pages done grew by while it
    ran, when no other instance ran beside it (else they cannot be told apart: 0)."""
    if path is not None:
        size = crawl.files.filter(path=path).values_list("size", flat=True).first() or 0
        pages = crawl.snapshots.filter(filename=path.rsplit("/", 1)[-1], status=SnapshotStatus.DONE)
        process.record_counts(pages.count(), size)
    elif process.is_live and process.done_at_start is not None and process.ran_alone():
        process.record_counts(max(0, crawl.pages_done - process.done_at_start), 0)


def name_pages(rt: Runtime, crawl: Crawl, kept: CrawlFile, now: dt.datetime) -> None:
    """Snapshot.filename = the kept WACZ's name, for the pages its page lists hold. The
    crawler's own `filename` names its upload (`<timestamp>-<id>.wacz`) or a WARC, never a
    file archiver keeps."""
    limits = archive.Limits.of(rt.settings, rt.stop_event)
    name_listed(rt, crawl, kept.path, archive.kept_pages(rt.settings.data_dir, kept, limits), now)


def name_listed(rt: Runtime, crawl: Crawl, path: str, entries: Iterator[dict],
                now: dt.datetime) -> None:
    """Snapshot.filename = the last part of `path` (a kept file, or an object's key) for the
    pages `entries` (a WACZ's page lists) name. What the session reported is read first, so
    its pages exist (only from a crawl we hold: at start-up a crawl's Redis database may be
    another runner's)."""
    held = rt.held.get(crawl.pk)
    if held is not None and crawl.redis_db is not None and not held.redis_down_since:
        with contextlib.suppress(redis.RedisError, ArchiverError):
            drain_rest(rt, crawl, now)
    name, urls = path.rsplit("/", 1)[-1], []
    try:
        for page in entries:
            state = page.get("loadState")
            if isinstance(page.get("url"), str) and not (type(state) is int and state < PAGE_LOADED):
                urls.append(page["url"])
            if len(urls) >= 500:
                set_filename(crawl, urls, name)
                urls = []
    except (archive.Refused, OSError) as exc:
        # Over a limit or unreadable: no page is named after it, not even those read already.
        rt.note(crawl, f"cannot read the pages list of {path}: {exc}; no page is named "
                       "after it", "warning", now)
        Snapshot.objects.filter(crawl=crawl, filename=name).update(filename="")
        return
    set_filename(crawl, urls, name)


def set_filename(crawl: Crawl, urls: list[str], name: str) -> None:
    if urls:
        Snapshot.objects.filter(crawl=crawl, url__in=urls).exclude(
            status=SnapshotStatus.FAILED).update(filename=name)


def record_kept(rt: Runtime, crawl: Crawl, kept: archive.Kept, now: dt.datetime) -> None:
    """What a keep call recorded: its warnings said, our data dir named as the files' holder,
    the bytes we remember for the crawl grown."""
    for warning in kept.warnings:
        rt.note(crawl, warning, "warning", now)
    if kept.files:
        CrawlFile.objects.filter(pk__in=[f.pk for f in kept.files], root="").update(
            root=str(rt.settings.data_dir))
    if kept.added_bytes:
        rt.event(f"crawl {crawl.short_id}: kept {kept.added_bytes} bytes")
        held = rt.held.get(crawl.pk)
        if held and held.files_bytes is not None:
            held.files_bytes += kept.added_bytes


def engine_state(rt: Runtime, obs, held: Held, action: EngineState) -> None:
    crawl = obs.crawl
    if action.down and not held.engine_down:
        held.engine_down = True
        rt.note(crawl, "the Docker engine does not answer; crawlers keep running", "warning", obs.now)
        if crawl.status == S.STARTING:  # nothing launched yet: it waits for the engine
            crawl.mark_waiting(S.WAITING_CAPACITY, ENGINE_WAIT, held.token, obs.now)
        else:
            rt.set_waiting_reason(crawl, ENGINE_WAIT, obs.now)
    elif not action.down and held.engine_down:
        held.engine_down = False
        if crawl.waiting_reason == ENGINE_WAIT:
            rt.set_waiting_reason(crawl, "", obs.now)


def count_time(rt: Runtime, obs, held: Held, action: CountTime) -> None:
    quotas.count_crawl_time(obs.crawl, obs.now)
    held.counted_at = obs.now


def cancel_timeout(rt: Runtime, obs, held: Held, action: CancelTimeout) -> None:
    # A canceled crawl keeps nothing, so there is nothing to wait for.
    rt.note(obs.crawl, f"crawlers still running {rt.cancel_grace:g} s after the cancel; "
                       "removing them", "warning", obs.now)
    from runner.steps import finish as finishing

    finishing.finish(rt, obs.crawl, decide.Outcome(S.CANCELED, "user"), obs.now)


# --- launching -----------------------------------------------------------------------------


def launch(rt: Runtime, obs, held: Held, action: Launch) -> None:
    crawl, now = obs.crawl, obs.now
    process = action.pending or plan_launch(rt, crawl, action.instance, now)
    if action.pending is None:
        obs.processes.append(process)
        if process.retry_at and process.retry_at > now:
            return
    elif not action.due:
        return
    found = find_started(rt, crawl, process)
    if found is not None:
        ref = found.ref if rt.launcher.ref_of(process) != found.ref else ""
        process.mark_running(now, ref=ref, pid=found.pid, runner=rt.id, launcher=rt.launcher.name,
                             done=crawl.pages_done)
        rt.event(f"crawl {crawl.short_id}: instance {process.instance} was already running; following it")
        return
    start_instance(rt, crawl, held, process, now)


def find_started(rt: Runtime, crawl: Crawl, process: Process):
    """An instance already started for this row (a crash cut its launch short), or None."""
    instance_dir = rt.settings.crawls_dir / crawl.pk / str(process.instance)
    try:
        instance = rt.launcher.find(process.pk, crawl.pk, process.instance, instance_dir)
    except LaunchError:
        return None
    return instance if instance is not None and instance.running else None


def plan_launch(rt: Runtime, crawl: Crawl, instance: int, now: dt.datetime) -> Process:
    """A Process row for the next launch of `instance`, due after its backoff."""
    history = list(Process.objects.filter(crawl=crawl, instance=instance)
                   .order_by("created_at", "pk").values_list("exit_reason", "status"))
    failures = decide.failures_of(history)
    if failures >= rt.settings.max_launch_attempts:
        raise CrawlFailed(f"crawler instance {hostname(crawl.pk, instance)} failed {failures} times; "
                          "giving up (see the crawl's log)")
    delay = decide.relaunch_delay(failures) if history and history[-1][0] in FAILED_ATTEMPT else 0.0
    if history and history[-1][0] == ExitReason.REDIS:
        delay = max(delay, REDIS_RELAUNCH)
    if delay:
        rt.note(crawl, f"relaunching instance {instance} in {delay:g} s (failure {failures})", now=now)
    return Process.objects.create(
        crawl=crawl, instance=instance, hostname=hostname(crawl.pk, instance),
        launcher=rt.launcher.name, runner=rt.id, status=ProcessStatus.STARTING,
        retry_at=now + dt.timedelta(seconds=delay), created_at=now,
    )


def crawler_config(rt: Runtime, crawl: Crawl, now: dt.datetime) -> dict:
    """The crawler's config file: the crawl's config, with what is left of its limits, so
    the crawler itself stops within them (crawler-protocol.md: per session)."""
    config = crawl.launch_config()
    page_limit = min(filter(None, [config.page_limit, crawl.org.max_pages_per_crawl]), default=None)
    values = config.crawler_config(page_limit)
    if config.size_limit and not crawl.config_override:
        values["sizeLimit"] = max(config.size_limit - crawl.size_bytes, 1)
    if config.time_limit and not crawl.config_override:
        values["timeLimit"] = max(int(config.time_limit - crawl.elapsed_seconds), 1)
    return values


def browser_profile(rt: Runtime, crawl: Crawl, config: CrawlConfig) -> Path | None:
    """The profile file a crawl's instances mount, after checking this runner can launch its
    browser options at all; CrawlFailed (with the profile's name only) when it cannot."""
    launcher = rt.launcher.name
    if config.uses_browser() and not rt.settings.browser_crawler(launcher):
        raise CrawlFailed(f"its browser options need a browser crawler; this runner's crawler "
                          f"{rt.settings.crawler_name(launcher)} fetches over HTTP only")
    if config.profile is None:
        return None
    path = profile_path(rt.settings.data_dir, crawl.org_id, config.profile)
    if not path.is_file():  # removed since, or added on another runner's data dir
        raise CrawlFailed(f"its browser profile {config.profile!r} is not in this runner's data dir "
                          f"(add it again with: archiver profile add {config.profile} FILE)")
    return path


def start_instance(rt: Runtime, crawl: Crawl, held: Held, process: Process, now: dt.datetime) -> bool:
    instance_dir = rt.settings.crawls_dir / crawl.pk / str(process.instance)
    try:
        with archive.folder(rt.settings.data_dir, archive.CRAWLS, crawl.pk, str(process.instance),
                            create=True):
            pass  # created (0700) without following a link a crawler planted
    except archive.Refused as exc:
        raise CrawlFailed(f"cannot prepare its crawler's folder: {exc}") from exc
    config = crawl.launch_config()
    profile = browser_profile(rt, crawl, config)  # before Redis grants anything: it may refuse
    spec = LaunchSpec(
        crawl_id=crawl.pk, instance=process.instance, process_id=process.pk,
        instance_dir=instance_dir, workers=config.workers,
        redis=for_crawlers(rt.store.grant(crawl.redis_db, crawl.pk), rt.settings.redis_public_url),
        db=crawl.redis_db, runner_id=rt.id,
        disk_utilization=int(rt.settings.disk_threshold_percent),
        config=crawler_config(rt, crawl, now), org=crawl.org.slug,
        browser_args=tuple(config.browser_args()), profile=profile,
        storage_env=uploads.crawler_env(rt.settings.s3, crawl.pk, process.hostname, process.pk)
        if rt.settings.s3 else {},
        report_key=uploads.reports_key(crawl.pk),
    )
    try:
        launched = rt.launcher.launch(spec)
    except ImageMissing as exc:
        cannot_launch_yet(rt, crawl, held, process, f"waiting: {exc}"[:300], exc, IMAGE_RETRY, now)
        return False
    except EngineUnavailable as exc:
        rt.listed = None  # do not wait for the engine again this tick
        cannot_launch_yet(rt, crawl, held, process, ENGINE_WAIT, exc, ENGINE_RETRY, now)
        return False
    except LaunchError as exc:
        if exc.permanent:
            raise CrawlFailed(f"cannot launch its crawler: {exc}") from exc
        process.mark_lost(ExitReason.CRASH, str(exc), now)
        rt.note(crawl, f"launching instance {process.instance} failed: {exc}", "warning", now)
        return False
    process.mark_running(now, ref=launched.container_id, pid=launched.pid, image=launched.image,
                         args=launched.args, runner=rt.id, launcher=rt.launcher.name,
                         done=crawl.pages_done)
    rt.event(f"crawl {crawl.short_id}: launched instance {process.instance} ({rt.launcher.name})")
    if crawl.status in (S.STARTING, S.WAITING_CAPACITY):
        crawl.mark_running(held.token, now)
    return True


def cannot_launch_yet(rt: Runtime, crawl: Crawl, held: Held, process: Process, reason: str,
                      exc: Exception, retry: float, now: dt.datetime) -> None:
    """Not a crash of the crawl (the engine is away, the image is missing): the row waits,
    the crawl says why, once. The runner never pulls an image in its loop."""
    process.defer(now + dt.timedelta(seconds=retry))
    if crawl.waiting_reason == reason:
        return
    rt.note(crawl, f"cannot launch: {exc}", "warning", now)
    if crawl.status in (S.STARTING, S.RUNNING):
        crawl.mark_waiting(S.WAITING_CAPACITY, reason, held.token, now)
    else:
        rt.set_waiting_reason(crawl, reason, now)


# --- state ---------------------------------------------------------------------------------


def follow_state(rt: Runtime, obs, held: Held, action: FollowState) -> None:
    crawl = obs.crawl
    if action.state == S.RUNNING:
        crawl.mark_running(held.token, obs.now)
    elif crawl.status != S.WAITING_CAPACITY:
        crawl.mark_finishing(action.state, held.token, obs.now)


def stalled(rt: Runtime, obs, held: Held, action: Stalled) -> None:
    crawl, now, minutes = obs.crawl, obs.now, rt.settings.stall_minutes
    if not crawl.record_stall(held.token, now):
        return
    if crawl.stalls_exhausted:
        raise CrawlFailed(f"no page was done for {minutes:g} minutes, {crawl.stalls} times",
                          stop_reason="stalled")
    rt.note(crawl, f"stalled: no page done for {minutes:g} minutes; restarting its crawlers",
            "warning", now)
    restart_instances(rt, crawl, now)


def restart_instances(rt: Runtime, crawl: Crawl, now: dt.datetime) -> None:
    """Stop every running instance and keep what it packaged; the next launch round starts
    them again. Not a failure: no backoff, no attempt used. On SIGTERM the real crawler
    exits 11 with status `interrupted` and writes NO WACZ: its WARCs stay in its folder and
    the next session's WACZ holds them (archiver's own crawler packages before it exits)."""
    for process in crawl.processes.filter(status=ProcessStatus.RUNNING):
        rt.launcher.remove(rt.launcher.ref_of(process))
        keep_session(rt, crawl, process, now)
        process.mark_removed(now)


def drop_pending(rt: Runtime, obs, held: Held, action: DropPending) -> None:
    action.process.mark_removed(obs.now)
    rt.note(obs.crawl, f"instance {action.process.instance} is not launched again: the crawl is "
                       f"{'canceled' if obs.crawl.intent == Intent.CANCEL else 'stopping'}", now=obs.now)


def finish_crawl(rt: Runtime, obs, held: Held, action: Finish) -> None:
    from runner.steps import finish as finishing

    finishing.finish(rt, obs.crawl, action.outcome, obs.now)


APPLY = {
    RedisDown: redis_down, Corrupt: corrupt, RedisBack: redis_back, Fail: fail_now,
    Ingest: ingest_all, RecordProgress: record_progress, PauseForDisk: pause_for_disk,
    LimitStop: limit_stop, RecordUserStop: record_user_stop, SetFlag: set_flag,
    ClearFlag: clear_flag, SendMessages: send_messages, StopOne: stop_one,
    MarkStarted: mark_started, HandleExit: handle_exit, EngineState: engine_state,
    CountTime: count_time, CancelTimeout: cancel_timeout, Launch: launch,
    Finish: finish_crawl, FollowState: follow_state, Stalled: stalled, DropPending: drop_pending,
}

__all__ = ["APPLY", "CrawlFailed", "DISK_PAUSE", "Intent", "Outcome", "carry_out"]

"""The crawl loop: N asyncio workers claiming pages from the shared Redis queue.

The loop is thin; each step (`process`, `queue_links`, `fetch_requisites`, `check_controls`,
`finish`) is a method of its own. Stopping is cooperative: a stop reason set by a command, a
limit or a signal makes the workers stop claiming and finish what they hold.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urljoin

from redis.exceptions import RedisError

from archiver_crawler import stop
from archiver_crawler.config import CrawlConfig
from archiver_crawler.errors import CrawlerError, ExitCode, RedisUnavailable, UploadFailed
from archiver_crawler.fetch import Fetched, Fetcher, FetchError, FetchRefused
from archiver_crawler.links import extract_css, extract_html
from archiver_crawler.scope import Seed, normalize_url
from archiver_crawler.state import CrawlState, Outcome, QueueEntry, Settled
from archiver_crawler.stop import OUTCOMES, StopReason
from archiver_crawler.upload import interpolate, report, upload
from archiver_crawler.wacz import build_wacz, warc_files
from archiver_crawler.warc import WarcFile, safe_instance_id, warc_date, warc_instance

logger = logging.getLogger(__name__)
UNRECORDED = "unrecorded.jsonl"  # outcomes Redis could not take, for the next session

HTML_TYPES = {"text/html", "application/xhtml+xml"}
REDIRECTS = {301, 302, 303, 307, 308}
PAGES_HEADER = {"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}
CONTROL_INTERVAL = 0.25
IDLE_POLL = 0.2
# A task told to stop (cancel, forced stop, fatal error) gets this long to end; the instance
# then goes on without it rather than hang (its page stays ours in `:p`, handed back at exit).
TASK_GRACE = 10.0
# Pages of an instance gone for good (see CrawlState.settle) are taken back once claimed
# this long ago.
ORPHAN_GRACE = 30.0
STATUS_LOG_INTERVAL = 30.0


def journaled_urls(collection_dir: Path) -> list[str]:
    """The URLs of the outcomes journaled in `collection_dir` (see Crawler._save_unrecorded):
    archived already, so an instance that exits must not hand them back to the queue."""
    try:
        lines = (collection_dir / UNRECORDED).read_text().splitlines()
    except OSError:
        return []
    urls = []
    for line in lines:
        try:
            urls.append(str(json.loads(line)["url"]))
        except (ValueError, KeyError, TypeError):
            continue
    return urls


def iso_now() -> str:
    return warc_date(datetime.now(UTC))


class PagesFile:
    """pages/pages.jsonl, appended line by line (O_APPEND keeps instances' lines whole)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            self._create_with_header(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)

    @staticmethod
    def _create_with_header(path: Path) -> None:
        """The file appears with its header already in it (a hard link of a finished file),
        so another instance starting at the same moment never appends before the header."""
        draft = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        draft.write_text(json.dumps(PAGES_HEADER) + "\n", encoding="utf-8")
        try:
            os.link(draft, path)
        except FileExistsError:
            pass  # the other instance won; its header is in place
        finally:
            draft.unlink()

    def append(self, line: str) -> None:
        os.write(self._fd, (line + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


def disk_usage_percent(path: Path) -> float:
    usage = shutil.disk_usage(path)
    return 100.0 * usage.used / usage.total if usage.total else 0.0


class Crawler:
    def __init__(self, config: CrawlConfig, state: CrawlState, fetcher: Fetcher,
                 started: float | None = None):
        self.config = config
        self.state = state
        self.fetcher = fetcher
        self.started = time.monotonic() if started is None else started
        self.seeds: dict[int, Seed] = {
            i: Seed(i, spec.url, config, spec) for i, spec in enumerate(config.seeds)}
        self.live_excludes: list[re.Pattern] = []
        self.stop_reason: StopReason | None = None
        self.collection_dir = config.collection_dir
        self.warc: WarcFile | None = None
        self.pages: PagesFile | None = None
        self.work_added = asyncio.Event()
        self.idle_workers = 0
        self.pages_crawled = 0
        self.finished = False
        self.fatal: BaseException | None = None
        self._asset_slots = asyncio.Semaphore(config.workers * 2)
        self._tasks: list[asyncio.Task] = []
        self._cancel_deadline: float | None = None
        self._waiting_logged_at = 0.0
        self._pending_wait = False
        self._signals = 0
        self._workers_done = False
        self._finishing = False

    # lifecycle

    async def run(self) -> ExitCode:
        # From the start: as PID 1 in a container a signal without a handler is ignored.
        self._install_signal_handlers()
        try:
            return await self._run()
        finally:
            self._remove_signal_handlers()

    async def _run(self) -> ExitCode:
        if await self.state.get_status() == "done":
            logger.info("instance %s is already done; nothing to do", self.state.instance_id)
            return ExitCode.SUCCESS
        commands = await self.state.read_commands()
        if commands.canceled:
            return await self.finish(StopReason.CANCELED)
        if commands.stopping:
            return await self.finish(StopReason.STOPPING)
        if self.config.disk_utilization and self._disk_full():
            return await self.finish(StopReason.DISK)
        recorded = await self._record_unrecorded()
        if recorded:
            logger.info("recorded %d page(s) archived before Redis went away", recorded)
        requeued = await self.state.requeue_own()
        if requeued:
            logger.info("requeued %d page(s) this instance had in progress", requeued)
        await self.queue_seeds()
        if commands.paused:
            return await self.finish(StopReason.PAUSED)
        if self.stop_reason is not None:  # a signal during start-up
            return await self.finish(self.stop_reason)
        await self.state.set_status("running")
        await self._run_workers()
        if isinstance(self.fatal, RedisError):
            raise RedisUnavailable(f"Redis failed: {type(self.fatal).__name__}") from self.fatal
        if self.fatal is not None:
            raise self.fatal
        return await self.finish(self.stop_reason or StopReason.FINISHED)

    async def _run_workers(self) -> None:
        control = asyncio.create_task(self._control_loop())
        self._tasks = [asyncio.create_task(self.worker()) for _ in range(self.config.workers)]
        try:
            await self._wait_for_workers()
        finally:
            # A flag as well as cancel(): a CancelledError may be absorbed mid-call.
            self._workers_done = True
            control.cancel()
            await asyncio.wait([control], timeout=TASK_GRACE)

    async def _wait_for_workers(self) -> None:
        """Until every worker has ended, or those told to stop had TASK_GRACE to do so."""
        pending = set(self._tasks)
        while pending:
            _, pending = await asyncio.wait(pending, timeout=1.0)
            if not pending or self._cancel_deadline is None:
                continue
            if time.monotonic() >= self._cancel_deadline:
                logger.error("%d worker(s) still running %.0f s after being stopped; going on "
                             "without them", len(pending), TASK_GRACE)
                return
            for task in pending:
                task.cancel()  # again: the first cancel may have been absorbed mid-call

    def _cancel_workers(self) -> None:
        if self._cancel_deadline is None:
            self._cancel_deadline = time.monotonic() + TASK_GRACE
        for task in self._tasks:
            task.cancel()

    def request_stop(self, reason: StopReason) -> None:
        if self.stop_reason is None or reason in (StopReason.CANCELED, StopReason.FORCED):
            if self.stop_reason != reason:
                logger.info("stopping: %s", reason.value)
            self.stop_reason = reason
        if reason in (StopReason.CANCELED, StopReason.FORCED):
            self._cancel_workers()
        self.work_added.set()

    def _abort(self, exc: BaseException) -> None:
        """A fatal error in a worker ends the whole instance (e.g. disk full, Redis gone)."""
        if self.fatal is None:
            self.fatal = exc
        self._cancel_workers()

    async def finish(self, reason: StopReason) -> ExitCode:
        self._finishing = True
        handed_back = await self.state.requeue_own()
        if handed_back:
            # Pages abandoned by a cancel or a forced stop: another instance or a relaunch
            # takes them, so a scale-down never leaves work behind in `:p`.
            logger.info("handed back %d unfinished page(s) to the queue", handed_back)
        if self.warc is not None:
            self.warc.close()
        if self.pages is not None:
            self.pages.close()
        write_wacz, status, code = OUTCOMES[reason]
        if reason is StopReason.FINISHED and await self.state.done_count() == 0:
            logger.error("crawl finished but no page succeeded")
            write_wacz, status, code = False, "failed", ExitCode.FAILED
        if write_wacz and self.config.generate_wacz and warc_files(self.collection_dir):
            await self.state.set_status("generate-wacz")
            main_page = self.seeds[0].url if self.seeds else None
            wacz = await asyncio.to_thread(build_wacz, self.collection_dir, self.config.collection,
                                           main_page)
            if wacz is not None and self.config.store is not None:
                try:
                    await self.upload(wacz, completed=status == "done")
                except UploadFailed as exc:
                    # Its WARCs stay in archive/: the relaunch packages and uploads them again.
                    logger.error("%s", exc, extra={"context": "storage"})
                    status, code = "interrupted", ExitCode.UPLOAD_FAILED
        await self.state.set_size(self.archive_size())
        await self.state.set_status(status)
        logger.info("instance %s exits with status %s, code %d", self.state.instance_id,
                    status, code)
        return code

    async def upload(self, wacz: Path, completed: bool) -> None:
        """The session's WACZ to STORE_ENDPOINT_URL, then reported to WEBHOOK_URL."""
        store = self.config.store
        await self.state.set_status("uploading-wacz")
        name = interpolate(store.filename, self.config.crawl_id, self.state.instance_id,
                           datetime.now(UTC))
        body = await asyncio.to_thread(upload, store, wacz, name, self.config.crawl_id, completed)
        await report(store, body)

    # signals

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in stop.STOP_SIGNALS:
            loop.add_signal_handler(sig, self._on_signal)
        # Signals that arrived while the process was still importing (see launch.py).
        while stop.received:
            logger.info("signal %d received during start-up", stop.received.pop(0))
            self._on_signal()

    def _remove_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in stop.STOP_SIGNALS:
            loop.remove_signal_handler(sig)

    def _on_signal(self) -> None:
        self._signals += 1
        if self._signals == 1:
            self.request_stop(StopReason.SIGNAL)
        elif self._finishing:
            # Packaging the WACZ runs in a thread that cannot be cancelled: leave right now;
            # the relaunch redoes the finishing steps (and requeues any page left in `:p`).
            logger.warning("second signal while finishing: exiting at once")
            os._exit(ExitCode.FORCED_INTERRUPT)
        else:
            self.request_stop(StopReason.FORCED)

    # workers

    async def worker(self) -> None:
        outcome: Outcome | None = None
        try:
            while True:
                claiming = self.stop_reason is None and not self.finished
                committed = await self.state.commit(
                    outcome, self.config.limit, iso_now() if claiming else None)
                if outcome is not None and not committed.recorded:
                    logger.warning("%s was taken back from this instance; its outcome is not "
                                   "counted here", outcome.url)
                outcome = None
                if committed.queued:
                    self.work_added.set()
                # The page is settled already; its requisites still go into this WARC.
                await self.fetch_requisites(committed.fresh)
                if not claiming:
                    return
                entry = committed.claimed
                if entry is None:
                    await self._wait_for_work()
                    continue
                if self._pending_wait:
                    self._pending_wait = False
                    await self.state.set_status("running")
                outcome = await self.process_safely(entry)
        except asyncio.CancelledError:
            # Cancelled because another worker lost Redis: this worker's archived page may
            # be waiting for a commit that can no longer happen.
            if isinstance(self.fatal, RedisError) and outcome is not None:
                self._save_unrecorded(outcome)
            raise
        except Exception as exc:  # noqa: BLE001 - reported as the instance's fatal error
            if isinstance(exc, RedisError) and outcome is not None:
                self._save_unrecorded(outcome)
            self._abort(exc)

    def _save_unrecorded(self, outcome: Outcome) -> None:
        """Redis went away between archiving a page and recording it: keep its outcome on disk,
        so the relaunched instance records it instead of fetching (and archiving) it again."""
        line = json.dumps({"url": outcome.url, "page": outcome.page, "record": outcome.record,
                           "failed": outcome.failed, "links": [e.to_json() for e in outcome.links],
                           "assets": list(outcome.assets)})
        try:
            with open(self.config.collection_dir / UNRECORDED, "a") as journal:
                journal.write(line + "\n")
        except OSError as exc:
            logger.warning("could not keep %s for the next session (%s); it will be fetched again",
                           outcome.url, exc)

    async def _record_unrecorded(self) -> int:
        """The outcomes a previous session of this instance could not record (see above),
        recorded now, while its pages are still this instance's in `:p`."""
        path = self.config.collection_dir / UNRECORDED
        try:
            lines = path.read_text().splitlines()
        except OSError:
            return 0
        recorded = 0
        for line in lines:
            try:
                data = json.loads(line)
                outcome = Outcome(
                    url=str(data["url"]), page=data.get("page"), record=data.get("record"),
                    failed=data.get("failed"), assets=tuple(str(a) for a in data.get("assets", [])),
                    links=tuple(QueueEntry.from_json(raw) for raw in data.get("links", [])))
            except (ValueError, KeyError, TypeError):
                continue
            committed = await self.state.commit(outcome, self.config.limit, None)
            recorded += committed.recorded
        path.unlink(missing_ok=True)
        return recorded

    async def process_safely(self, entry: QueueEntry) -> Outcome:
        """`process`, with an unexpected error failing this page rather than the crawl."""
        try:
            return await self.process(entry)
        except (CrawlerError, RedisError, OSError):
            raise  # the instance's own trouble (disk, Redis): not this page's
        except Exception as exc:  # noqa: BLE001 - per-page boundary: logged, page failed
            logger.exception("internal error on %s", entry.url)
            return self.failed(entry, f"internal error: {type(exc).__name__}: {exc}"[:300])

    async def _wait_for_work(self) -> None:
        self.idle_workers += 1
        try:
            if self.idle_workers == self.config.workers:
                settled = await self.state.settle(
                    warc_date(datetime.now(UTC) - timedelta(seconds=ORPHAN_GRACE)))
                if settled.requeued:
                    logger.warning("took back %d page(s) held by instances that are gone",
                                   settled.requeued)
                if settled.finished:
                    self.finished = True
                    self.work_added.set()
                    return
                await self._log_waiting(settled)
                if not self._pending_wait:
                    self._pending_wait = True
                    await self.state.set_status("pending-wait")
            self.work_added.clear()
            try:
                async with asyncio.timeout(IDLE_POLL):
                    await self.work_added.wait()
            except TimeoutError:
                pass
        finally:
            self.idle_workers -= 1

    async def _log_waiting(self, settled: Settled) -> None:
        """An idle instance says now and then whom it waits for (else it looks hung)."""
        now = time.monotonic()
        if settled.queued or now - self._waiting_logged_at < STATUS_LOG_INTERVAL:
            return
        self._waiting_logged_at = now
        holders = await self.state.holders()
        logger.info("idle: waiting for %d page(s) in progress elsewhere (%s)",
                    settled.in_progress,
                    ", ".join(f"{owner}: {n}" for owner, n in sorted(holders.items())),
                    extra={"context": "crawlStatus", "details": {"inProgress": holders}})

    async def process(self, entry: QueueEntry) -> Outcome:
        """Fetch one page and archive it; its outcome carries the links and requisites."""
        seed = await self.seed_for(entry.seed_id)
        try:
            fetched = await self.fetcher.fetch(entry.url)
        except FetchError as exc:
            return self.failed(entry, str(exc))
        title, load_state = "", 2
        links: list[QueueEntry] = []
        requisites: list[str] = []
        location = fetched.header("location") if fetched.status in REDIRECTS else None
        if location:
            links = await self.redirect_target(entry, seed, urljoin(entry.url, location))
        elif fetched.mime in HTML_TYPES:
            extracted = extract_html(fetched.decoded_body(), entry.url)
            links = await self.in_scope(entry, seed, extracted.links)
            requisites = extracted.requisites
            title, load_state = extracted.title, 3
        # Written only after the last await: from here to the worker holding the outcome
        # nothing can be cancelled, so an archived page always reaches a commit or the
        # journal of unrecorded outcomes, and is never fetched (and archived) twice.
        self.write(fetched)
        page = {
            "id": uuid.uuid4().hex, "url": entry.url, "title": title,
            "ts": warc_date(fetched.exchange.date), "mime": fetched.mime,
            "status": fetched.status, "depth": entry.depth, "seed": entry.depth == 0,
            "loadState": load_state,
        }
        # In a WACZ's pages list, a page's `filename` names the WACZ holding it (replay tools
        # open that file for the page): the WARC's name goes only to Redis.
        self._pages_file().append(json.dumps(page))
        record = json.dumps({**page, "filename": self.warc.name if self.warc else None})
        self.pages_crawled += 1
        return Outcome(entry.url, page=record if self.config.write_pages_to_redis else None,
                       links=tuple(links), assets=tuple(requisites))

    def failed(self, entry: QueueEntry, reason: str) -> Outcome:
        logger.error("page load failed: %s (%s)", entry.url, reason,
                     extra={"context": "pageStatus", "details": {"url": entry.url,
                                                                 "reason": reason}})
        return Outcome(entry.url, failed=json.dumps(
            {"url": entry.url, "seedId": entry.seed_id, "depth": entry.depth,
             "extraHops": entry.extra_hops, "reason": reason, "ts": iso_now()}))

    def write(self, fetched: Fetched) -> None:
        if self.warc is None:
            self.warc = WarcFile(self.collection_dir / "archive", self.state.instance_id,
                                 self.config.collection)
        self.warc.write(fetched.exchange)
        if self.config.size_limit and self.warc.size >= self.config.size_limit:
            self.request_stop(StopReason.SIZE_LIMIT)

    def _pages_file(self) -> PagesFile:
        if self.pages is None:
            self.pages = PagesFile(self.collection_dir / "pages" / "pages.jsonl")
        return self.pages

    # queueing

    async def queue_seeds(self) -> None:
        entries = [QueueEntry(url=seed.url, seed_id=seed.id, depth=0)
                   for seed in self.seeds.values()]
        await self.state.add(await self._robots_filter(entries), self.config.limit)

    async def in_scope(self, entry: QueueEntry, seed: Seed, links: list[str]) -> list[QueueEntry]:
        """The page's links that its seed's scope (and robots.txt) let us queue."""
        depth, hops = entry.depth + 1, entry.extra_hops + 1
        entries = []
        for url in links:
            decision = seed.decide(url, depth, hops, self.live_excludes)
            if decision:
                entries.append(QueueEntry(url=url, seed_id=seed.id, depth=depth,
                                          extra_hops=hops if decision.out_of_scope
                                          else entry.extra_hops))
        return await self._robots_filter(entries)

    async def redirect_target(self, entry: QueueEntry, seed: Seed,
                              target: str) -> list[QueueEntry]:
        """A redirect's target, to queue at the same depth; a seed may leave its scope."""
        url = normalize_url(target)
        if url is None or url == entry.url:
            return []
        if entry.depth == 0 and not seed.decide(url, 0, 0, self.live_excludes):
            position = await self.state.add_extra_seed(seed.id, url)
            new_id = len(self.config.seeds) + position
            self.seeds[new_id] = self._extra_seed(new_id, seed, url)
            return [QueueEntry(url=url, seed_id=new_id, depth=0)]
        # Following a redirect is part of loading the page: no extra hop is spent on it.
        if seed.decide(url, entry.depth, entry.extra_hops, self.live_excludes):
            return await self._robots_filter([QueueEntry(
                url=url, seed_id=seed.id, depth=entry.depth, extra_hops=entry.extra_hops)])
        return []


    async def _robots_filter(self, entries: list[QueueEntry]) -> list[QueueEntry]:
        if not self.config.use_robots:
            return entries
        allowed = []
        for entry in entries:
            if await self.fetcher.allowed_by_robots(entry.url):
                allowed.append(entry)
            else:
                logger.info("robots.txt disallows %s", entry.url)
        return allowed

    def _extra_seed(self, seed_id: int, orig: Seed, url: str) -> Seed:
        spec = self.config.seeds[orig.id] if orig.id < len(self.config.seeds) else None
        spec = replace(spec, url=url) if spec else None
        return Seed(seed_id, url, self.config, spec)

    async def seed_for(self, seed_id: int) -> Seed:
        if seed_id not in self.seeds:
            for position, extra in enumerate(await self.state.get_extra_seeds()):
                new_id = len(self.config.seeds) + position
                orig = self.seeds.get(int(extra.get("origSeedId", 0)), self.seeds[0])
                self.seeds.setdefault(new_id, self._extra_seed(new_id, orig, extra["newUrl"]))
        return self.seeds.get(seed_id) or self.seeds[0]

    # requisites

    async def fetch_requisites(self, fresh: list[str]) -> None:
        """Fetch requisites already claimed for this instance (see CrawlState.add)."""
        if fresh:
            await asyncio.gather(*(self._fetch_requisite(url) for url in fresh))

    async def _fetch_requisite(self, url: str) -> None:
        async with self._asset_slots:
            try:
                fetched = await self.fetcher.fetch(url)
            except FetchRefused as exc:
                # Not a page, so not on `<id>:f`; an error line (`<id>:e`, the crawl's log)
                # says which request the policy stopped, and nothing of it is archived.
                logger.error("requisite refused: %s (%s)", url, exc, extra={
                    "context": "addressPolicy", "details": {"url": url, "reason": str(exc)}})
                return
            except FetchError as exc:
                logger.warning("requisite failed: %s (%s)", url, exc)
                return
        self.write(fetched)
        if fetched.mime == "text/css" and fetched.status < 400:
            _, fresh = await self.state.add([], 0, extract_css(fetched.decoded_body(), url))
            await self.fetch_requisites(fresh)

    # controls: commands, messages, limits

    async def _control_loop(self) -> None:
        ticks = 0
        logged_at = time.monotonic()
        while not self._workers_done:
            try:
                await self.check_controls(check_disk=ticks % 20 == 0)
            except Exception as exc:  # noqa: BLE001 - reported as the instance's fatal error
                self._abort(exc)
                return
            ticks += 1
            if time.monotonic() - logged_at >= STATUS_LOG_INTERVAL:
                logged_at = time.monotonic()
                logger.info("%d page(s) crawled by this instance", self.pages_crawled,
                            extra={"context": "crawlStatus",
                                   "details": {"crawled": self.pages_crawled}})
            await asyncio.sleep(CONTROL_INTERVAL)

    async def check_controls(self, check_disk: bool = False) -> None:
        commands = await self.state.read_commands()
        if commands.canceled:
            self.request_stop(StopReason.CANCELED)
        elif commands.stopping:
            self.request_stop(StopReason.STOPPING)
        elif commands.paused:
            self.request_stop(StopReason.PAUSED)
        elif commands.stop_one:
            self.request_stop(StopReason.STOP_ONE)
        for message in await self.state.pop_messages():
            await self.apply_message(message)
        if self.config.time_limit and time.monotonic() - self.started >= self.config.time_limit:
            self.request_stop(StopReason.TIME_LIMIT)
        if check_disk and self.config.disk_utilization and self._disk_full():
            self.request_stop(StopReason.DISK)
        await self.state.set_size(self.archive_size())

    async def apply_message(self, message: dict) -> None:
        kind, regex = message.get("type"), message.get("regex")
        if not isinstance(regex, str):
            logger.warning("ignoring control message without a regex: %s", message)
            return
        try:
            pattern = re.compile(regex)
        except re.error:
            logger.warning("ignoring control message with an invalid regex: %s", regex)
            return
        if kind == "addExclusion":
            self.live_excludes.append(pattern)
            dropped = await self.state.drop_queued(pattern)
            logger.info("exclusion %s added; %d queued URL(s) dropped", regex, dropped)
        elif kind == "removeExclusion":
            self.live_excludes = [p for p in self.live_excludes if p.pattern != regex]
            logger.info("exclusion %s removed", regex)
        else:
            logger.warning("ignoring control message of unknown type %r", kind)

    def _disk_full(self) -> bool:
        self.collection_dir.mkdir(parents=True, exist_ok=True)
        percent = disk_usage_percent(self.collection_dir)
        if percent > self.config.disk_utilization:
            logger.error("disk utilization %.1f%% is above %d%%", percent,
                         self.config.disk_utilization)
            return True
        return False

    def archive_size(self) -> int:
        """Bytes of this instance's WARC files (all sessions) in archive/."""
        own = safe_instance_id(self.state.instance_id)
        total = 0
        for path in warc_files(self.collection_dir):
            if warc_instance(path.name) == own:
                try:
                    total += path.stat().st_size
                except FileNotFoundError:
                    continue
        return total

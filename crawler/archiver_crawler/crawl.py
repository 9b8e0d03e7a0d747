"""The crawl loop: N asyncio workers claiming pages from the shared Redis queue.

The loop is thin; the steps live with their concern: loading a page (`page.py`), processing
it (`processing.py`), what to queue (`frontier.py`), the files written (`output.py`), the
commands and limits polled while crawling (`controls.py`), Redis (`state.py`). Stopping is
cooperative: a stop reason set by a command, a limit or a signal makes the workers stop
claiming and finish what they hold.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from datetime import UTC, datetime, timedelta

from redis.exceptions import RedisError

from archiver_crawler import journal, stop
from archiver_crawler.config import CrawlConfig
from archiver_crawler.controls import Controls, disk_full
from archiver_crawler.dedup import KnownPayloads
from archiver_crawler.errors import ExitCode, RedisUnavailable
from archiver_crawler.fetch import Fetcher
from archiver_crawler.frontier import Frontier
from archiver_crawler.output import Output
from archiver_crawler.page import HttpPageLoader, PageLoader
from archiver_crawler.processing import PageProcessor
from archiver_crawler.state import CrawlState, Outcome, Settled
from archiver_crawler.stop import ABANDONING, OUTCOMES, StopReason
from archiver_crawler.warc import iso_now, warc_date

logger = logging.getLogger(__name__)

CONTROL_INTERVAL = 0.25
IDLE_POLL = 0.2
# A task told to stop (cancel, forced stop, fatal error) gets this long to end; the instance
# then goes on without it rather than hang (its page stays ours in `:p`, handed back at exit).
TASK_GRACE = 10.0
# Pages of an instance gone for good (see CrawlState.settle) are taken back once claimed
# this long ago.
ORPHAN_GRACE = 30.0
STATUS_LOG_INTERVAL = 30.0


class Crawler:
    def __init__(self, config: CrawlConfig, state: CrawlState, fetcher: Fetcher,
                 started: float | None = None, loader: PageLoader | None = None):
        self.config = config
        self.state = state
        self.started = time.monotonic() if started is None else started
        self.frontier = Frontier(config, state, fetcher)
        self.output = Output(config, state.instance_id)
        self.pages = PageProcessor(config, state, loader or HttpPageLoader(fetcher), fetcher,
                                   self.frontier, self.output, self.request_stop)
        self.controls = Controls(config, state, self.frontier, self.output, self.request_stop,
                                 self.started)
        self.stop_reason: StopReason | None = None
        self.work_added = asyncio.Event()
        self.idle_poll = IDLE_POLL
        self.idle_workers = 0
        self.finished = False
        self.fatal: BaseException | None = None
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
        if self.config.disk_utilization and disk_full(self.config):
            return await self.finish(StopReason.DISK)
        await self._load_dedup()
        recorded = await self._record_unrecorded()
        if recorded:
            logger.info("recorded %d page(s) archived before Redis went away", recorded)
        requeued = await self.state.requeue_own()
        if requeued:
            logger.info("requeued %d page(s) this instance had in progress", requeued)
        await self.frontier.queue_seeds()
        if commands.paused:
            return await self.finish(StopReason.PAUSED)
        if self.stop_reason is not None:  # a signal during start-up
            return await self.finish(self.stop_reason)
        await self.state.set_status("running")
        return await self._crawl()

    async def _load_dedup(self) -> None:
        if self.config.dedup:
            self.output.known = self.pages.fetcher.known = await KnownPayloads.load(
                self.state.redis, self.config.crawl_id, self.config.collection_dir)
            logger.info("deduplicating against %s", self.output.known)

    async def _crawl(self) -> ExitCode:
        """The workers to their end, then the instance's finishing steps."""
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
        if self.stop_reason is None or reason in ABANDONING:
            if self.stop_reason != reason:
                logger.info("stopping: %s", reason.value)
            self.stop_reason = reason
        if reason in ABANDONING:
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
        self.output.close()
        write_wacz, status, code = OUTCOMES[reason]
        if reason is StopReason.FINISHED and await self.state.done_count() == 0:
            logger.error("crawl finished but no page succeeded")
            write_wacz, status, code = False, "failed", ExitCode.FAILED
        if write_wacz and self.config.generate_wacz and self.output.has_warcs():
            packaged = await self.output.package(self.state, self.frontier.main_page,
                                                 completed=status == "done")
            if not packaged:  # the upload failed
                status, code = "interrupted", ExitCode.UPLOAD_FAILED
        await self.state.set_size(self.output.archive_size())
        await self.state.set_status(status)
        logger.info("instance %s exits with status %s, code %d", self.state.instance_id,
                    status, code)
        return code

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
                if outcome is not None and outcome.links:
                    self.frontier.committed(outcome.links, committed.queued, self.config.limit)
                outcome = None
                if committed.queued:
                    self.work_added.set()
                # The page is settled already; its requisites still go into this WARC.
                await self.pages.fetch_requisites(committed.fresh)
                if not claiming:
                    return
                entry = committed.claimed
                if entry is None:
                    await self._wait_for_work()
                    continue
                if self._pending_wait:
                    self._pending_wait = False
                    await self.report_status("running")
                outcome = await self.pages.process_safely(entry)
        except asyncio.CancelledError:
            # Cancelled because another worker lost Redis: this worker's archived page may
            # be waiting for a commit that can no longer happen.
            if isinstance(self.fatal, RedisError) and outcome is not None:
                journal.save(self.config.collection_dir, outcome, self._journal_owner)
            raise
        except Exception as exc:  # noqa: BLE001 - reported as the instance's fatal error
            if isinstance(exc, RedisError) and outcome is not None:
                journal.save(self.config.collection_dir, outcome, self._journal_owner)
            self._abort(exc)

    @property
    def _journal_owner(self) -> str | None:  # who holds our pages in `:p`, if not the instance
        return None if self.state.owner == self.state.instance_id else self.state.owner

    async def report_status(self, status: str) -> None:
        """`running` / `pending-wait`; one process of an instance tells its parent (procs.py)."""
        await self.state.set_status(status)

    def pages_crawled(self) -> int:
        return self.pages.pages_crawled

    async def _record_unrecorded(self) -> int:
        """The outcomes a previous session of this instance could not record (journal.py),
        recorded now, while its pages are still this instance's in `:p`."""
        outcomes = journal.saved(self.config.collection_dir)
        if outcomes is None:
            return 0
        recorded = 0
        for outcome in outcomes:
            committed = await self.state.commit(outcome, self.config.limit, None,
                                                owner=outcome.owner)
            recorded += committed.recorded
        journal.forget(self.config.collection_dir)
        return recorded

    async def _wait_for_work(self) -> None:
        self.idle_workers += 1
        try:
            if self.idle_workers == self.config.workers and await self._settled():
                return
            self.work_added.clear()
            try:
                async with asyncio.timeout(self.idle_poll):
                    await self.work_added.wait()
            except TimeoutError:
                pass
        finally:
            self.idle_workers -= 1

    async def _settled(self) -> bool:
        """All workers idle: is the crawl finished? If not, say so (`pending-wait`)."""
        settled = await self.state.settle(
            warc_date(datetime.now(UTC) - timedelta(seconds=ORPHAN_GRACE)))
        if settled.requeued:
            logger.warning("took back %d page(s) held by instances that are gone",
                           settled.requeued)
        if settled.finished:
            self.finished = True
            self.work_added.set()
            return True
        await self._log_waiting(settled)
        if not self._pending_wait:
            self._pending_wait = True
            await self.report_status("pending-wait")
        return False

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

    # controls: commands, messages, limits (controls.py)

    async def _control_loop(self) -> None:
        ticks = 0
        logged_at = time.monotonic()
        while not self._workers_done:
            try:
                await self.controls.check(check_disk=ticks % 20 == 0)
            except Exception as exc:  # noqa: BLE001 - reported as the instance's fatal error
                self._abort(exc)
                return
            ticks += 1
            if time.monotonic() - logged_at >= STATUS_LOG_INTERVAL:
                logged_at = time.monotonic()
                crawled = self.pages_crawled()
                logger.info("%d page(s) crawled by this instance", crawled,
                            extra={"context": "crawlStatus", "details": {"crawled": crawled}})
            await asyncio.sleep(CONTROL_INTERVAL)

"""Entry point: parse options, set up logs, run one crawler instance, map the outcome to an exit code.

Every wait here is bounded: the event loop is torn down with a deadline for stray tasks, and
the process exits even if a thread (a DNS lookup, a packaging thread) is still running.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import sys
import threading
import time
import traceback
from datetime import UTC, datetime

from redis.exceptions import RedisError

from archiver_crawler import procs
from archiver_crawler.config import CrawlConfig, parse_args
from archiver_crawler.crawl import Crawler
from archiver_crawler.errors import ConfigError, CrawlerError, ExitCode, RedisUnavailable
from archiver_crawler.fetch import Fetcher
from archiver_crawler.hosts import HostBudget
from archiver_crawler.journal import journaled_urls
from archiver_crawler.netpolicy import AddressPolicy
from archiver_crawler.seedfile import add_online_seeds
from archiver_crawler.state import CrawlState
from archiver_crawler.warc import iso_now

logger = logging.getLogger("archiver_crawler")

SHUTDOWN_GRACE = 5.0  # seconds for each teardown step (tasks, connections, threads)
HEALTH_READ_TIMEOUT = 5.0


class JsonLogFormatter(logging.Formatter):
    """The real crawler's log line shape: timestamp, logLevel, context, message, details."""

    def format(self, record: logging.LogRecord) -> str:
        details = dict(getattr(record, "details", {}))
        if record.exc_info and record.exc_info[1] is not None:
            details["type"] = type(record.exc_info[1]).__name__
            details["stack"] = "".join(traceback.format_exception(*record.exc_info))[-2000:]
        return json.dumps({
            "timestamp": iso_now(),
            "logLevel": record.levelname.lower(),
            "context": getattr(record, "context", "general"),
            "message": record.getMessage(),
            "details": details,
        })


class RedisErrorBuffer(logging.Handler):
    """Keeps error lines for `<id>:e`, and warnings marked `crawl_log` (the crawl's log shows
    both); the crawl flushes them (logging must not block on Redis)."""

    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.setFormatter(JsonLogFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or getattr(record, "crawl_log", False):
            self.lines.append(self.format(record))

    def drain(self) -> list[str]:
        lines, self.lines = self.lines, []
        return lines


def setup_logging(config: CrawlConfig) -> RedisErrorBuffer:
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(stderr)
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    logs = config.collection_dir / "logs"
    try:
        logs.mkdir(parents=True, exist_ok=True)
        file_handler = logging.FileHandler(logs / f"crawl-{stamp}-{config.instance_id}.log",
                                           encoding="utf-8")
    except OSError as exc:
        # Not fatal here: the first write to the collection fails the same way, and that
        # error then reaches `<id>:e` too.
        logger.error("cannot write the log file in %s: %s", logs, exc)
    else:
        file_handler.setFormatter(JsonLogFormatter())
        root.addHandler(file_handler)
    buffer = RedisErrorBuffer()
    root.addHandler(buffer)
    return buffer


async def _health_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        async with asyncio.timeout(HEALTH_READ_TIMEOUT):
            await reader.readline()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK")
            await writer.drain()
    except (TimeoutError, OSError):
        pass  # a prober that hangs up or stays silent gets nothing; the crawl is unaffected
    finally:
        writer.close()


async def _health_server(port: int) -> asyncio.Server | None:
    try:
        return await asyncio.start_server(_health_answer, "0.0.0.0", port)
    except OSError as exc:
        # The health check is an aid to an orchestrator, not part of the crawl.
        logger.error("health check port %d unavailable (%s); running without it", port, exc)
        return None


async def run_instance(config: CrawlConfig, errors: RedisErrorBuffer | None = None,
                       started: float | None = None, link: procs.ParentLink | None = None,
                       children: list[procs.Child] | None = None) -> ExitCode:
    """Run one instance to its end and return its exit code (raises CrawlerError subclasses):
    the whole of it, or (`children`) the parent of its processes, or (`link`) one of them."""
    state = await CrawlState.connect(config.redis_url, config.crawl_id, config.instance_id,
                                     link.owner if link else None)
    policy = AddressPolicy.for_this_host(config.allow_networks)
    fetcher = Fetcher(config.user_agent, config.page_load_timeout, config.workers,
                      config.host_delay, policy)
    fetcher.budget = HostBudget.connect(config.redis_url, config.rates,
                                        crawl=(state.redis, config.crawl_id))
    health = await _health_server(config.health_check_port) if config.health_check_port else None
    flushing = asyncio.Event()
    flusher = asyncio.create_task(_flush_errors(state, errors, flushing)) if errors else None
    loader = None
    try:
        await add_online_seeds(config, state.redis, fetcher)
        if config.browser is not None:
            from archiver_crawler.browser.loader import BrowserPageLoader  # browser mode only
            from archiver_crawler.browser.screencast import Screencast

            loader = BrowserPageLoader(config, policy, fetcher=fetcher)
            loader.engine.exchanger.budget = fetcher.budget
            loader.engine.screencast = Screencast(state.redis, config.crawl_id, config.instance_id)
            await loader.start()
        if children:
            crawler = procs.Supervisor(config, state, fetcher, started=started,
                                       children=children)
        elif link:
            crawler = procs.ChildCrawler(config, state, fetcher, started=started, link=link)
        else:
            crawler = Crawler(config, state, fetcher, started=started, loader=loader)
        return await crawler.run()
    except CrawlerError as exc:
        # Only a permanent error fails the instance; others mean "launch me again".
        permanent = exc.exit_code == ExitCode.INVALID_CONFIG
        await _leave_quietly(state, None if link else "failed" if permanent else "interrupted",
                             keep=journaled_urls(config.collection_dir))
        raise
    except RedisError as exc:
        raise RedisUnavailable(f"Redis failed: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - the instance's boundary: said clearly, exit 1
        await _leave_quietly(state, None if link else "interrupted")
        return unexpected(exc)
    finally:
        if flusher:
            flushing.set()
            await asyncio.wait([flusher], timeout=SHUTDOWN_GRACE)
            await _push_errors(state, errors)
        if health:
            health.close()
        if loader is not None:
            await _close_quietly(loader.close(), "browser")
        await _close_quietly(fetcher.close(), "HTTP session")
        await _close_quietly(fetcher.budget.close(), "host budget's Redis connection")
        await _close_quietly(state.close(), "Redis connection")


async def _close_quietly(closing, what: str) -> None:
    try:
        await asyncio.wait_for(closing, SHUTDOWN_GRACE)
    except (TimeoutError, OSError, RedisError) as exc:
        logger.warning("closing the %s failed: %s", what, type(exc).__name__)


async def _flush_errors(state: CrawlState, errors: RedisErrorBuffer,
                        stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except TimeoutError:
            await _push_errors(state, errors)


async def _push_errors(state: CrawlState, errors: RedisErrorBuffer) -> None:
    lines = errors.drain()
    try:
        await state.push_errors(lines)
    except (RedisError, OSError):
        logger.warning("could not push %d error line(s) to Redis", len(lines))


async def _leave_quietly(state: CrawlState, status: str | None,
                         keep: list[str] | None = None) -> None:
    """On a fatal error: hand back the pages this instance holds and set its status, if Redis
    still answers (else the relaunch requeues them). Pages whose outcomes were journaled
    (`keep`: Redis failed, then came back before this exit) stay this instance's, so its
    next session records them instead of another session fetching them again. One process
    of an instance (`status` None) leaves the status to its parent."""
    try:
        await state.requeue_own(keep or ())
        if status is not None:
            await state.set_status(status)
    except (RedisError, OSError):
        logger.warning("could not hand back pages and set status %s in Redis", status)


def run_bounded(coro) -> ExitCode:
    """asyncio.run(), except that no teardown step waits forever: tasks that ignore their
    cancellation and executor threads (a stuck DNS lookup) are left behind."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            _cancel_leftovers(loop)
            loop.run_until_complete(asyncio.wait([loop.create_task(loop.shutdown_asyncgens())],
                                                 timeout=SHUTDOWN_GRACE))
        finally:
            asyncio.set_event_loop(None)
            loop.close()  # shuts the default executor down without waiting for its threads


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    if not tasks:
        return
    for task in tasks:
        task.cancel()
    _, pending = loop.run_until_complete(asyncio.wait(tasks, timeout=SHUTDOWN_GRACE))
    if pending:
        logger.warning("%d task(s) ignored their cancellation; exiting without them",
                       len(pending))
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            logger.warning("a task ended with %s during shutdown", type(task.exception()).__name__)


def exit_code_of(config: CrawlConfig, errors: RedisErrorBuffer, started: float,
                 **role) -> int:
    """The instance's exit code (`role`: run_instance's `link` or `children`)."""
    try:
        return int(run_bounded(run_instance(
            config, errors if config.log_errors_to_redis else None, started, **role)))
    except CrawlerError as exc:
        logger.error("%s", exc)
        return int(exc.exit_code)
    except (RedisError, ConnectionError) as exc:
        logger.error("Redis failed: %s", type(exc).__name__)
        return int(ExitCode.REDIS_UNAVAILABLE)
    except KeyboardInterrupt:
        return int(ExitCode.FORCED_INTERRUPT)
    except Exception as exc:  # noqa: BLE001 - the process's boundary: said clearly, exit 1
        return int(unexpected(exc))


def unexpected(exc: Exception) -> ExitCode:
    """An error nobody expected: exit 1, unless the disk is full (packaging, a log, a page
    list), which is exit 3 so the runner pauses the crawl for the disk instead of failing it."""
    if out_of_space(exc):
        logger.error("out of disk space, exiting 3: %s", exc)
        return ExitCode.OUT_OF_SPACE
    logger.error("unexpected error, exiting 1: %s: %s", type(exc).__name__, exc, exc_info=True)
    return ExitCode.GENERIC_ERROR


def out_of_space(exc: BaseException) -> bool:
    """ENOSPC (or a disk quota) anywhere in the chain of `exc`."""
    seen: BaseException | None = exc
    for _ in range(20):
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _leave(code: int) -> int:
    """Return `code`, or exit with it at once when a thread would keep the process alive."""
    deadline = time.monotonic() + SHUTDOWN_GRACE
    others = [t for t in threading.enumerate()
              if t is not threading.main_thread() and not t.daemon]
    for thread in others:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in others if t.is_alive()]
    if stuck:
        logger.warning("exiting with %d thread(s) still running: %s", len(stuck),
                       ", ".join(stuck))
        logging.shutdown()
        os._exit(code)
    return code


def _child_exit_code(link: procs.ParentLink, errors: RedisErrorBuffer, started: float) -> int:
    errors.drain()  # the lines logged before the fork are the parent's to push
    return exit_code_of(link.config, errors, started, link=link)


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    try:
        config = parse_args(sys.argv[1:] if argv is None else argv)
    except ConfigError as exc:
        sys.stderr.write(f"archiver-crawler: invalid configuration: {exc}\n")
        return ExitCode.INVALID_CONFIG
    errors = setup_logging(config)
    logger.info("crawl %s, instance %s, collection %s, %d worker(s) in %d process(es), %s, "
                "networks allowed besides the public internet: %s", config.crawl_id,
                config.instance_id, config.collection, config.workers, config.processes,
                f"browser mode ({config.browser.chromium})" if config.browser else "HTTP mode",
                ", ".join(map(str, config.allow_networks)) or "none")
    if config.processes == 1:
        return _leave(exit_code_of(config, errors, started))
    # Forked before any event loop or thread exists (see procs.py).
    children = procs.fork_children(config, lambda link: _child_exit_code(link, errors, started))
    try:
        code = exit_code_of(config, errors, started, children=children)
    finally:
        procs.end_children(children)
    return _leave(code)

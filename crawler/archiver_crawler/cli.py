"""Entry point: parse options, set up logs, run one crawler instance, map the outcome to an exit code."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from datetime import UTC, datetime

from redis.exceptions import RedisError

from archiver_crawler.config import CrawlConfig, parse_args
from archiver_crawler.crawl import Crawler, iso_now
from archiver_crawler.errors import ConfigError, CrawlerError, ExitCode
from archiver_crawler.fetch import Fetcher
from archiver_crawler.state import CrawlState

logger = logging.getLogger("archiver_crawler")


class JsonLogFormatter(logging.Formatter):
    """The real crawler's log line shape: timestamp, logLevel, context, message, details."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({
            "timestamp": iso_now(),
            "logLevel": record.levelname.lower(),
            "context": getattr(record, "context", "general"),
            "message": record.getMessage(),
            "details": getattr(record, "details", {}),
        })


class RedisErrorBuffer(logging.Handler):
    """Keeps error lines for `<id>:e`; the crawl flushes them (logging must not block on Redis)."""

    def __init__(self):
        super().__init__(level=logging.ERROR)
        self.setFormatter(JsonLogFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
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
    logs = config.collection_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    file_handler = logging.FileHandler(logs / f"crawl-{stamp}-{config.instance_id}.log",
                                       encoding="utf-8")
    file_handler.setFormatter(JsonLogFormatter())
    root.addHandler(file_handler)
    buffer = RedisErrorBuffer()
    root.addHandler(buffer)
    return buffer


async def _health_server(port: int):
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK")
        await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, "0.0.0.0", port)


async def run_instance(config: CrawlConfig, errors: RedisErrorBuffer | None = None,
                       started: float | None = None) -> ExitCode:
    """Run one instance to its end and return its exit code (raises CrawlerError subclasses)."""
    state = await CrawlState.connect(config.redis_url, config.crawl_id, config.instance_id)
    fetcher = Fetcher(config.user_agent, config.page_load_timeout, config.workers,
                      config.host_delay)
    health = await _health_server(config.health_check_port) if config.health_check_port else None
    crawler = Crawler(config, state, fetcher, started=started)
    flusher = asyncio.create_task(_flush_errors(state, errors)) if errors else None
    try:
        return await crawler.run()
    except CrawlerError as exc:
        # Only a permanent error fails the instance; others mean "launch me again".
        permanent = exc.exit_code == ExitCode.INVALID_CONFIG
        await _set_status_quietly(state, "failed" if permanent else "interrupted")
        raise
    finally:
        if flusher:
            flusher.cancel()
            await asyncio.gather(flusher, return_exceptions=True)
            await _push_errors(state, errors)
        if health:
            health.close()
        await fetcher.close()
        await state.close()


async def _flush_errors(state: CrawlState, errors: RedisErrorBuffer) -> None:
    while True:
        await asyncio.sleep(1)
        await _push_errors(state, errors)


async def _push_errors(state: CrawlState, errors: RedisErrorBuffer) -> None:
    lines = errors.drain()
    try:
        await state.push_errors(lines)
    except (RedisError, OSError):
        logger.warning("could not push %d error line(s) to Redis", len(lines))


async def _set_status_quietly(state: CrawlState, status: str) -> None:
    try:
        await state.set_status(status)
    except (RedisError, OSError):
        logger.warning("could not set status %s in Redis", status)


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    try:
        config = parse_args(sys.argv[1:] if argv is None else argv)
    except ConfigError as exc:
        sys.stderr.write(f"archiver-crawler: invalid configuration: {exc}\n")
        return ExitCode.INVALID_CONFIG
    errors = setup_logging(config)
    logger.info("crawl %s, instance %s, collection %s, %d worker(s)", config.crawl_id,
                config.instance_id, config.collection, config.workers)
    try:
        return int(asyncio.run(run_instance(
            config, errors if config.log_errors_to_redis else None, started)))
    except CrawlerError as exc:
        logger.error("%s", exc)
        return int(exc.exit_code)
    except (RedisError, ConnectionError) as exc:
        logger.error("Redis failed: %s", type(exc).__name__)
        return int(ExitCode.REDIS_UNAVAILABLE)
    except KeyboardInterrupt:
        return int(ExitCode.FORCED_INTERRUPT)

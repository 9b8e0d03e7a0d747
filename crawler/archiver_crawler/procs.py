"""One instance in several processes (`--processes N`, HTTP mode only).

Parsing and archiving a page is CPU-bound Python, so one process uses one core. With N
processes the instance forks N children before any event loop or thread exists; each crawls
with its share of `--workers`, claiming pages from the crawl's Redis queue exactly as scaled
instances do, but under an owner of its own in `:p`, `<instance>#<session>-<k>`. Status,
size and commands stay the instance's: to the runner there is one instance.

The parent (`Supervisor`) does what one instance does around the crawl: records journaled
outcomes, takes back pages of an earlier session, queues the seeds, reads the commands, the
control messages and the limits, sets `<id>:status` and `<id>:size`, and once every child
has exited packages one WACZ of all their WARCs (pages.jsonl is shared, lines appended whole).
It talks to each child over a pair of pipes, one JSON object a line: down `go`, stop reasons
and control messages; up the child's status (`running`/`pending-wait`), its size and its
final stop reason. A child that ends without a final reason (killed, crashed) has its pages
in `:p` put back in the queue at once, and the others crawl on; one that lost Redis or the
disk ends the instance with its exit code, as the instance would have. A child whose parent
is gone (its pipe closed) stops as if forced, handing its pages back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

from archiver_crawler import journal
from archiver_crawler.config import CrawlConfig
from archiver_crawler.crawl import TASK_GRACE, Crawler
from archiver_crawler.errors import CrawlerError, ExitCode, OutOfSpace, RedisUnavailable
from archiver_crawler.stop import OUTCOMES, StopReason

logger = logging.getLogger(__name__)

# After a forced stop a child gets TASK_GRACE to end its pages, and this long on top to
# write its files and exit; then it is killed (its pages are requeued like a dead child's).
EXIT_GRACE = 10.0
WATCH_INTERVAL = 0.25
CHILD_IDLE_POLL = 0.05
# A child's exit code that is the instance's trouble, not the child's: the instance exits so.
FATAL = {ExitCode.OUT_OF_SPACE: OutOfSpace, ExitCode.REDIS_UNAVAILABLE: RedisUnavailable,
         ExitCode.INVALID_CONFIG: CrawlerError}


def shares(workers: int, processes: int) -> list[int]:
    """`workers` split over `processes` (each at least one; config caps processes)."""
    return [workers // processes + (1 if k < workers % processes else 0)
            for k in range(processes)]


@dataclass
class Child:
    """The parent's view of one child process."""

    index: int
    pid: int
    owner: str
    down: int  # pipe to the child
    up: int  # pipe from the child
    buffer: bytes = b""
    status: str = "starting"
    size: int = 0
    page_bytes: int = 0
    crawled: int = 0
    final: str | None = None
    exit_code: int | None = None  # once reaped
    handled: bool = False

    @property
    def alive(self) -> bool:
        return self.exit_code is None


def fork_children(config: CrawlConfig, run_child: Callable[[ParentLink], int]) -> list[Child]:
    """Fork `config.processes` children, each waiting for `go` and then running
    `run_child(link)` to its exit code; in a child this never returns."""
    session = uuid.uuid4().hex[:8]
    children: list[Child] = []
    for k, workers in enumerate(shares(config.workers, config.processes)):
        down_r, down_w = os.pipe()
        up_r, up_w = os.pipe()
        owner = f"{config.instance_id}#{session}-{k}"
        pid = os.fork()
        if pid == 0:
            code = ExitCode.GENERIC_ERROR
            try:
                for fd in [down_w, up_r, *(fd for c in children for fd in (c.down, c.up))]:
                    os.close(fd)
                link = ParentLink(k, owner, child_config(config, workers), down_r, up_w,
                                  size_limited=config.size_limit > 0)
                code = run_child(link) if link.wait_for_go() else ExitCode.SUCCESS
            finally:
                logging.shutdown()
                os._exit(int(code))
        os.close(down_r)
        os.close(up_w)
        os.set_blocking(up_r, False)
        children.append(Child(k, pid, owner, down_w, up_r))
    return children


def child_config(config: CrawlConfig, workers: int) -> CrawlConfig:
    """A child's share: its workers; the size limit is the parent's to judge (over all
    children); a host delay is kept per instance on average (each child spaces its own
    requests to a host N times as far apart)."""
    return replace(config, workers=workers, size_limit=0, health_check_port=None,
                   host_delay=config.host_delay * config.processes)


def end_children(children: list[Child]) -> None:
    """Close the pipes (a child still waiting for `go` exits, a crawling one stops as if
    forced) and reap every child, killing those still there after the grace."""
    for child in children:
        for fd in (child.down, child.up):
            with contextlib.suppress(OSError):
                os.close(fd)
    deadline = time.monotonic() + TASK_GRACE + EXIT_GRACE
    for child in children:
        while child.alive:
            reap(child)
            if child.alive and time.monotonic() >= deadline:
                logger.error("process %d (pid %d) did not exit; killing it", child.index,
                             child.pid)
                os.kill(child.pid, signal.SIGKILL)
                deadline = float("inf")
            elif child.alive:
                time.sleep(0.05)


def reap(child: Child) -> None:
    try:
        pid, status = os.waitpid(child.pid, os.WNOHANG)
    except ChildProcessError:
        child.exit_code = ExitCode.GENERIC_ERROR
        return
    if pid:
        child.exit_code = os.waitstatus_to_exitcode(status)


class ParentLink:
    """A child's end of the pipes: what the parent says replaces the instance's Controls
    (stop reasons acted on as they arrive, control messages applied by `check`, polled by
    the crawl's control loop), and the child reports back with `send`."""

    def __init__(self, index: int, owner: str, config: CrawlConfig, down: int, up: int,
                 size_limited: bool = False):
        self.index, self.owner, self.config = index, owner, config
        self.down, self.up = down, up
        # With a size limit the parent hears of every write, not only every control tick:
        # it stops the processes on their sum, and a tick's worth of pages is too many.
        self.size_limited = size_limited
        self.crawler: ChildCrawler | None = None
        self._buffer = b""
        self._messages: list[dict] = []
        self._reported: tuple | None = None
        self._parent_gone = False

    def wait_for_go(self) -> bool:
        """Block until the parent says `go` (True) or closes the pipe (False)."""
        while b"\n" not in self._buffer:
            data = os.read(self.down, 4096)
            if not data:
                return False
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        os.set_blocking(self.down, False)
        return json.loads(line).get("go") is True

    def send(self, message: dict) -> None:
        # OSError: the parent is gone, and the closed pipe down stops this child.
        with contextlib.suppress(OSError):
            os.write(self.up, (json.dumps(message) + "\n").encode())

    def readable(self) -> None:
        """The pipe down has data (the event loop's reader callback)."""
        try:
            data = os.read(self.down, 65536)
        except BlockingIOError:
            return
        if not data:
            asyncio.get_running_loop().remove_reader(self.down)
            if not self._parent_gone:
                self._parent_gone = True
                logger.error("the instance's parent process is gone; stopping")
                self.crawler.request_stop(StopReason.FORCED)
            return
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            message = json.loads(line)
            if "stop" in message:
                self.crawler.request_stop(StopReason(message["stop"]))
            elif "message" in message:
                self._messages.append(message["message"])

    async def check(self, check_disk: bool = False) -> None:
        while self._messages:
            await self.crawler.frontier.apply_message(self._messages.pop(0))
        self.report_size()

    def report_size(self) -> None:
        output = self.crawler.output
        size = (output.warc.size if output.warc else 0) + output.page_bytes
        report = (size, output.page_bytes, self.crawler.pages.pages_crawled)
        if report != self._reported:
            self._reported = report
            self.send({"size": size, "pageBytes": output.page_bytes, "crawled": report[2]})


class ChildCrawler(Crawler):
    """One process's crawl: workers only; the instance's steps around them are the parent's."""

    def __init__(self, *args, link: ParentLink, **kwargs):
        super().__init__(*args, **kwargs)
        self.link = link
        link.crawler = self
        self.controls = link
        if link.size_limited:
            self.pages.on_size = lambda size: link.report_size()
        # The links a sibling queues wake no worker here (`work_added` is per process): an
        # idle worker looks again sooner, or at the start one process would crawl alone.
        self.idle_poll = CHILD_IDLE_POLL

    async def _run(self) -> ExitCode:
        loop = asyncio.get_running_loop()
        loop.add_reader(self.link.down, self.link.readable)
        try:
            await self._load_dedup()
            if self.stop_reason is not None:
                return await self.finish(self.stop_reason)
            return await self._crawl()
        finally:
            loop.remove_reader(self.link.down)

    async def report_status(self, status: str) -> None:
        self.link.send({"status": status})

    async def finish(self, reason: StopReason) -> ExitCode:
        self._finishing = True
        handed_back = await self.state.requeue_own()
        if handed_back:
            logger.info("process %d handed back %d unfinished page(s)", self.link.index,
                        handed_back)
        self.output.close()
        self.link.report_size()
        self.link.send({"final": reason.value})
        return OUTCOMES[reason][2]


class Supervisor(Crawler):
    """The instance around its children: Crawler's steps before and after the workers, with
    the children in the workers' place."""

    def __init__(self, *args, children: list[Child], **kwargs):
        super().__init__(*args, **kwargs)
        self.children = children
        self.controls.apply_message = self._forward_message
        self._go = False
        self._changed = asyncio.Event()
        self._status = "running"

    async def _load_dedup(self) -> None:
        pass  # the parent archives nothing

    def pages_crawled(self) -> int:
        return sum(c.crawled for c in self.children)

    def request_stop(self, reason: StopReason) -> None:
        before = self.stop_reason
        super().request_stop(reason)
        if self.stop_reason is reason and before is not reason:
            self._send_all({"stop": reason.value})

    def _abort(self, exc: BaseException) -> None:
        super()._abort(exc)
        self._send_all({"stop": StopReason.FORCED.value})

    async def _forward_message(self, message: dict) -> None:
        # Every child applies it (and drops the queued URLs it matches): one that has not
        # yet must not queue what another has just dropped.
        self._send_all({"message": message})

    def _send_all(self, message: dict) -> None:
        if not self._go:
            return
        line = (json.dumps(message) + "\n").encode()
        for child in self.children:
            if child.alive:
                with contextlib.suppress(OSError):  # it is exiting; the watch loop reaps it
                    os.write(child.down, line)

    async def _run_workers(self) -> None:
        loop = asyncio.get_running_loop()
        self._go = True
        self._send_all({"go": True})
        if self.stop_reason is not None:
            self._send_all({"stop": self.stop_reason.value})
        for child in self.children:
            loop.add_reader(child.up, self._read, child)
        control = asyncio.create_task(self._control_loop())
        try:
            await self._watch()
        finally:
            self._workers_done = True
            for child in self.children:
                loop.remove_reader(child.up)
            control.cancel()
            await asyncio.wait([control], timeout=TASK_GRACE)

    def _read(self, child: Child) -> None:
        try:
            data = os.read(child.up, 65536)
        except BlockingIOError:
            return
        if not data:
            asyncio.get_running_loop().remove_reader(child.up)
            self._changed.set()
            return
        child.buffer += data
        *lines, child.buffer = child.buffer.split(b"\n")
        for line in lines:
            self._on_report(child, json.loads(line))

    def _on_report(self, child: Child, report: dict) -> None:
        if "status" in report:
            child.status = report["status"]
        if "size" in report:
            child.size, child.page_bytes = int(report["size"]), int(report["pageBytes"])
            child.crawled = int(report["crawled"])
            self.output.page_bytes = sum(c.page_bytes for c in self.children)
            total = sum(c.size for c in self.children)
            if self.config.size_limit and total >= self.config.size_limit:
                self.request_stop(StopReason.SIZE_LIMIT)
        if "final" in report:
            child.final = report["final"]
        self._changed.set()

    async def _watch(self) -> None:
        """Until every child has exited (killed if it outlives a forced stop's grace)."""
        while any(c.alive or not c.handled for c in self.children):
            self._changed.clear()
            for child in self.children:
                if child.alive:
                    reap(child)
                if not child.alive and not child.handled:
                    child.handled = True
                    await self._exited(child)
            await self._report_status()
            if self._cancel_deadline is not None and \
                    time.monotonic() >= self._cancel_deadline + EXIT_GRACE:
                for child in self.children:
                    if child.alive:
                        logger.error("process %d still running after a forced stop; killing "
                                     "it", child.index)
                        os.kill(child.pid, signal.SIGKILL)
            try:
                async with asyncio.timeout(WATCH_INTERVAL):
                    await self._changed.wait()
            except TimeoutError:
                pass
        self._read_all()
        if self.stop_reason is None and self.fatal is None:
            self._adopt_outcome()

    def _read_all(self) -> None:
        for child in self.children:
            with contextlib.suppress(OSError):
                self._read(child)

    async def _exited(self, child: Child) -> None:
        self._read_all()
        if child.final is not None and child.exit_code == OUTCOMES[StopReason(child.final)][2]:
            return
        # Its pages in `:p` would keep every other process waiting: back in the queue now,
        # except those archived and journaled (recorded by the next session).
        requeued = await self.state.requeue_process(
            child.owner, journal.journaled_urls(self.config.collection_dir))
        logger.error("process %d (pid %d) ended with exit code %s before finishing; %d page(s) "
                     "it held requeued", child.index, child.pid, child.exit_code, requeued)
        fatal = FATAL.get(child.exit_code)
        if fatal is not None and self.fatal is None:
            self._abort(fatal(f"process {child.index} exited with code {child.exit_code}"))

    def _adopt_outcome(self) -> None:
        """Every child ended on its own: the crawl finished, unless none of them got there."""
        finals = [c.final for c in self.children if c.final is not None]
        if StopReason.FINISHED.value in finals:
            return
        if finals:
            self.request_stop(StopReason(finals[0]))
            return
        self._abort(CrawlerError("every process of this instance ended before finishing"))

    async def _report_status(self) -> None:
        live = [c for c in self.children if c.alive and c.final is None]
        status = ("pending-wait" if live and all(c.status == "pending-wait" for c in live)
                  else "running")
        if status != self._status and not self._finishing:
            self._status = status
            await self.state.set_status(status)

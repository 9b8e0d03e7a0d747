"""SIGTERM ends a busy daemon holding many crawls (issue 40): its handler used to send a
nudge into the daemon's own wake socket with a blocking send; a daemon inside a long tick
does not drain that socket, its queue (10 datagrams by default on Linux) fills, and the
handler, run on the loop's own thread, waited for good. Only SIGKILL ended it.

A real `manage.py run --daemon` (SQLite, embedded Redis, the local launcher) holds HELD
crawls whose crawler only sleeps, while the test keeps its wake socket full, as a flood of
`archiver add` and admin actions would; then SIGTERM. The bound is a hang guard, not a speed.
"""

from __future__ import annotations

import contextlib
import errno
import signal
import socket
import subprocess
import sys
import threading

import pytest

from tests.installation import ROOT, Installation
from tests.runner.helpers import script
from tests.waiting import HANG, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
# The 300. Each crawl is a Python wrapper and a `sleep`: the daemon's start of them all,
# not their exit, is what takes time on a loaded machine.
HELD = 300

QUEUE = """
from crawls.config import CrawlConfig
from crawls.models import Crawl, Org
org = Org.objects.get_or_create(slug="default")[0]
config = CrawlConfig(seeds=["http://127.0.0.1:9/"], scope_type="page", depth=0, page_limit=1)
for _ in range({n}):
    Crawl.create(org, config)
"""


@pytest.fixture
def installation(data_dir, tmp_path):
    inst = Installation(data_dir)
    inst.env.update(ARCHIVER_MAX_CONCURRENT_CRAWLS=str(HELD), ARCHIVER_LOG_LEVEL="INFO",
                    ARCHIVER_LOCAL_CRAWLER_COMMAND=" ".join(
                        script(tmp_path / "sleeping-crawler", "exec sleep 3600\n")))
    inst.migrate()
    try:
        yield inst
    finally:
        inst.clean_up()  # the sleeping crawlers and the embedded Redis too


class WakeFlood:
    """Keeps the daemon's wake socket full from a thread: whenever the loop drains it, the
    queue fills again at once, so a signal mostly arrives while it is full."""

    def __init__(self, path):
        self.path = str(path)
        self.stop = threading.Event()
        self.full = 0  # sends refused because the queue was full
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            while not self.stop.is_set():
                try:
                    sock.sendto(b"!", self.path)
                except BlockingIOError:
                    self.full += 1
                    self.stop.wait(0.001)
                except OSError as exc:  # the daemon gone: its socket unlinked
                    if exc.errno not in (errno.ENOENT, errno.ECONNREFUSED):
                        raise
                    return

    def __enter__(self) -> WakeFlood:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=HANG)


def held(installation: Installation) -> int:
    ((n,),) = installation.query("SELECT count(*) FROM crawls_crawl WHERE status = 'running'")
    return n


def test_sigterm_ends_a_daemon_holding_300_crawls_while_its_wake_socket_is_full(installation):
    daemon = installation.start_daemon()
    log_path = installation.data_dir / "daemon-0.log"
    wait_for(lambda: (installation.data_dir / "run" / "wake.sock").exists() or daemon.poll() is not None,
             HANG, 0.1, "the daemon's wake socket")
    subprocess.run([sys.executable, "manage.py", "shell", "-c", QUEUE.format(n=HELD)], cwd=ROOT,
                   env=installation.env, check=True, capture_output=True, timeout=HANG)
    # Starting 300 crawlers on a loaded 2-core machine takes minutes; that is not judged.
    wait_for(lambda: held(installation) >= HELD or daemon.poll() is not None, 20 * HANG, 0.5,
             f"{HELD} crawls running", explain=lambda: f"{held(installation)} running\n"
             + log_path.read_text()[-3000:])
    assert daemon.poll() is None, log_path.read_text()[-3000:]

    with WakeFlood(installation.data_dir / "run" / "wake.sock") as flood:
        wait_for(lambda: flood.full >= 10, HANG, 0.01, "the wake socket full")
        daemon.send_signal(signal.SIGTERM)
        code = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = daemon.wait(timeout=HANG)
    text = log_path.read_text()
    assert code is not None, f"still running {HANG:g} s after SIGTERM\n{text[-3000:]}"
    assert code == 0, text[-3000:]
    assert "SIGTERM: finishing this tick" in text
    assert "Traceback" not in text, text[-3000:]
    # Handed back, not ended: the crawls keep running for the next runner to adopt.
    assert held(installation) == HELD

"""A second signal exits at once (docs/runner.md, "Stopping"): a real daemon run with
--interrupt-crawls, whose first SIGTERM pauses its crawl before exiting, and whose crawl
cannot pause soon (every page takes 20 s): the second SIGTERM ends it without that wait."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.chaos.harness import ROOT, Trial, chaos_site
from tests.waiting import HANG, wait_for

pytestmark = pytest.mark.slow
SLOW_PAGE = 20.0  # seconds a page takes once the crawl runs: its pause waits for the pages in flight


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_second_signal_exits_without_waiting_for_the_crawls_to_pause(chaos_root, signum):
    with chaos_site(trees=1, pages=30, delay=0.2) as site, Trial(chaos_root, webhooks=False) as trial:
        data_dir = trial.add_data_dir()
        trial.migrate()
        log_path = chaos_root / "logs" / "interrupting-daemon.log"
        with open(log_path, "w") as log:
            daemon = subprocess.Popen(
                [sys.executable, "manage.py", "run", "--daemon", "--no-live", "--interrupt-crawls"],
                cwd=ROOT, env=data_dir.env, stdout=log, stderr=subprocess.STDOUT)
        data_dir.daemons.append(daemon)  # stopped by the trial whatever happens
        trial.logs.append(log_path)
        trial.daemon_ready(data_dir)
        crawl_id = trial.add(data_dir, site.tree_url(0))
        trial.wait_crawl(crawl_id, lambda c: c["pages_done"] >= 2, timeout=60)
        site.set_delay(SLOW_PAGE)

        daemon.send_signal(signum)
        wait_for(lambda: "pausing 1 crawl(s) before exiting" in log_path.read_text(), HANG, 0.1,
                 "the first signal's graceful stop")
        daemon.send_signal(signum)
        try:
            code = daemon.wait(timeout=HANG)
        except subprocess.TimeoutExpired:
            code = None
        status = trial.crawl(crawl_id)["status"]
        text = log_path.read_text()
    assert code is not None, f"still running {HANG:g} s after the second signal\n{text[-3000:]}"
    assert f"second {signum.name}: exiting now" in text, text[-3000:]
    # The graceful stop was cut short: its crawl had not paused yet (it keeps its pages).
    assert status != "paused", status
    assert "Traceback" not in text, text[-3000:]

"""Threads beside the runner's loop that poll a database queue: the webhook dispatcher's
and the quality review's (runner/webhooks.py, runner/qa_queue.py).

Each thread runs one pass at a time, so stop() is seen between passes and each claim reads
the clock afresh; a pass that found nothing waits the poll interval, or until wake(). A
pass that raises is logged and tried again shortly: a dead thread would do nothing more,
and what it held is claimed again when its lease ends. The database being away is waited
out with back-off and logged once for all the lanes (runner/outage.py).
"""

from __future__ import annotations

import logging
import threading

from django.db import connection

from runner.outage import CONNECTION_ERRORS, Outage, fresh_connection

log = logging.getLogger(__name__)


class PollingThreads:
    """`pass_once(lane)` in one thread per lane (a thread name and what its passes get)."""

    what = "pass"  # as the log names a failed pass

    def __init__(self, lanes: list[tuple[str, object]], poll_interval: float):
        self.lanes, self.poll_interval = lanes, poll_interval
        self.stop_event = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self.outage = Outage(self.what, first_wait=poll_interval)  # one for all the lanes

    def pass_once(self, lane) -> bool:
        """One pass; whether it found work (then the next pass starts at once)."""
        raise NotImplementedError

    def start(self):
        for name, lane in self.lanes:
            thread = threading.Thread(target=self._run, args=(lane,), daemon=True, name=name)
            thread.start()
            self._threads.append(thread)
        return self

    def wake(self) -> None:
        self._wake.set()

    def ask_to_stop(self) -> None:
        """Let the threads end after their pass in flight, without waiting for them."""
        self.stop_event.set()
        self._wake.set()

    def stop(self, timeout: float | None = None) -> None:
        """Ask the threads to finish; a pass in flight ends first (within its own deadline)."""
        self.ask_to_stop()
        for thread in self._threads:
            thread.join(timeout)

    def _run(self, lane) -> None:
        try:
            while not self.stop_event.is_set():
                fresh_connection()
                try:
                    found = self.pass_once(lane)
                    self.outage.recovered()
                    wait = 0.0 if found else self.poll_interval
                except CONNECTION_ERRORS as exc:
                    wait = self.outage.failed(exc)
                except Exception:  # noqa: BLE001 - logged; a dead thread would do nothing more
                    log.exception("%s failed; trying again shortly", self.what)
                    wait = self.poll_interval
                if wait:
                    self._wake.wait(wait)
                    self._wake.clear()
        finally:
            connection.close()  # this thread's own connection

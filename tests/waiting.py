"""Waiting for a state, the one way the suite waits: poll a predicate until a deadline.

Deadlines are generous (what a machine three times slower than a developer's laptop needs,
with Chromium, Docker or gunicorn starting): a passing test never waits for them, a
failing one reports what it waited for.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# Long enough for a process, a browser or a server to start on a busy machine.
DEFAULT_TIMEOUT = 60.0
# The bound of a test that checks a call ends rather than hangs (a FIFO opened, /dev/zero
# read, an engine or a receiver that never answers): far above what the call takes on a
# busy machine, so it judges no speed. What the call did (its refusal, requests, bytes
# read) is what such a test asserts.
HANG = 60.0


def wait_for(predicate: Callable[[], object], timeout: float = DEFAULT_TIMEOUT, pause: float = 0.05,
             what: str = "condition") -> object:
    """Poll until `predicate()` is truthy and return its value; AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout:g} s")
        time.sleep(pause)

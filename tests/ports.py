"""Ports for the servers a test starts, and ports where nothing listens."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now. Another process may take it before the server binds it:
    callers that cannot retry start the server at once."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextmanager
def refused_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A port where nothing listens, for as long as the block runs. A port merely free
    (free_port) can be handed to the next server the test starts, even its own site's;
    this one stays bound, without listening, so a connection to it is refused."""
    with socket.socket() as s:
        s.bind((host, 0))
        yield s.getsockname()[1]

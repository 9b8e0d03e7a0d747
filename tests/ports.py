"""A free TCP port for a server a test starts."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now. Another process may take it before the server binds it:
    callers that cannot retry start the server at once."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]

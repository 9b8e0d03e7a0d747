"""Wake a local runner at once after a change it should act on (add, pause, resume...).

The runner listens on a Unix datagram socket in the data dir; a nudge is one byte sent
without waiting. No runner listening is fine: the change waits for the next poll.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

from archiver import conf

log = logging.getLogger(__name__)


def nudge(path: Path | None = None) -> bool:
    """Tell a local runner to look for work now; True if one was listening.

    Never blocks: the daemon's own signal handler wakes its loop through here, and a full
    queue that a busy loop has not drained already holds a nudge."""
    path = path or conf.get().wake_socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        try:
            sock.sendto(b"!", str(path))
        except (FileNotFoundError, ConnectionRefusedError, BlockingIOError):
            return False
        except OSError as exc:
            log.debug("could not nudge the runner at %s: %s", path, exc)
            return False
    return True

"""No replay capability in a log: its signature is cut from every line the replay server
writes (gunicorn's access log, Django's request warnings). A capability is a bearer secret
for an hour (crawls/capability.py); the crawl id and expiry stay, so a line still says which
crawl was read."""

from __future__ import annotations

import logging
import re

from gunicorn.glogging import Logger

SIGNATURE = re.compile(r"(\.\d{1,12}\.)[A-Za-z0-9_-]{43}")


def redacted(text: str) -> str:
    return SIGNATURE.sub(r"\1<signature>", text)


class AccessLogger(Logger):
    """gunicorn's logger (`--logger-class archiver.replay_logging.AccessLogger`)."""

    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        return {key: redacted(value) if isinstance(value, str) else value for key, value in atoms.items()}


class WithoutCapabilities(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redacted(record.getMessage()), None
        return True

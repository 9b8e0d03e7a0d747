"""No replay capability and no public link in a log: a capability's signature, and a
collection's public link secret whole, are cut from every line the admin's and the replay
server's gunicorns and Django write (access logs, Django's request warnings). A capability
is a bearer secret for an hour (crawls/capability.py); the crawl id and expiry stay, so a
line still says which crawl was read. A public link is one until revoked
(crawls/models/collections.py); only its `pub_` stays."""

from __future__ import annotations

import logging
import re

from gunicorn.glogging import Logger

SIGNATURE = re.compile(r"(\.\d{1,12}\.)[A-Za-z0-9_-]{43}")
# Any length: a link mistyped or cut short still holds part of the secret.
PUBLIC_LINK = re.compile(r"(pub_)[A-Za-z0-9_-]+")


def redacted(text: str) -> str:
    return PUBLIC_LINK.sub(r"\1<secret>", SIGNATURE.sub(r"\1<signature>", text))


class AccessLogger(Logger):
    """gunicorn's logger (`--logger-class archiver.replay_logging.AccessLogger`)."""

    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        return {key: redacted(value) if isinstance(value, str) else value for key, value in atoms.items()}


class WithoutCapabilities(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redacted(record.getMessage()), None
        return True

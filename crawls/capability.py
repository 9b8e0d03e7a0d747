"""Short-lived signed capabilities: what the replay origin accepts instead of a session.

The replay origin (archiver/replay_urls.py) has no log-in and no cookies. The admin, after
checking the staff user's right to view a crawl, mints `<crawl id>.<expiry>.<signature>`:
an HMAC-SHA256, under a key derived from the installation's secret key (data/secret_key),
of the crawl id and the expiry. It lets its holder read that crawl's archives until the
expiry, and nothing else: an archived page that reads its own frame's URL learns only what
it could already read (the archive it is part of).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re

from django.conf import settings

LIFETIME = 3600  # seconds a capability is valid: the Replay page mints a new one each time
PURPOSE = b"archiver replay capability v1"
SHAPE = re.compile(r"(?P<crawl>[A-Za-z0-9_-]{1,32})\.(?P<expires>\d{1,12})\.(?P<signature>[A-Za-z0-9_-]{43})")


class Refused(Exception):
    """The capability is malformed, forged, expired or names another crawl."""


def _key() -> bytes:
    # A key of its own, so a capability is never a valid signature of anything else Django signs.
    return hmac.new(settings.SECRET_KEY.encode(), PURPOSE, hashlib.sha256).digest()


def _signature(crawl_id: str, expires: int) -> str:
    digest = hmac.new(_key(), f"{crawl_id}.{expires}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def mint(crawl_id: str, now: float, lifetime: int = LIFETIME) -> str:
    """A capability to read `crawl_id`'s archives until now + lifetime (epoch seconds)."""
    expires = int(now) + lifetime
    return f"{crawl_id}.{expires}.{_signature(crawl_id, expires)}"


def crawl_of(capability: str, now: float) -> str:
    """The crawl id a valid capability grants; Refused otherwise."""
    match = SHAPE.fullmatch(capability)
    if match is None:
        raise Refused("not a replay capability")
    crawl_id, expires = match["crawl"], int(match["expires"])
    if not hmac.compare_digest(_signature(crawl_id, expires), match["signature"]):
        raise Refused("this replay capability is not valid")
    if expires <= now:
        raise Refused("this replay capability has expired: open Replay in the admin again")
    return crawl_id


COLLECTION = "col-"  # a collection's subject: never a crawl id, which is hexadecimal


def mint_collection(collection_pk: int, now: float, lifetime: int = LIFETIME) -> str:
    """A capability to replay one collection (its members' archives) until now + lifetime."""
    return mint(f"{COLLECTION}{collection_pk}", now, lifetime)


def collection_of(capability: str, now: float) -> int:
    """The collection a valid collection capability grants; Refused otherwise."""
    subject = crawl_of(capability, now)
    if not subject.startswith(COLLECTION) or not subject[len(COLLECTION):].isdigit():
        raise Refused("this replay capability is not for a collection")
    return int(subject[len(COLLECTION):])

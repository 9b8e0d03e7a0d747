"""Opaque cursors for keyset pagination: a page continues after the last row it showed,
so its cost does not grow with how far a client has paged (no OFFSET)."""

from __future__ import annotations

import base64
import binascii

from crawls.api.errors import invalid

MAX_CURSOR = 500


def encode(*parts: str) -> str:
    return base64.urlsafe_b64encode("\n".join(parts).encode()).decode().rstrip("=")


def decode(cursor: str, count: int) -> list[str]:
    """The `count` parts of a cursor this API gave out; 422 for anything else."""
    try:
        if len(cursor) > MAX_CURSOR:
            raise ValueError
        parts = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode().split("\n")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        parts = []
    if len(parts) != count:
        raise invalid(f"cursor {cursor[:40]!r} is not one this API gave out")
    return parts


def int_cursor(cursor: str | None) -> int | None:
    """A cursor holding one row id (pages, logs, deliveries)."""
    if cursor is None:
        return None
    (value,) = decode(cursor, 1)
    if not value.isdigit() or len(value) > 18:
        raise invalid(f"cursor {cursor[:40]!r} is not one this API gave out")
    return int(value)

"""Throw-away PostgreSQL databases for tests and benchmarks.

`fresh_database(url)` creates `archiver_<random>` on the server that `url` points at and
yields the URL of the new database; it drops it afterwards, even when the body fails.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

POSTGRES_URL_VARIABLE = "ARCHIVER_TEST_POSTGRES_URL"
SKIP_REASON = f"{POSTGRES_URL_VARIABLE} is not set: PostgreSQL tests skipped"


def server_url() -> str | None:
    return os.environ.get(POSTGRES_URL_VARIABLE) or None


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def _admin_connection(url: str):
    import psycopg

    return psycopg.connect(url, autocommit=True, connect_timeout=10)


@contextlib.contextmanager
def fresh_database(url: str) -> Iterator[str]:
    """A new, empty database next to the one `url` names; dropped on the way out."""
    from psycopg import sql

    name = f"archiver_{secrets.token_hex(6)}"
    with _admin_connection(url) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_database(url, name)
    finally:
        with _admin_connection(url) as admin:
            # FORCE ends sessions a crashed worker may have left behind (PostgreSQL 13+).
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def skip_commit_flush(url: str) -> None:
    """Let commits in the database `url` names return before their WAL reaches the disk.

    For tests only: locking and visibility, which is what they check, are unchanged; what
    is lost is durability across a server crash, and with it the wait for the disk.
    """
    from psycopg import sql

    name = urlsplit(url).path.lstrip("/")
    with _admin_connection(url) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(sql.Identifier(name)))

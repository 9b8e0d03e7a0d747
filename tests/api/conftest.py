"""The API under the real WSGI server: gunicorn on a free 127.0.0.1 port, its own data dir.

The server's database is a SQLite file in that data dir. Tests set up rows with the ORM
against the same file (`api_db` points this process's default connection at it for the
test, then empties the tables the test may have filled) and talk to the server only
through httpx, as a program would.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.api.servers import (
    database_file,
    empty_tables,
    gunicorn,
)


@pytest.fixture(scope="session")
def api_server():
    data_dir = Path(tempfile.mkdtemp(prefix="aapi-", dir="/tmp"))
    try:
        with gunicorn(data_dir) as server:
            yield server
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def api_db(api_server, django_db_blocker):
    """The ORM on the server's database, emptied after the test."""
    with django_db_blocker.unblock(), database_file(api_server.database):
        try:
            yield api_server
        finally:
            empty_tables()


@pytest.fixture
def make_user(api_db):
    from django.contrib.auth.models import Permission, User

    def make(name: str = "alice", *codenames: str, staff: bool = False, superuser: bool = False,
             password: str | None = None) -> User:
        user = User.objects.create_user(name, password=password, is_staff=staff or superuser,
                                        is_superuser=superuser)
        if codenames:
            user.user_permissions.set(Permission.objects.filter(content_type__app_label="crawls",
                                                                codename__in=codenames))
        return user

    return make


@pytest.fixture
def make_token(make_user):
    from crawls.models import ApiToken, Org

    def make(user=None, *, org: str | None = None, read_only: bool = False, rate_limit: int = 100_000) -> str:
        user = user or make_user(f"admin{ApiToken.objects.count()}", superuser=True)
        scope = Org.objects.get(slug=org) if org else None
        _, secret = ApiToken.issue(user, "test", org=scope, read_only=read_only, rate_limit=rate_limit)
        return secret

    return make


@pytest.fixture
def client(api_server, make_token):
    """A client with a read-write token of a superuser (every permission, every org)."""
    with api_server.client(make_token()) as http:
        yield http


@pytest.fixture
def make_crawl(api_db):
    from crawls.config import CrawlConfig
    from crawls.models import Crawl, Org

    def make(status: str = "queued", url: str = "https://example.com/", org: str = "default",
             tags=(), **fields) -> Crawl:
        crawl = Crawl.create(Org.objects.get(slug=org), CrawlConfig(seeds=[url]), tags=tags)
        if status != "queued" or fields:
            Crawl.objects.filter(pk=crawl.pk).update(status=status, **fields)
        crawl.refresh_from_db()
        return crawl

    return make


@pytest.fixture
def make_org(api_db):
    from crawls.models import Org

    def make(slug: str, **fields) -> Org:
        return Org.objects.create(slug=slug, name=slug.title(), **fields)

    return make

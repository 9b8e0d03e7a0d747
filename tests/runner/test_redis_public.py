"""Redis for crawlers on other hosts: the embedded server bound to other addresses
(ARCHIVER_REDIS_BIND) and the address crawlers are given (ARCHIVER_REDIS_PUBLIC_URL).

127.0.0.2 and 127.0.0.3 stand for a host's other addresses: Linux routes all of 127/8 to
the loopback interface, so binding them shows what a LAN address would, with no traffic
leaving this machine.
"""

from __future__ import annotations

import pytest
import redis
from pydantic import ValidationError

from archiver.conf import Settings, from_environ
from archiver.errors import ConfigError
from crawls.lease import db_now
from crawls.models import CrawlStatus
from runner.progress import ProgressStore
from runner.redis_server import EmbeddedRedis, RedisEndpoint, for_crawlers
from tests.runner.helpers import is_final
from tests.sitegen import serve_site
from tests.waiting import drive

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("field", "value", "message"), [
    ("redis_bind", "localhost", "'localhost' is not an IP address"),
    ("redis_bind", " , ", "names no address"),
    ("redis_public_url", "http://10.0.0.1:6379", "must be redis://HOST[:PORT]"),
    ("redis_public_url", "redis://user:secret@10.0.0.1:6379", "must not hold credentials"),
    ("redis_public_url", "redis://10.0.0.1:6379/3", "must not name a database"),
    ("redis_public_url", "redis://10.0.0.1:99999", "Port out of range"),
])
def test_bad_redis_addresses_are_refused_with_a_reason(data_dir, field, value, message):
    with pytest.raises(ValidationError) as raised:
        Settings(data_dir=data_dir, **{field: value})
    assert message in str(raised.value)


@pytest.mark.parametrize("variable", ["ARCHIVER_REDIS_PUBLIC_URL", "ARCHIVER_REDIS_URL",
                                      "ARCHIVER_DATABASE_URL"])
def test_a_refused_url_is_quoted_without_its_password(variable):
    with pytest.raises(ConfigError) as raised:
        from_environ({variable: "http://admin:s3cret@10.0.0.1:1/"})
    assert variable in str(raised.value) and "***@10.0.0.1" in str(raised.value)
    assert "s3cret" not in str(raised.value)


def test_crawlers_get_the_public_address_with_their_own_credentials():
    granted = RedisEndpoint(host="127.0.0.1", port=7000, username="crawl-ab", password="pw")

    given = for_crawlers(granted, "rediss://redis.example.internal:7001")
    assert (given.scheme, given.host, given.port) == ("rediss", "redis.example.internal", 7001)
    assert (given.username, given.password) == ("crawl-ab", "pw")
    assert for_crawlers(granted, "redis://10.1.2.3").port == 7000
    assert for_crawlers(granted, None) is granted


@pytest.fixture
def bound(embedded_redis, data_dir):
    """Start an embedded Redis listening on the addresses given."""
    def start(*bind: str) -> tuple[EmbeddedRedis, RedisEndpoint]:
        server = embedded_redis(Settings(data_dir=data_dir, redis_bind=bind))
        return server, server.ensure()

    return start


def test_the_embedded_redis_listens_only_where_it_is_told(bound):
    _, endpoint = bound("127.0.0.2")

    assert endpoint.host == "127.0.0.2" and endpoint.client().ping()
    with pytest.raises(redis.ConnectionError):
        RedisEndpoint(host="127.0.0.1", port=endpoint.port, password=endpoint.password).client().ping()


@pytest.mark.slow
def test_a_crawl_reports_through_the_public_address(bound, settings, make_crawl, make_runner):
    # The runner talks to the server on 127.0.0.1; crawlers are handed 127.0.0.3, as
    # crawlers on another node would be handed the manager's LAN address.
    _, endpoint = bound("127.0.0.1", "127.0.0.3")
    public = f"redis://127.0.0.3:{endpoint.port}"
    settings = settings.model_copy(update={"redis_public_url": public})
    store = ProgressStore(endpoint)
    try:
        with serve_site() as site:
            crawl = make_crawl(site.url, depth=1)
            runner = make_runner(settings=settings, store=store, clock=db_now)
            configs = []
            original = runner.launcher.launch

            def launch(spec):
                configs.append(spec.redis_url())
                return original(spec)

            runner.launcher.launch = launch
            drive(runner, is_final(crawl))
    finally:
        store.close()

    crawl.refresh_from_db()
    assert crawl.status == CrawlStatus.COMPLETE, crawl.error
    assert configs and all(f"@127.0.0.3:{endpoint.port}/" in url for url in configs)
    assert crawl.pages_done >= 2 and crawl.files.count() == 1

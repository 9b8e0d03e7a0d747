"""The replay origin: its capabilities, and what its own WSGI application serves (nothing
but one crawl's archives and ReplayWeb.page; no admin, no session, no cookies).

The real origin, in a real Chromium, with an archived page attacking the admin who
replays it: tests/admin/test_replay_isolation.py.
"""

from __future__ import annotations

import hashlib
import time

import pytest

from archiver import replay_settings
from archiver.conf import Settings, from_environ
from archiver.errors import ConfigError
from crawls import capability
from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlFile, CrawlStatus, Org

pytestmark = pytest.mark.django_db
NOW = 1_800_000_000


# --- capabilities --------------------------------------------------------------------------


def test_a_capability_grants_its_crawl_until_it_expires():
    token = capability.mint("c" * 32, NOW)
    assert capability.crawl_of(token, NOW + capability.LIFETIME - 1) == "c" * 32
    with pytest.raises(capability.Refused, match="expired"):
        capability.crawl_of(token, NOW + capability.LIFETIME)


@pytest.mark.parametrize("forge", [
    lambda t: "d" * 32 + t[32:],  # another crawl, the same signature
    lambda t: t.replace(f".{NOW + capability.LIFETIME}.", f".{NOW + 10 * capability.LIFETIME}."),  # later expiry
    lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # a signature one character off
    lambda t: t.rsplit(".", 1)[0],  # no signature
    lambda t: "../" + t,
    lambda t: "",
])
def test_a_forged_or_malformed_capability_is_refused(forge):
    with pytest.raises(capability.Refused):
        capability.crawl_of(forge(capability.mint("c" * 32, NOW)), NOW)


def test_a_capability_of_another_installation_is_refused(settings):
    token = capability.mint("c" * 32, NOW)
    settings.SECRET_KEY = "another installation's key " * 3
    with pytest.raises(capability.Refused, match="not valid"):
        capability.crawl_of(token, NOW)


# --- the setting ---------------------------------------------------------------------------


def test_the_replay_origin_is_a_host_of_its_own_by_default():
    settings = Settings()
    assert (settings.replay_url, settings.replay_host, settings.replay_listen) == (
        "http://127.0.0.2:8090", "127.0.0.2", "127.0.0.2:8090")


def test_a_deployment_names_its_replay_host_and_bind_address():
    settings = from_environ({"ARCHIVER_REPLAY_URL": "https://Replay.Example.org/",
                             "ARCHIVER_REPLAY_BIND": "127.0.0.1:8090"})
    assert (settings.replay_url, settings.replay_listen) == ("https://replay.example.org", "127.0.0.1:8090")


@pytest.mark.parametrize(("variable", "value"), [
    ("ARCHIVER_REPLAY_URL", "ftp://127.0.0.2/"), ("ARCHIVER_REPLAY_URL", "http://127.0.0.2:8090/replay"),
    ("ARCHIVER_REPLAY_URL", "http://user:pw@127.0.0.2/"), ("ARCHIVER_REPLAY_URL", "http://127.0.0.2:99999"),
    ("ARCHIVER_REPLAY_BIND", "127.0.0.2"), ("ARCHIVER_REPLAY_BIND", "127.0.0.2:0"),
])
def test_a_bad_replay_setting_is_refused_naming_it(variable, value):
    with pytest.raises(ConfigError, match=variable):
        from_environ({variable: value})


def test_the_admin_never_answers_to_the_replay_host_name(settings):
    from django.conf import settings as django_settings

    assert "127.0.0.2" not in django_settings.ALLOWED_HOSTS
    assert replay_settings.ALLOWED_HOSTS == ["127.0.0.2"]


def test_the_admin_serves_no_file_of_replayweb_page():
    from django.contrib.staticfiles import finders

    assert finders.find("crawls/replay/sw.js") is None and finders.find("crawls/replay/ui.js") is None


# --- the replay application ----------------------------------------------------------------


@pytest.fixture
def replay_client(settings, client):
    """The test client through the replay application's URLconf and middleware."""
    settings.ROOT_URLCONF = replay_settings.ROOT_URLCONF
    for name in ("MIDDLEWARE", "SECURE_REFERRER_POLICY"):
        setattr(settings, name, getattr(replay_settings, name))
    return client


@pytest.fixture
def archived(conf_data_dir):
    """A complete crawl with two WACZ files on disk; returns (crawl, files, bodies)."""
    org = Org.objects.get_or_create(slug="default", defaults={"name": "Default"})[0]
    crawl = Crawl.create(org, CrawlConfig(seeds=["https://example.com/"]))
    Crawl.objects.filter(pk=crawl.pk).update(status=CrawlStatus.COMPLETE)
    files, bodies = [], []
    for n in range(2):
        body = bytes([n]) * 1000
        relative = f"archives/{crawl.id}/session-{n}.wacz"
        (conf_data_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        (conf_data_dir / relative).write_bytes(body)
        files.append(CrawlFile.objects.create(crawl=crawl, path=relative, size=1000,
                                              sha256=hashlib.sha256(body).hexdigest()))
        bodies.append(body)
    return crawl, files, bodies


def test_a_capability_opens_its_crawls_replay_package_and_ranges(replay_client, archived):
    crawl, files, bodies = archived
    token = capability.mint(crawl.id, time.time())
    page = replay_client.get(f"/c/{token}/", {"url": "https://example.com/a"})
    html = page.content.decode()
    assert f'data-source="http://127.0.0.2:8090/c/{token}/replay.json"' in html
    assert 'data-replaybase="/replay/"' in html and 'data-url="https://example.com/a"' in html
    # the player starts once its worker is active, or says why within 5 s (docs/admin.md)
    assert '<script src="/replay/start.js"' in html and 'id="replay-retry"' in html
    start = replay_client.get("/replay/start.js")
    assert start.status_code == 200 and start["Content-Type"].startswith("text/javascript")
    assert b"sw.js?serveIndex=1" in b"".join(start.streaming_content)
    package = replay_client.get(f"/c/{token}/replay.json").json()
    urls = [r["path"] for r in package["resources"]]
    assert urls == [f"http://127.0.0.2:8090/c/{token}/files/{f.pk}/session-{n}.wacz"
                    for n, f in enumerate(files)]
    part = replay_client.get(urls[1].removeprefix("http://127.0.0.2:8090"), headers={"Range": "bytes=10-19"})
    assert part.status_code == 206 and b"".join(part.streaming_content) == bodies[1][10:20]
    assert part["Content-Range"] == "bytes 10-19/1000"
    part.close()


def test_a_capability_reads_no_other_crawl(replay_client, archived):
    crawl, files, bodies = archived
    other = Crawl.create(crawl.org, CrawlConfig(seeds=["https://example.com/"]))
    token = capability.mint(other.id, time.time())
    assert replay_client.get(f"/c/{token}/files/{files[0].pk}/session-0.wacz").status_code == 404


def test_an_expired_capability_reads_nothing(replay_client, archived):
    crawl, files, bodies = archived
    token = capability.mint(crawl.id, time.time() - 2 * capability.LIFETIME)
    for path in ("", "replay.json", f"files/{files[0].pk}/session-0.wacz"):
        response = replay_client.get(f"/c/{token}/{path}")
        assert response.status_code == 403 and b"expired" in response.content


def test_the_replay_origin_has_no_admin_no_api_no_session_and_sets_no_cookie(replay_client, archived,
                                                                              admin_user):
    crawl, files, bodies = archived
    replay_client.force_login(admin_user)  # a session cookie the replay origin must ignore
    for path in ("/admin/", "/admin/login/", "/api/v1/crawls", "/static/admin/css/base.css", "/"):
        assert replay_client.get(path).status_code == 404, path
    token = capability.mint(crawl.id, time.time())
    for path in (f"/c/{token}/", f"/c/{token}/replay.json", "/replay/", "/replay/sw.js"):
        response = replay_client.get(path)
        assert response.status_code == 200 and not response.cookies, path
        assert response["Referrer-Policy"] == "no-referrer"
        response.close()
    assert not any("session" in m or "auth" in m or "csrf" in m for m in replay_settings.MIDDLEWARE)
    assert "django.contrib.admin" not in replay_settings.INSTALLED_APPS


def test_the_replay_origin_serves_replayweb_pages_worker(replay_client):
    worker = replay_client.get("/replay/sw.js")
    assert worker["Content-Type"].startswith("text/javascript")
    worker.close()
    assert replay_client.get("/replay/../settings.py").status_code == 404
    assert replay_client.get("/replay/other.js").status_code == 404


@pytest.mark.parametrize("replay_url", ["http://127.0.0.1:8090", "https://admin.example.org"])
def test_a_replay_url_on_the_admins_host_name_stops_every_command(settings, monkeypatch, replay_url):
    from crawls.checks import check_replay_origin

    settings.ALLOWED_HOSTS_ASKED = ["127.0.0.1", "admin.example.org"]
    monkeypatch.setattr("archiver.conf.get", lambda: Settings(replay_url=replay_url))
    (error,) = check_replay_origin(None)
    assert error.id == "archiver.E002" and "share the admin's cookies" in error.msg


def test_no_log_line_of_the_replay_server_holds_a_capability():
    import logging

    from archiver.replay_logging import WithoutCapabilities, redacted

    token = capability.mint("c" * 32, NOW)
    line = f'"GET /c/{token}/files/1/a.wacz HTTP/1.1" 206 "http://x/replay/?source=%2Fc%2F{token}%2F"'
    assert token.rsplit(".", 1)[1] not in redacted(line) and f"/c/{'c' * 32}.{NOW + 3600}." in redacted(line)
    record = logging.LogRecord("django.request", logging.WARNING, __file__, 1, "Forbidden: %s", (f"/c/{token}/",), None)
    WithoutCapabilities().filter(record)
    assert token not in record.getMessage()

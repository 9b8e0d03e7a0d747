"""Browser options through the API: refused in CrawlConfig.parse's words by a server whose
crawler fetches over HTTP only, taken (with a profile of the org) by one set up for
browsertrix-crawler."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from django.utils import timezone

from tests.api.servers import database_file, empty_tables, gunicorn
from tests.profile_tars import good_profile

# The test server has ARCHIVER_CHROMIUM=none (tests/conftest.py): the message says so.
HTTP_ONLY = ("needs browser mode; archiver's own crawler archiver/crawler:0.1.0 fetches over HTTP only "
             "here: no Chromium was found (install the chromium package, or set ARCHIVER_CHROMIUM)")
REAL_ONLY = ("needs browsertrix-crawler; archiver's own crawler archiver/crawler:0.1.0 does not take it "
             "(set ARCHIVER_CRAWLER_IMAGE to a browsertrix-crawler image)")
OPTIONS = {"behaviors": ["autoscroll", "autoplay"], "page_load_timeout": 30, "post_load_delay": 2,
           "wait_until": "load,networkidle2", "block_ads": True, "screenshot": ["thumbnail"],
           "lang": "fr", "profile": "login"}
SEED = {"seeds": ["https://example.com/"]}


@pytest.mark.parametrize("field", sorted(OPTIONS))
def test_http_mode_refuses_each_option(api_db, client, field):
    from crawls.models import Crawl, Schedule

    words = REAL_ONLY if field in ("block_ads", "profile") else HTTP_ONLY
    body = {**SEED, "browser": False, field: OPTIONS[field]}
    response = client.post("/api/v1/crawls", json=body)
    assert response.status_code == 422
    assert response.json() == {"code": "invalid", "message": f"{field}: {words}"}
    response = client.post("/api/v1/schedules", json={**body, "cron": "0 3 * * *"})
    assert response.json() == {"code": "invalid", "message": f"{field}: {words}"}
    assert not Crawl.objects.exists() and not Schedule.objects.exists()


@pytest.fixture(scope="module")
def browser_server():
    data_dir = Path(tempfile.mkdtemp(prefix="abrw-", dir="/tmp"))
    try:
        with gunicorn(data_dir, ARCHIVER_CRAWLER_KIND="browsertrix") as server:
            yield server
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def browser_client(browser_server, django_db_blocker):
    from django.contrib.auth.models import User

    from crawls.models import ApiToken

    with django_db_blocker.unblock(), database_file(browser_server.database):
        try:
            user = User.objects.create_user("boss", is_staff=True, is_superuser=True)
            _, secret = ApiToken.issue(user, "test")
            with browser_server.client(secret) as http:
                yield http
        finally:
            empty_tables()


def test_the_browser_field_is_resolved_stored_and_shown(api_db, client):
    from crawls.models import Crawl

    # The test server has ARCHIVER_CHROMIUM=none (tests/conftest.py): auto is HTTP mode.
    auto = client.post("/api/v1/crawls", json=SEED)
    assert auto.status_code == 201 and auto.json()["config"]["browser"] is False
    off = client.post("/api/v1/crawls", json={**SEED, "browser": False})
    assert Crawl.objects.get(pk=off.json()["id"]).config["browser"] is False
    assert client.get(f"/api/v1/crawls/{off.json()['id']}").json()["config"]["browser"] is False
    on = client.post("/api/v1/crawls", json={**SEED, "browser": True})
    assert on.status_code == 422 and on.json()["message"].startswith("browser: no Chromium found")
    bad = client.post("/api/v1/crawls", json={**SEED, "browser": "sometimes"})
    assert bad.status_code == 422 and bad.json()["message"].startswith("browser: ")
    assert Crawl.objects.count() == 2


def test_a_browser_server_always_drives_a_browser(browser_client):
    response = browser_client.post("/api/v1/crawls", json=SEED)
    assert response.status_code == 201 and response.json()["config"]["browser"] is True
    refused = browser_client.post("/api/v1/crawls", json={**SEED, "browser": False})
    assert refused.status_code == 422
    assert "always drives a browser" in refused.json()["message"]


def test_a_browser_server_takes_every_option_and_checks_the_profile(browser_server, browser_client, tmp_path):
    from crawls.models import Crawl, Org
    from crawls.profiles import add_profile

    response = browser_client.post("/api/v1/crawls", json={**SEED, **OPTIONS})
    assert response.status_code == 422
    assert response.json()["message"] == ("no browser profile 'login' in org 'default' (add it with: "
                                          "archiver profile add login FILE --org default)")
    assert not Crawl.objects.exists()
    add_profile(Org.objects.get(slug="default"), "login", good_profile(tmp_path / "p.tar.gz"),
                browser_server.data_dir, timezone.now())
    response = browser_client.post("/api/v1/crawls", json={**SEED, **OPTIONS})
    assert response.status_code == 201, response.text
    crawl = Crawl.objects.get(pk=response.json()["id"])
    assert crawl.config["wait_until"] == ["load", "networkidle2"] and crawl.config["profile"] == "login"
    assert response.json()["config"] == crawl.config
    bad_lang = browser_client.post("/api/v1/crawls", json={**SEED, "lang": "de-DE"})
    assert bad_lang.json() == {"code": "invalid", "message": (
        "lang: 'de-DE' is not a two-letter ISO 639-1 language code (such as en, de or pt), the only form "
        "browsertrix-crawler takes (not de-DE or pt-BR)")}
    bad = browser_client.post("/api/v1/crawls", json={**SEED, "screenshot": "everything"})
    assert bad.json() == {"code": "invalid", "message": "screenshot: 'everything' is not a screenshot kind "
                                                        "(one of view, thumbnail, fullPage, fullPageFinal, none)"}

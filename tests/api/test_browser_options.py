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

HTTP_ONLY = ("needs a browser crawler; the configured crawler archiver/crawler:0.1.0 fetches over "
             "HTTP only (set ARCHIVER_CRAWLER_IMAGE to a browsertrix-crawler image)")
OPTIONS = {"behaviors": ["autoscroll", "autoplay"], "page_load_timeout": 30, "post_load_delay": 2,
           "wait_until": "load,networkidle2", "block_ads": True, "screenshot": ["thumbnail"],
           "lang": "fr", "profile": "login"}
SEED = {"seeds": ["https://example.com/"]}


@pytest.mark.parametrize("field", sorted(OPTIONS))
def test_an_http_only_server_refuses_each_option(api_db, client, field):
    from crawls.models import Crawl, Schedule

    response = client.post("/api/v1/crawls", json={**SEED, field: OPTIONS[field]})
    assert response.status_code == 422
    assert response.json() == {"code": "invalid", "message": f"{field}: {HTTP_ONLY}"}
    response = client.post("/api/v1/schedules", json={**SEED, "cron": "0 3 * * *", field: OPTIONS[field]})
    assert response.json() == {"code": "invalid", "message": f"{field}: {HTTP_ONLY}"}
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
                                                        "(one of view, thumbnail, fullPage, fullPageFinal)"}

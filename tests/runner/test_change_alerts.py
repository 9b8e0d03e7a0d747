"""Diffs and change alerts against real crawls: archiver's crawler as a local process crawls
a site served from a temp dir on 127.0.0.1, the site changes, a second crawl runs, and the
crawl.changed event reaches a real receiver once, signed."""

from __future__ import annotations

import functools
import http.server
import io
import json
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client, override_settings

from archiver import conf
from crawls import alerts, diffing
from crawls.config import CrawlConfig
from crawls.lease import db_now
from crawls.models import ChangeCheck, Crawl, CrawlEvent, CrawlStatus, Webhook, WebhookDelivery
from crawls.schedules import create_schedule
from runner.webhooks import deliver_due_webhooks
from tests.runner.helpers import is_final
from tests.waiting import drive
from tests.webhooks.receivers import SECRET, Receiver, allow

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PAGES = ("a", "b", "c", "d")


def page(title: str, body: str, links=()) -> str:
    anchors = "".join(f'<a href="{link}.html">{link}</a> ' for link in links)
    return (f"<html><head><title>{title}</title><style>p {{color: red}}</style>"
            f"<script>var x = 1;</script></head><body><nav>{anchors}</nav>"
            f'<main><p class="price">{body}</p></main><footer>footer {title}</footer></body></html>')


def write_site(root: Path, bodies: dict[str, str], footers: dict[str, str] | None = None) -> None:
    (root / "index.html").write_text(page("home", "welcome to the site", links=list(bodies)))
    for old in root.glob("?.html"):
        old.unlink()
    for name, body in bodies.items():
        html = page(name, body)
        if footers and name in footers:
            html = html.replace(f"footer {name}", footers[name])
        (root / f"{name}.html").write_text(html)


@contextmanager
def serve(root: Path):
    handler = functools.partial(Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


@pytest.fixture
def receiver(monkeypatch):
    server = Receiver()
    server.thread.start()
    allow(monkeypatch, server.where)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def site(tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    write_site(root, {name: f"the first text of page {name} with some words" for name in PAGES})
    with serve(root) as url:
        yield root, url


def crawl_once(make_runner, schedule, url) -> Crawl:
    crawl = Crawl.create(schedule.org, CrawlConfig(seeds=[url], depth=1), schedule=schedule, now=db_now())
    drive(make_runner(clock=db_now), is_final(crawl))
    crawl.refresh_from_db()
    assert crawl.status == CrawlStatus.COMPLETE, crawl.error
    return crawl


def watched(org, url, dedup: bool = False, **watch) -> object:
    # Without dedup unless asked: two schedules of one site in one org would otherwise store
    # the second's first crawl as revisits of the first's (tests/test_dedup.py covers that).
    schedule = create_schedule(org, "0 3 * * *", CrawlConfig(seeds=[url], depth=1, dedup=dedup),
                               now=db_now())
    alerts.set_watch(schedule, alerts.parse_watch(**watch), db_now())
    return schedule


def changed_events(crawl) -> list[CrawlEvent]:
    return list(CrawlEvent.objects.filter(crawl=crawl, name="crawl.changed"))


def test_two_crawls_of_a_changed_site_diff_and_alert_once(make_runner, org, site, receiver, settings,
                                                        monkeypatch, tmp_path):
    root, url = site
    Webhook.objects.create(url=receiver.url(), secret=SECRET, events=["crawl.changed"])
    schedule = watched(org, url, pages=True)
    first = crawl_once(make_runner, schedule, url)
    alerts.check_changes("tester", db_now(), settings=settings)
    assert changed_events(first) == []  # nothing before it: nothing to compare with

    write_site(root, {"a": "the first text of page a with some words",
                      "b": "the second text of page b, rewritten",
                      "c": "the first text of page c with other words",
                      "e": "a page that is new"})  # d removed, e added
    second = crawl_once(make_runner, schedule, url)

    result = diffing.compare(first, second, settings=settings)
    base = url.rsplit("/", 1)[0]
    assert result.added == [f"{base}/e.html"]
    assert result.removed == [f"{base}/d.html"]
    assert sorted(change.url for change in result.changed) == [
        f"{base}/b.html", f"{base}/c.html", f"{base}/index.html"]  # index: its links changed
    assert result.unchanged == [f"{base}/a.html"]
    assert all(0 < change.similarity < 1 for change in result.changed)
    assert diffing.text_similarity("same words", "same  words") == 1.0

    alerts.check_changes("tester", db_now(), settings=settings)
    (event,) = changed_events(second)
    deliver_due_webhooks("tester", db_now())
    assert [r.payload["event"] for r in receiver.received] == ["crawl.changed"]
    (got,) = receiver.received
    assert got.signed
    changes = got.payload["changes"]
    assert changes["counts"] == {"added": 1, "removed": 1, "changed": 3, "unchanged": 1}
    assert changes["previous"] == first.id and got.payload["crawl"]["id"] == second.id
    assert {c["url"] for c in changes["changed"]} == {c.url for c in result.changed}

    # Again, and from a new runner (a restart): no second event, nothing more delivered.
    ChangeCheck.objects.filter(crawl=second).update(lease_owner="")
    alerts.check_changes("another", db_now(), settings=settings)
    make_runner(clock=db_now).tick()
    deliver_due_webhooks("tester", db_now())
    assert len(changed_events(second)) == 1 and len(receiver.received) == 1
    assert WebhookDelivery.objects.filter(event__name="crawl.changed").count() == 1

    here = conf.get().model_copy(update={"data_dir": settings.data_dir})  # the CLI's settings
    monkeypatch.setattr(conf, "get", lambda: here)
    out = io.StringIO()
    call_command("diff", first.id[:8], second.id[:8], "--json", stdout=out)
    assert json.loads(out.getvalue())["counts"] == changes["counts"]
    out = io.StringIO()
    call_command("diff", first.id, second.id, stdout=out)
    assert "b.html" in out.getvalue() and "e.html" in out.getvalue()
    table = diffing.text_diff_html(first, second, f"{base}/b.html", settings=settings)
    assert "rewritten" in table and "<script>" not in table

    static = tmp_path / "static"
    static.mkdir()
    storages = {**django_settings.STORAGES, "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
    with override_settings(STATIC_ROOT=static, STORAGES=storages):  # as tests/conftest.py's admin_settings
        admin = Client()
        admin.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
        crawl_page = admin.get(f"/admin/crawls/crawl/{second.pk}/change/")
        assert "Compare with" in crawl_page.content.decode()
        shown = admin.get(f"/admin/crawls/crawl/{second.pk}/diff/",
                          {"with": first.pk, "page": f"{base}/b.html"}).content.decode()
    shown = " ".join(shown.split())
    assert "1 added, 1 removed, 3 changed, 1 unchanged" in shown
    assert "rewritten" in shown and "var x = 1" not in shown


def test_no_event_when_nothing_watched_changed_and_a_selector_ignores_the_rest(
        make_runner, org, site, receiver, settings):
    root, url = site
    Webhook.objects.create(url=receiver.url(), secret=SECRET)
    base = url.rsplit("/", 1)[0]
    by_url = watched(org, url, urls=[f"{base}/a.html"])
    by_css = watched(org, url, selector="main .price")
    crawls = {s.pk: [crawl_once(make_runner, s, url)] for s in (by_url, by_css)}

    # Only outside what either watches: the footers of every page but a.
    write_site(root, {name: f"the first text of page {name} with some words" for name in PAGES},
               footers={name: f"a new footer <b>{name}</b>" for name in PAGES if name != "a"})
    for s in (by_url, by_css):
        crawls[s.pk].append(crawl_once(make_runner, s, url))
    alerts.check_changes("tester", db_now(), settings=settings)
    alerts.check_changes("tester", db_now(), settings=settings)
    deliver_due_webhooks("tester", db_now())
    assert CrawlEvent.objects.filter(name="crawl.changed").count() == 0
    assert all(c.status == "done" and not c.changed for c in ChangeCheck.objects.all())
    unrestricted = diffing.compare(*crawls[by_css.pk], settings=settings)
    assert unrestricted.changed  # the footers did change
    css = diffing.compare(*crawls[by_css.pk], watch=by_css.watch, settings=settings)
    assert css.changed == [] and len(css.unchanged) == len(PAGES) + 1

    # Now the watched element changes on one page: the selector's schedule alerts.
    (root / "c.html").write_text(page("c", "the first text of page c with new words"))
    crawls[by_css.pk].append(crawl_once(make_runner, by_css, url))
    alerts.check_changes("tester", db_now(), settings=settings)
    (event,) = CrawlEvent.objects.filter(name="crawl.changed")
    assert event.crawl_id == crawls[by_css.pk][-1].id
    assert [c["url"] for c in event.payload["changes"]["changed"]] == [f"{base}/c.html"]
    assert 0 < event.payload["changes"]["changed"][0]["similarity"] < 1

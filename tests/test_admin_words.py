"""Plain words and screens (issue 41): what the admin says of a crawl, a schedule and a
refusal is what people say, never a Django internal or a stored state name."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.staticfiles import finders
from django.urls import reverse
from django.utils import timezone

from archiver.errors import ActionRefused
from crawls import actions
from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlStatus, Org, Process, Schedule

S = CrawlStatus

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("admin_settings")]


@pytest.fixture
def org() -> Org:
    return Org.objects.create(slug="acme", name="Acme")


def crawl_in(org, status, **config) -> Crawl:
    crawl = Crawl.create(org, CrawlConfig(seeds=["https://example.com/"], **config))
    Crawl.objects.filter(pk=crawl.pk).update(status=status)
    crawl.refresh_from_db()
    return crawl


def page_of(admin_client, crawl) -> str:
    return admin_client.get(reverse("admin:crawls_crawl_change", args=[crawl.pk])).content.decode()


def test_a_disabled_schedule_lists_no_next_runs(admin_client, org):
    schedule = Schedule.objects.create(org=org, cron="0 3 * * *", enabled=False,
                                       config=CrawlConfig(seeds=["https://example.com/"]).model_dump(mode="json"))
    page = admin_client.get(reverse("admin:crawls_schedule_change", args=[schedule.pk])).content.decode()
    assert "03:00," not in page and "none: the schedule is disabled" in page


def test_a_crawls_page_has_no_save_and_add_another(admin_client, org):
    page = page_of(admin_client, crawl_in(org, S.RUNNING))
    assert "_addanother" not in page and "Save and add another" not in page
    assert "_continue" not in page  # tags are saved by "Save"


def test_the_configuration_says_browser_mode_and_switches_in_words(admin_client, org):
    crawl = crawl_in(org, S.COMPLETE, browser=True, qa=True, dedup=True, page_load_timeout=30)
    page = page_of(admin_client, crawl)
    assert "True" not in page.split('class="config-summary"')[1].split("</dl>")[0]
    assert "<dt>crawler</dt><dd>a browser (Chromium) loads each page</dd>" in page
    assert "<dt>quality review</dt><dd>once it ends</dd>" in page
    assert "<dt>page load timeout</dt><dd>30 s</dd>" in page


@pytest.mark.parametrize(("status", "words"), [
    (S.STOPPED_BY_USER, "it was stopped on request"),
    (S.STOPPED_TIME_LIMIT, "it stopped at its time limit"),
    (S.WAITING_ORG_LIMIT, "it is waiting for its org's other crawls"),
    (S.COMPLETE, "it is complete"),
])
def test_a_refusal_names_the_state_in_plain_words(org, status, words):
    crawl = crawl_in(org, status)
    action = "resume" if status == S.WAITING_ORG_LIMIT else "pause"
    with pytest.raises(ActionRefused) as refused:
        getattr(actions, action)(crawl, timezone.now())
    assert refused.value.message == f"cannot {action} crawl {crawl.short_id}: {words}"
    assert "_" not in refused.value.message


def test_every_message_naming_a_state_says_it_in_words(org):
    from crawls import diffing
    from crawls.admin.views import carry_out

    waiting = crawl_in(org, S.WAITING_CAPACITY)
    with pytest.raises(ActionRefused) as refused:
        actions.delete(waiting)
    assert refused.value.message == f"cannot delete crawl {waiting.short_id}: it is waiting for room on the host"
    with pytest.raises(diffing.DiffRefused) as not_kept:
        diffing.check_kept(waiting)
    assert str(not_kept.value).startswith(f"crawl {waiting.short_id}: it is waiting for room on the host, ")
    said = carry_out(crawl_in(org, S.RUNNING), "pause")
    assert said.startswith("Pause: crawl ") and ": it is running (pause requested)." in said
    assert "_" not in str(not_kept.value) + said


def test_a_running_crawls_execution_time_counts_its_running_instances(admin_client, org):
    crawl = crawl_in(org, S.RUNNING)
    started = timezone.now() - dt.timedelta(seconds=95)
    for instance in (0, 1):
        Process.objects.create(crawl=crawl, instance=instance, hostname=f"crawl-x-{instance}", launcher="local",
                               status="running", started_at=started)
    page = page_of(admin_client, crawl)
    cell = re.search(r'Execution time:</label>\s*<div class="readonly">(.*?)</div>', page, re.S)[1]
    assert 'data-field="execution_time"' in cell  # live.js counts it up while the crawl runs
    assert re.sub(r"<[^>]*>", "", cell).startswith("3m1")  # two instances of 95 s: 3m10s or so, not 0s
    live = admin_client.get(reverse("admin:crawls_crawl_live"), {"id": crawl.pk}).json()
    (row,) = live["crawls"]
    assert row["execution_time"].startswith("3m1")


def test_the_compare_picker_names_each_crawl_by_seed_pages_and_state_in_words(admin_client, org):
    from crawls.models import CrawlFile

    def kept(seed: str, pages: int) -> Crawl:
        crawl = Crawl.create(org, CrawlConfig(seeds=[seed]))
        Crawl.objects.filter(pk=crawl.pk).update(status=S.STOPPED_PAGE_LIMIT, pages_done=pages)
        CrawlFile.objects.create(crawl=crawl, path=f"crawls/{crawl.pk}/a.wacz", size=1, sha256="ab" * 32)
        return crawl

    this, other = kept("https://example.com/", 5), kept("https://docs.python.org/3/" + "x" * 80, 47)
    page = admin_client.get(reverse("admin:crawls_crawl_diff", args=[this.pk])).content.decode()
    option = re.search(rf'<option value="{other.pk}">([^<]*)</option>', page)[1]
    assert option.startswith(f"{other.short_id} · ") and " · stopped · 47 pages · https://docs.python.org/3/xx" in option
    assert option.endswith("…") and "stopped_page_limit" not in option


def test_the_admin_has_a_favicon(admin_client):
    assert finders.find("crawls/favicon.svg")
    page = admin_client.get(reverse("admin:index")).content.decode()
    assert 'rel="icon"' in page and "crawls/favicon.svg" in page
    answer = admin_client.get("/favicon.ico")
    assert answer.status_code in (301, 302) and answer["Location"].endswith("crawls/favicon.svg")

"""A row whose stored JSON is damaged (a config that is a list) fails only itself in the
admin's lists: the other rows are shown, the damaged one is marked."""

from __future__ import annotations

import pytest
from django.urls import reverse

from crawls.config import CrawlConfig
from crawls.models import Crawl, Org, Schedule

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("admin_settings")]


@pytest.fixture
def org() -> Org:
    return Org.objects.create(slug="acme", name="Acme")


def test_a_crawl_with_a_list_for_config_fails_only_itself_in_the_crawl_list(admin_client, org):
    Crawl.create(org, CrawlConfig(seeds=["https://good.example/"]))
    bad = Crawl.create(org, CrawlConfig(seeds=["https://bad.example/"]))
    Crawl.objects.filter(pk=bad.pk).update(config=["not", "a", "config"], seeds={"not": "a list"})
    response = admin_client.get(reverse("admin:crawls_crawl_changelist"))
    assert response.status_code == 200
    page = response.content.decode()
    assert "good.example" in page and bad.short_id in page
    page = admin_client.get(reverse("admin:crawls_crawl_change", args=[bad.pk]))
    assert page.status_code == 200
    for name in ("crawls_crawl_pages", "crawls_crawl_watch", "crawls_crawl_watch_frames"):
        assert admin_client.get(reverse(f"admin:{name}", args=[bad.pk])).status_code == 200, name


def test_a_schedule_with_a_list_for_config_fails_only_itself_in_the_schedule_list(admin_client, org):
    Schedule.objects.create(org=org, cron="0 3 * * *",
                            config=CrawlConfig(seeds=["https://good.example/"]).model_dump(mode="json"))
    bad = Schedule.objects.create(org=org, cron="0 4 * * *", config=["broken"])
    response = admin_client.get(reverse("admin:crawls_schedule_changelist"))
    assert response.status_code == 200
    page = response.content.decode()
    assert "good.example" in page and reverse("admin:crawls_schedule_change", args=[bad.pk]) in page

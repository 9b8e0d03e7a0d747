"""Every admin form (crawls, schedules, orgs, webhooks), fed generated hostile values.

The property, for each generated form: the admin answers 200 with form errors (a refusal)
or 302 (the values were acceptable), never a server error or a traceback; a refusal leaves
the database unchanged (row counts and a hash of every row); no password put in a URL is
echoed back. Host names never reach DNS (the webhook resolver is replaced).
"""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from hypothesis import given, settings
from hypothesis import strategies as st

from crawls import ssrf
from crawls.models import Org
from tests.fuzzing import BAD_URLS, FUZZ, JUNK_TEXT, PASSWORD, fingerprint, refuse_to_resolve

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("admin_settings")]

NUMBERS = st.one_of(JUNK_TEXT, st.sampled_from(["-1", "0", "99999999999999999999", "1e3", "NaN", "٣"]))
VALUES = st.one_of(JUNK_TEXT, NUMBERS, BAD_URLS)
FORMS_FUZZ = settings(FUZZ, max_examples=min(FUZZ.max_examples, 25))  # a POST is slower than a call


@pytest.fixture
def world(admin_client, monkeypatch):
    monkeypatch.setattr(ssrf, "system_resolver", refuse_to_resolve)
    monkeypatch.setattr("crawls.wake.nudge", lambda: False)
    org = Org.objects.get_or_create(slug="default")[0]
    return admin_client, org


def post_refused_or_accepted(client, url: str, form: dict) -> None:
    before = fingerprint()
    response = client.post(url, form)
    page = response.content.decode(errors="replace")
    shown = f"{url} {str(form)[:300]} -> {response.status_code}"
    assert response.status_code in (200, 302), shown
    assert "Traceback" not in page, shown
    errors = " ".join(re.findall(r'<ul class="errorlist[^>]*>(.*?)</ul>', page, re.S))
    in_a_url = any(f":{PASSWORD}@" in str(form.get(name, "")) for name in ("seeds", "url"))
    assert not (in_a_url and PASSWORD in errors), shown  # a refusal never repeats a URL's password
    if response.status_code == 200:
        assert 'class="errorlist' in page, shown  # refused, and it says why
        assert fingerprint() == before, shown


@FORMS_FUZZ
@given(field=st.sampled_from(["seeds", "depth", "extra_hops", "page_limit", "size_limit", "time_limit",
                              "include", "exclude", "workers", "scale", "user_agent", "tags", "scope_type"]),
       value=VALUES)
def test_the_crawl_form_refuses_hostile_values_and_changes_nothing(world, field, value):
    client, org = world
    form = {"seeds": "https://example.com/", "org": org.pk, "scope_type": "prefix", "depth": "-1",
            "extra_hops": "0", "workers": "1", "scale": "1", "tags": "", field: value}
    post_refused_or_accepted(client, reverse("admin:crawls_crawl_add"), form)


@FORMS_FUZZ
@given(field=st.sampled_from(["cron", "seeds", "depth", "tags", "exclude"]), value=VALUES)
def test_the_schedule_form_refuses_hostile_values_and_changes_nothing(world, field, value):
    client, org = world
    form = {"cron": "0 3 * * *", "seeds": "https://example.com/", "org": org.pk, "scope_type": "prefix",
            "depth": "-1", "extra_hops": "0", "workers": "1", "scale": "1", "tags": "",
            "enabled": "on", field: value}
    post_refused_or_accepted(client, reverse("admin:crawls_schedule_add"), form)


@FORMS_FUZZ
@given(field=st.sampled_from(["slug", "name", "max_concurrent_crawls", "storage_quota_bytes",
                              "exec_minutes_quota", "max_pages_per_crawl"]), value=VALUES)
def test_the_org_form_refuses_hostile_values_and_changes_nothing(world, field, value):
    client, _ = world
    form = {"slug": "fuzzed", "name": "Fuzzed", "bytes_stored": "0", field: value}
    post_refused_or_accepted(client, reverse("admin:crawls_org_add"), form)


@FORMS_FUZZ
@given(field=st.sampled_from(["url", "secret", "events"]), value=VALUES)
def test_the_webhook_form_refuses_hostile_values_and_changes_nothing(world, field, value):
    client, _ = world
    form = {"url": "https://hooks.example.com/in", "secret": "s3cret-s3cret", "events": "",
            "enabled": "on", field: value}
    post_refused_or_accepted(client, reverse("admin:crawls_webhook_add"), form)

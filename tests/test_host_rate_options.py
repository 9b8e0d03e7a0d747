"""--host-rate on `archiver add` and `schedule add`, the admin's form and the API, and
ARCHIVER_HOST_RATE / ARCHIVER_HOST_RATES: validated once, stored only when given, and handed
to archiver's crawler as hostRate / hostRates (issue 42)."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from archiver import conf
from archiver.errors import ConfigError
from crawls.admin.forms import CrawlConfigForm
from crawls.config import CrawlConfig
from crawls.models import Crawl, Schedule
from runner.launch import host_budget

pytestmark = pytest.mark.django_db


def add(*args: str) -> Crawl:
    out = io.StringIO()
    call_command("add", *args, "--no-browser", stdout=out)
    return Crawl.objects.get(pk=out.getvalue().strip())


def test_add_and_schedule_add_store_the_host_rate_only_when_given():
    assert add("https://example.com/", "--host-rate", "0.5").config["host_rate"] == 0.5
    assert "host_rate" not in add("https://example.com/").config
    call_command("schedule", "add", "0 3 * * *", "https://example.com/", "--host-rate", "3",
                 "--no-browser", stdout=io.StringIO())
    assert Schedule.objects.get().config["host_rate"] == 3.0


@pytest.mark.parametrize(("rate", "message"), [
    ("fast", "'fast' is not a number of requests per second"),
    ("-1", "not a number of requests per second"),
    ("1e3", "not a number of requests per second"),
    ("5000", "host_rate"),
])
def test_a_bad_host_rate_is_refused_and_nothing_is_written(rate, message):
    with pytest.raises(CommandError, match=message):
        add("https://example.com/", "--host-rate", rate)
    assert not Crawl.objects.exists()


def test_the_admin_form_and_the_api_model_take_the_host_rate():
    form = CrawlConfigForm(data={"seeds": "https://example.com/", "scope_type": "prefix",
                                 "host_rate": "0.25", "browser": "off"})
    assert form.is_valid(), form.errors
    assert form.config.host_rate == 0.25
    bad = CrawlConfigForm(data={"seeds": "https://example.com/", "scope_type": "prefix",
                                "host_rate": "lots", "browser": "off"})
    assert not bad.is_valid() and "requests per second" in str(bad.errors["host_rate"])
    assert CrawlConfig.parse(seeds=["https://example.com/"], host_rate=2).host_rate == 2.0
    with pytest.raises(ConfigError, match="host_rate"):
        CrawlConfig.parse(seeds=["https://example.com/"], host_rate="2")  # strict, as the API's


def settings(**variables: str):
    return conf.from_environ({"ARCHIVER_DATA_DIR": "/tmp/unused", **variables})


def test_the_crawler_gets_the_crawls_rate_or_the_default_and_the_host_patterns():
    plain = CrawlConfig(seeds=["https://example.com/"])
    assert host_budget(settings(), plain) == {"hostRate": 2.0}
    assert host_budget(settings(ARCHIVER_HOST_RATE="0"), plain) == {}
    own = CrawlConfig(seeds=["https://example.com/"], host_rate=0.5)
    patterns = settings(ARCHIVER_HOST_RATES="*.example.org=0.2, slow.test=1")
    assert host_budget(patterns, own) == {"hostRate": 0.5,
                                          "hostRates": ["*.example.org=0.2", "slow.test=1"]}


@pytest.mark.parametrize(("variables", "message"), [
    ({"ARCHIVER_HOST_RATE": "-1"}, "ARCHIVER_HOST_RATE"),
    ({"ARCHIVER_HOST_RATES": "example.org"}, "ARCHIVER_HOST_RATES: 'example.org' is not pattern=rate"),
    ({"ARCHIVER_HOST_RATES": "a.test=9999"}, "ARCHIVER_HOST_RATES: a.test must be between 0"),
])
def test_bad_host_rate_settings_are_refused_naming_the_variable(variables, message):
    with pytest.raises(ConfigError, match=message):
        settings(**variables)

"""The one validation path: CrawlConfig and the org, webhook and schedule models refuse
hostile input with one readable line, and never echo a secret."""

from __future__ import annotations

import pytest

from archiver.errors import ConfigError
from crawls import ssrf
from crawls.config import CrawlConfig, parse_size
from crawls.rules import parse_tags
from crawls.validation import OrgInput, ScheduleInput, WebhookInput

# --- seed URLs and hosts --------------------------------------------------------------------

BAD_SEEDS = {
    "empty label first": ("http://.com/", "not a valid domain name"),
    "empty label inside": ("http://a..b/", "not a valid domain name"),
    "label over 63": ("http://" + "a" * 64 + ".com/", "not a valid domain name"),
    "name over 253": ("http://" + ("a" * 60 + ".") * 5 + "com/", "longer than 253"),
    "octet over 255": ("http://999.1.1.1/", "IPv4 address a.b.c.d"),
    "three numbers": ("http://1.2.3/", "IPv4 address a.b.c.d"),
    "one big number": ("http://2130706433/", "IPv4 address a.b.c.d"),
    "hex octet": ("http://0x7f.0.0.1/", "IPv4 address a.b.c.d"),
    "leading zero": ("http://010.0.0.1/", "IPv4 address a.b.c.d"),
    "markup in host": ("http://ex<script>.com/", "only letters, digits"),
    "bad punycode": ("http://xn--zz.com/", "punycode"),
    "bad IPv6": ("http://[zz::1]/", "not a valid URL"),
    "unclosed IPv6": ("http://[::1/", "not a valid URL"),
    "no host": ("http:///path", "no host"),
    "port zero": ("http://example.com:0/", "port"),
    "port too big": ("http://example.com:65536/", "port"),
    "ftp": ("ftp://example.com/", "only http:// and https://"),
    "javascript": ("javascript:alert(1)", "only http:// and https://"),
    "line break": ("http://example.com/\r\nX-Injected: 1", "white space or control characters"),
    "too long": ("https://example.com/" + "a" * 2048, "longer than 2048"),
    "empty": ("", "empty"),
}


@pytest.mark.parametrize(("url", "message"), BAD_SEEDS.values(), ids=BAD_SEEDS.keys())
def test_bad_seeds_are_refused_in_one_short_line(url, message):
    with pytest.raises(ConfigError, match=message) as refused:
        CrawlConfig.parse(seeds=[url])
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 200


@pytest.mark.parametrize("url", [
    "https://example.com/", "http://127.0.0.1:8000/x", "http://[2001:4860:4860::8888]:8080/", "https://bücher.de/",
    "https://example.com./", "http://localhost/", "https://a-b_c.example/@user?q=a@b",
    "http://123.com/", "https://" + "a" * 63 + ".com/",
])
def test_good_seeds_are_accepted(url):
    assert CrawlConfig.parse(seeds=[url]).seeds == [url]


@pytest.mark.parametrize("url", [
    "https://alice:hunter2-secret@example.com/", "http://alice@example.com/",
    "ftp://bob:hunter2-secret@example.com/", "https://x:hunter2-secret@a..b/",
])
def test_seeds_with_credentials_are_refused_without_echoing_them(url):
    with pytest.raises(ConfigError) as refused:
        CrawlConfig.parse(seeds=[url])
    message = str(refused.value)
    assert "hunter2" not in message and "alice" not in message and "bob" not in message
    assert "user name or password" in message or "only http" in message or "domain name" in message


def test_a_seed_with_credentials_names_the_rule():
    with pytest.raises(ConfigError, match="seed URLs may not contain a user name or password"):
        CrawlConfig.parse(seeds=["https://alice:hunter2@example.com/"])


# --- header values, regexes, numbers ---------------------------------------------------------


@pytest.mark.parametrize(("agent", "message"), [
    ("a\r\nX-Injected: 1", "control characters"),
    ("a\x00b", "control characters"),
    ("", "empty"),
    ("a" * 513, "longer than 512"),
])
def test_user_agents_with_control_characters_or_absurd_lengths_are_refused(agent, message):
    with pytest.raises(ConfigError, match=message):
        CrawlConfig.parse(seeds=["https://e.com/"], user_agent=agent)


@pytest.mark.parametrize(("regex", "message"), [
    ("", "empty regular expression would match every URL"),
    ("(", "not a valid regular expression"),
    ("a" * 1001, "at most 1000 characters"),
    ("a\nb", "control characters"),
])
def test_regexes_must_be_non_empty_short_and_compile(regex, message):
    with pytest.raises(ConfigError, match=message):
        CrawlConfig.parse(seeds=["https://e.com/"], exclude=[regex])


def test_too_many_regexes_are_refused():
    with pytest.raises(ConfigError, match="exclude"):
        CrawlConfig.parse(seeds=["https://e.com/"], exclude=[f"x{n}" for n in range(101)])


@pytest.mark.parametrize(("field", "value", "message"), [
    ("workers", 10**20, "workers: must be from 1 to 16"),
    ("depth", -2, "depth: must be from -1 to 1000"),
    ("size_limit", 2**60, "size_limit: must be from 1 byte to 1 PiB"),
    ("time_limit", 0, "time_limit: must be from 1 second to 10 years"),
])
def test_numbers_out_of_range_name_the_range(field, value, message):
    with pytest.raises(ConfigError, match=message):
        CrawlConfig.parse(seeds=["https://e.com/"], **{field: value})


def test_a_size_with_absurdly_many_digits_is_exact_not_a_float_overflow():
    assert parse_size("1" + "0" * 15) == 10**15
    with pytest.raises(ValueError, match="out of range"):
        parse_size("9" * 30)
    with pytest.raises(ValueError, match="not a size"):
        parse_size("9" * 400)


# --- tags --------------------------------------------------------------------------------------


@pytest.mark.parametrize("tags", [[1, None], {"a": 1}, "weekly", None, [["a"]], [True]])
def test_tags_must_be_a_list_of_strings(tags):
    with pytest.raises(ConfigError, match="tags must be a list of strings"):
        parse_tags(tags)


@pytest.mark.parametrize(("tags", "message"), [
    ([""], "a tag is 1 to 100 characters"),
    (["t" * 101], "a tag is 1 to 100 characters"),
    (["a\nb"], "without control characters"),
    ([f"t{n}" for n in range(51)], "at most 50"),
])
def test_tags_are_short_printable_and_few(tags, message):
    with pytest.raises(ConfigError, match=message):
        parse_tags(tags)


def test_tags_are_trimmed_and_repeats_dropped():
    assert parse_tags([" weekly ", "news", "weekly"]) == ["weekly", "news"]


# --- orgs --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("values", "message"), [
    ({"slug": "a" * 200}, "at most 50 characters"),
    ({"slug": "a b"}, "is not a slug"),
    ({"slug": ""}, "is not a slug"),
    ({"slug": 5}, "valid string"),
    ({"slug": "acme", "name": "n" * 201}, "at most 200 characters"),
    ({"slug": "acme", "name": "a\r\nb"}, "control characters"),
    ({"slug": "acme", "max_concurrent_crawls": 0}, "max_concurrent_crawls: must be from 1 to 10000"),
    ({"slug": "acme", "storage_quota_bytes": 0}, "storage_quota_bytes: must be from 1"),
    ({"slug": "acme", "exec_minutes_quota": -3}, "exec_minutes_quota: must be from 1"),
    ({"slug": "acme", "max_pages_per_crawl": 10**20}, "max_pages_per_crawl: must be from 1"),
    ({"slug": "acme", "max_pages_per_crawl": True}, "valid integer"),
    ({"slug": "acme", "bytes_stored": 5}, "Extra inputs"),
])
def test_org_input_refuses_what_the_columns_cannot_hold_and_zero_quotas(values, message):
    with pytest.raises(ConfigError, match=message):
        OrgInput.parse(**values)


def test_org_input_changes_only_the_fields_given_and_none_means_unlimited():
    assert OrgInput.parse(slug="acme", max_pages_per_crawl=10).changes() == {"max_pages_per_crawl": 10}
    assert OrgInput.parse(slug="acme", storage_quota_bytes=None, name=None).changes() == {
        "storage_quota_bytes": None, "name": ""}


# --- webhooks ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("values", "message"), [
    ({"url": "", "secret": "s"}, "URL is empty"),
    ({"url": "https://u:hunter2@hooks.example.com/", "secret": "s"}, "credentials"),
    ({"url": "https://hooks.example.com/\r\n", "secret": "s"}, "control characters"),
    ({"url": "https://a..b/", "secret": "s"}, "not a valid domain name"),
    ({"url": "https://hooks.example.com/" + "a" * 2000, "secret": "s"}, "at most 2000"),
    ({"url": "https://hooks.example.com/", "secret": ""}, "secret is empty"),
    ({"url": "https://hooks.example.com/", "secret": "s" * 501}, "longer than 500"),
    ({"url": "https://hooks.example.com/", "secret": "hunter2\n"}, "control characters"),
    ({"url": "https://hooks.example.com/", "secret": "s", "events": ["crawl.exploded"]}, "unknown event"),
    ({"url": "https://hooks.example.com/", "secret": "s", "events": "crawl.queued"}, "valid list"),
    ({"url": "https://hooks.example.com/", "secret": "s", "org": "a" * 51}, "at most 50"),
])
def test_webhook_input_refuses_bad_urls_secrets_and_events_without_resolving(values, message, monkeypatch):
    monkeypatch.setattr(ssrf, "system_resolver", no_dns)
    with pytest.raises(ConfigError, match=message) as refused:
        WebhookInput.parse(**values)
    assert "hunter2" not in str(refused.value)


def test_webhook_destination_is_checked_with_the_runners_address_rules(monkeypatch):
    monkeypatch.setattr(ssrf, "system_resolver", lambda host, port: ["10.1.2.3"])
    hook = WebhookInput.parse(url="https://hooks.example.com/in", secret="s3cret", events=["crawl.completed"])
    assert hook.events == ["crawl.completed"]
    with pytest.raises(ConfigError, match="refused: hooks.example.com:443 resolves to 10.1.2.3"):
        hook.check_destination()


def no_dns(host, port):
    raise AssertionError(f"resolved {host}: text rules must refuse before DNS")


# --- schedules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("values", "message"), [
    ({"cron": "every day"}, "not a valid cron expression"),
    ({"cron": "0 3 31 2 *"}, "never happens"),
    ({"cron": "0 3 * * * * *"}, "not a valid cron expression"),
    ({"cron": "0 3 * * *" + " " * 100}, "at most 100"),
    ({"cron": "0 3 * * *\n"}, "control characters"),
    ({"cron": "0 3 * * *", "config": {"seeds": ["http://a..b/"]}}, "config.seeds"),
    ({"cron": "0 3 * * *", "tags": "weekly"}, "tags"),
    ({"cron": "0 3 * * *", "org": "a b"}, "is not a slug"),
])
def test_schedule_input_checks_cron_config_tags_and_org(values, message):
    values = {"config": {"seeds": ["https://example.com/"]}, **values}
    with pytest.raises(ConfigError, match=message):
        ScheduleInput.parse(**values)


def test_schedule_input_normalises_cron_and_validates_the_crawl():
    schedule = ScheduleInput.parse(cron=" 0  3 * * * ", config={"seeds": ["https://example.com/"]},
                                   tags=[" weekly "])
    assert (schedule.cron, schedule.config.seeds, schedule.tags) == (
        "0 3 * * *", ["https://example.com/"], ["weekly"])


@pytest.mark.parametrize("field", ["max_concurrent_crawls", "storage_quota_bytes", "exec_minutes_quota",
                                   "max_pages_per_crawl"])
def test_the_org_model_refuses_a_zero_quota_like_org_input(field):
    from django.core.exceptions import ValidationError

    from crawls.models import Org

    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Org(slug="acme", **{field: 0}).clean_fields()
    Org(slug="acme", **{field: 1}).clean_fields()


@pytest.mark.parametrize("tags", [[1, None], {"a": 1}, "weekly", ["t" * 101]])
@pytest.mark.parametrize("model_name", ["Crawl", "Schedule"])
def test_model_forms_refuse_the_tags_parse_tags_refuses(model_name, tags):
    from django.apps import apps
    from django.core.exceptions import ValidationError

    model = apps.get_model("crawls", model_name)
    others = [field.name for field in model._meta.fields if field.name != "tags"]
    with pytest.raises(ValidationError, match="tag"):
        model(tags=tags).clean_fields(exclude=others)
    model(tags=["weekly"]).clean_fields(exclude=others)

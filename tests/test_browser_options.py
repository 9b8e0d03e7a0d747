"""Browser mode and options (--browser, --behaviors ... --profile): one set of rules for `add`,
`schedule add`, the admin's forms and CrawlConfig.parse. archiver's own crawler takes the options
in browser mode (--browser, or auto with a Chromium found) and refuses them with one sentence in
HTTP mode; the real crawler takes them all and always drives a browser."""

from __future__ import annotations

import html
import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from archiver import conf
from archiver.conf import Settings
from archiver.errors import ConfigError
from crawls.config import CrawlConfig
from crawls.models import Crawl, Org, Schedule
from crawls.profiles import add_profile
from tests.profile_tars import good_profile

pytestmark = pytest.mark.django_db

HTTP_ONLY = ("needs browser mode; archiver's own crawler archiver/crawler:0.1.0 fetches over HTTP only "
             "here: browser mode is off for this crawl")
NO_CHROMIUM = ("needs browser mode; archiver's own crawler archiver-crawler (local) fetches over HTTP only "
               "here: no Chromium was found (install the chromium package, or set ARCHIVER_CHROMIUM)")
REAL_ONLY = ("needs browsertrix-crawler; archiver's own crawler archiver/crawler:0.1.0 does not take it "
             "(set ARCHIVER_CRAWLER_IMAGE to a browsertrix-crawler image)")
LANG_REFUSED = ("--lang: '{}' is not a two-letter ISO 639-1 language code (such as en, de or pt), "
                "the only form browsertrix-crawler takes (not de-DE or pt-BR)")
# option, its value on the command line, the CrawlConfig field, the value the API sends
OPTIONS = [
    ("--behaviors", "autoscroll,autoplay", "behaviors", ["autoscroll", "autoplay"]),
    ("--page-load-timeout", "2m", "page_load_timeout", 120),
    ("--post-load-delay", "5", "post_load_delay", 5),
    ("--wait-until", "domcontentloaded,networkidle0", "wait_until", ["domcontentloaded", "networkidle0"]),
    ("--block-ads", None, "block_ads", True),
    ("--screenshot", "fullPage", "screenshot", ["fullPage"]),
    ("--lang", "pt", "lang", "pt"),
    ("--profile", "login", "profile", "login"),
]


@pytest.fixture
def crawler_kind(monkeypatch, tmp_path):
    """Set ARCHIVER_CRAWLER_KIND for the test (and a data dir of its own)."""
    monkeypatch.setenv("ARCHIVER_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("ARCHIVER_CHROMIUM", raising=False)  # the default: the image carries one

    def use(kind: str) -> None:
        monkeypatch.setenv("ARCHIVER_CRAWLER_KIND", kind)
        conf.get.cache_clear()

    use("auto")
    yield use
    conf.get.cache_clear()


def refusal(*args) -> str:
    with pytest.raises(CommandError) as refused:
        call_command(*args, stdout=StringIO(), stderr=StringIO())
    return str(refused.value)


def cli_args(option: str, value: str | None) -> list[str]:
    return [option] if value is None else [option, value]


# --- which crawler -------------------------------------------------------------------------


@pytest.mark.parametrize(("values", "browser"), [
    ({}, False),
    ({"crawler_image": "webrecorder/browsertrix-crawler:1.14.1"}, True),
    ({"crawler_image": "registry.local:5000/webrecorder/browsertrix-crawler@sha256:ab12"}, True),
    ({"crawler_image": "browsertrix/archiver-crawler:1"}, False),  # only the image's own name counts
    ({"crawler_image": "my/crawler:1", "crawler_kind": "browsertrix"}, True),
    ({"crawler_image": "webrecorder/browsertrix-crawler:1", "crawler_kind": "archiver"}, False),
    ({"launcher": "local"}, False),
    ({"launcher": "local", "local_crawler_command": ("node", "/opt/browsertrix-crawler/dist/main.js")}, True),
    ({"launcher": "local", "crawler_image": "webrecorder/browsertrix-crawler:1"}, False),
])
def test_the_crawler_kind_comes_from_the_setting_or_the_crawler_s_name(values, browser):
    assert Settings(**values).browser_crawler() is browser


def test_a_bad_crawler_kind_stops_every_command():
    with pytest.raises(ConfigError, match="ARCHIVER_CRAWLER_KIND"):
        conf.from_environ({"ARCHIVER_CRAWLER_KIND": "chrome"})


# --- archiver's own crawler refuses every browser option ------------------------------------------


def own_refusal(field: str) -> str:
    return REAL_ONLY if field in ("block_ads", "profile") else HTTP_ONLY


@pytest.mark.parametrize(("option", "value", "field", "api_value"), OPTIONS)
def test_http_mode_refuses_each_option_with_one_sentence(crawler_kind, option, value, field, api_value):
    words = own_refusal(field)
    assert refusal("add", "https://example.com/", "--no-browser", *cli_args(option, value)) == f"{option} {words}"
    with pytest.raises(ConfigError) as refused:
        CrawlConfig.parse(seeds=["https://example.com/"], browser=False, **{field: api_value})
    assert str(refused.value) == f"{field}: {words}"
    assert refusal("schedule", "add", "0 3 * * *", "https://example.com/", "--no-browser",
                   *cli_args(option, value)) == f"{option} {words}"
    assert not Crawl.objects.exists() and not Schedule.objects.exists()


@pytest.mark.parametrize(("option", "value", "field", "api_value"), OPTIONS)
def test_browser_mode_takes_each_option_but_the_real_crawler_s_own(crawler_kind, option, value, field,
                                                                    api_value):
    # The docker launcher's image carries Chromium: auto means browser mode there.
    args = ["add", "https://example.com/", *cli_args(option, value)]
    if field in ("block_ads", "profile"):
        assert refusal(*args) == f"{option} {REAL_ONLY}"
        return
    out = StringIO()
    call_command(*args, stdout=out)
    crawl = Crawl.objects.get(pk=out.getvalue().strip())
    assert crawl.config["browser"] is True and crawl.config[field] == api_value
    assert crawl.crawl_config.own_crawler_args()[:1] == ["--browser"]


@pytest.fixture
def local_chromium(crawler_kind, monkeypatch, tmp_path):
    """The local launcher, with ARCHIVER_CHROMIUM set to a path: `use(None)` for none found."""
    monkeypatch.setenv("ARCHIVER_LAUNCHER", "local")

    def use(path) -> None:
        monkeypatch.setenv("ARCHIVER_CHROMIUM", str(path or tmp_path / "no-chromium"))
        crawler_kind("auto")

    return use


def fake_chromium(tmp_path) -> str:
    path = tmp_path / "chromium"
    path.write_text("#!/bin/sh\necho 'Chromium 120.0.0.0 built on Debian'\n")
    path.chmod(0o755)
    return str(path)


def test_auto_resolves_when_the_crawl_is_added_and_is_stored(local_chromium, tmp_path):
    local_chromium(None)
    call_command("add", "https://example.com/", stdout=StringIO())
    assert Crawl.objects.get().config["browser"] is False
    assert refusal("add", "https://example.com/", "--lang", "de") == f"--lang {NO_CHROMIUM}"
    assert refusal("add", "https://example.com/", "--browser") == (
        "--browser: no Chromium found for archiver's own crawler (install the chromium package, or set "
        "ARCHIVER_CHROMIUM to its path)")
    local_chromium(fake_chromium(tmp_path))
    out = StringIO()
    call_command("add", "https://example.com/", "--lang", "de", stdout=out)
    crawl = Crawl.objects.get(pk=out.getvalue().strip())
    assert crawl.config["browser"] is True
    local_chromium(None)  # Chromium gone later: the stored crawl keeps its mode
    assert Crawl.objects.get(pk=crawl.pk).launch_config().browser is True
    assert Crawl.objects.count() == 2


def test_the_real_crawler_always_drives_a_browser(crawler_kind):
    crawler_kind("browsertrix")
    assert refusal("add", "https://example.com/", "--no-browser").startswith(
        "--no-browser: the configured crawler archiver/crawler:0.1.0 always drives a browser")
    call_command("add", "https://example.com/", stdout=StringIO())
    assert Crawl.objects.get().config["browser"] is True


def test_crawls_stored_before_the_mode_are_http_crawls():
    config = CrawlConfig(seeds=["https://example.com/"])
    assert config.browser is None and config.own_crawler_args() == []
    assert "browser" not in config.model_dump(mode="json")


def test_a_stored_crawl_stays_readable_whatever_crawler_is_configured_later(crawler_kind):
    crawler_kind("browsertrix")
    call_command("add", "https://example.com/", "--block-ads", "--lang", "de", stdout=StringIO())
    crawler_kind("archiver")
    crawl = Crawl.objects.get()
    assert crawl.crawl_config.block_ads and crawl.launch_config().lang == "de"


def test_crawls_without_browser_options_store_no_browser_keys(crawler_kind):
    call_command("add", "https://example.com/", stdout=StringIO())
    assert not {"behaviors", "block_ads", "profile", "lang"} & set(Crawl.objects.get().config)


# --- a browser crawler takes them --------------------------------------------------------------


def test_a_browser_crawler_takes_every_option_and_stores_it(crawler_kind, tmp_path):
    crawler_kind("browsertrix")
    add_profile(Org.objects.get(slug="default"), "login", good_profile(tmp_path / "p.tar.gz"), tmp_path,
                timezone.now())
    args = [arg for option, value, *_ in OPTIONS for arg in cli_args(option, value)]
    out = StringIO()
    call_command("add", "https://example.com/", *args, stdout=out)
    crawl = Crawl.objects.get(pk=out.getvalue().strip())
    assert {field: crawl.config[field] for _, _, field, _ in OPTIONS} == {
        field: value for _, _, field, value in OPTIONS}
    assert crawl.crawl_config.browser_args() == [
        "--behaviors", "autoscroll,autoplay", "--pageLoadTimeout", "120", "--postLoadDelay", "5",
        "--waitUntil", "domcontentloaded,networkidle0", "--blockAds", "--screenshot", "fullPage",
        "--lang", "pt",
    ]  # --profile: the launcher adds where the file is
    schedule_out = StringIO()
    call_command("schedule", "add", "0 3 * * *", "https://example.com/", *args, stdout=schedule_out)
    assert Schedule.objects.get().config == crawl.config


@pytest.mark.parametrize(("args", "message"), [
    (["--behaviors", "autoscroll,scrollAll"],
     "--behaviors: 'scrollAll' is not a behavior (one of autoscroll, autoplay, autofetch, autoclick, siteSpecific)"),
    (["--behaviors", ""], "--behaviors: '' is not a behavior"),
    (["--wait-until", "idle"], "--wait-until: 'idle' is not a page load condition (one of load, domcontentloaded, "
                               "networkidle0, networkidle2)"),
    (["--screenshot", "full"], "--screenshot: 'full' is not a screenshot kind"),
    (["--lang", "english"], LANG_REFUSED.format("english")),
    (["--lang", "de_DE"], LANG_REFUSED.format("de_DE")),
    (["--lang", "de-DE"], LANG_REFUSED.format("de-DE")),  # BCP 47, which browsertrix-crawler quits on
    (["--lang", "pt-BR"], LANG_REFUSED.format("pt-BR")),
    (["--lang", "e"], LANG_REFUSED.format("e")),
    (["--lang", "xx"], LANG_REFUSED.format("xx")),  # two letters, but no ISO 639-1 code
    (["--page-load-timeout", "0"], "--page-load-timeout 0: must be from 1 to 3600"),
    (["--page-load-timeout", "2h"], "--page-load-timeout 7200: must be from 1 to 3600"),
    (["--post-load-delay", "-1"], "--post-load-delay -1: must be from 0 to 3600"),
    (["--profile", "../etc"], "--profile: '../etc' is not a profile name"),
    (["--profile", "nope"], "no browser profile 'nope' in org 'default' (add it with: archiver profile add nope "
                            "FILE --org default)"),
])
def test_a_browser_crawler_still_refuses_bad_values(crawler_kind, args, message):
    crawler_kind("browsertrix")
    assert refusal("add", "https://example.com/", *args).startswith(message)
    assert not Crawl.objects.exists()


def test_a_language_is_taken_in_any_case_and_stored_in_lower_case(crawler_kind):
    crawler_kind("browsertrix")
    call_command("add", "https://example.com/", "--lang", "DE", stdout=StringIO())
    crawl = Crawl.objects.get()
    assert crawl.config["lang"] == "de"
    assert crawl.crawl_config.browser_args() == ["--screenshot", "thumbnail", "--lang", "de"]


def test_a_crawl_stored_with_a_bcp_47_tag_by_an_older_archiver_stays_readable():
    assert CrawlConfig(seeds=["https://example.com/"], lang="de-DE").lang == "de-DE"


def test_api_style_values_take_lists_or_comma_text_and_drop_repeats(crawler_kind):
    crawler_kind("browsertrix")
    config = CrawlConfig.parse(seeds=["https://example.com/"], behaviors="autoscroll, autoscroll,autoplay",
                               wait_until=["load", "load"], screenshot="view")
    assert (config.behaviors, config.wait_until, config.screenshot) == (
        ["autoscroll", "autoplay"], ["load"], ["view"])
    for values, words in [({"behaviors": []}, "give at least one behavior"),
                          ({"behaviors": [1]}, "behaviors.0: Input should be a valid string"),
                          ({"lang": 5}, "lang: Input should be a valid string"),
                          ({"page_load_timeout": "soon"}, "page_load_timeout: Input should be a valid integer")]:
        with pytest.raises(ConfigError, match=words):
            CrawlConfig.parse(seeds=["https://example.com/"], **values)


# --- the admin's forms ---------------------------------------------------------------------------


def crawl_form(org: Org, **values) -> dict:
    return {"seeds": "https://example.com/", "org": org.pk, "scope_type": "prefix", "depth": "-1",
            "extra_hops": "0", "workers": "1", "scale": "1", "tags": "", **values}


FORM_VALUES = {"behaviors": "autoscroll,autoplay", "page_load_timeout": "2m", "post_load_delay": "5",
               "wait_until": "domcontentloaded,networkidle0", "block_ads": "on", "screenshot": "fullPage",
               "lang": "pt", "profile": "login"}


@pytest.mark.usefixtures("admin_settings")
@pytest.mark.parametrize(("option", "value", "field", "api_value"), OPTIONS)
def test_the_admin_form_refuses_each_option_in_http_mode(crawler_kind, admin_client, option,
                                                        value, field, api_value):
    org = Org.objects.get(slug="default")
    response = admin_client.post(reverse("admin:crawls_crawl_add"),
                                 crawl_form(org, browser="off", **{field: FORM_VALUES[field]}))
    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    assert f'<ul class="errorlist" id="id_{field}_error"><li>{own_refusal(field)}</li>' in page
    assert not Crawl.objects.exists()


@pytest.mark.usefixtures("admin_settings")
def test_the_admin_form_takes_them_for_a_browser_crawler_and_shows_them_again(crawler_kind, admin_client,
                                                                              tmp_path):
    crawler_kind("browsertrix")
    org = Org.objects.get(slug="default")
    response = admin_client.post(reverse("admin:crawls_crawl_add"), crawl_form(org, **FORM_VALUES))
    assert response.status_code == 200  # no profile "login" yet
    page = html.unescape(response.content.decode())
    assert '<ul class="errorlist" id="id_profile_error"><li>no browser profile \'login\' in org' in page
    add_profile(org, "login", good_profile(tmp_path / "p.tar.gz"), tmp_path, timezone.now())
    response = admin_client.post(reverse("admin:crawls_crawl_add"), crawl_form(org, **FORM_VALUES))
    assert response.status_code == 302, html.unescape(response.content.decode())[:3000]
    crawl = Crawl.objects.get()
    assert {field: crawl.config[field] for _, _, field, _ in OPTIONS} == {
        field: value for _, _, field, value in OPTIONS}
    again = admin_client.get(reverse("admin:crawls_crawl_add"), {"from": crawl.pk}).content.decode()
    for text in ('value="autoscroll,autoplay"', 'value="2m"', 'value="pt"', 'value="login"'):
        assert text in again
    assert re.search(r'<input type="checkbox" name="block_ads"[^>]* checked', again)


@pytest.mark.usefixtures("admin_settings")
def test_the_admin_form_refuses_bad_values_in_the_cli_s_words(crawler_kind, admin_client):
    crawler_kind("browsertrix")
    org = Org.objects.get(slug="default")
    cli = refusal("add", "https://example.com/", "--wait-until", "idle").split(": ", 1)[1]
    response = admin_client.post(reverse("admin:crawls_crawl_add"), crawl_form(org, wait_until="idle"))
    assert f'<ul class="errorlist" id="id_wait_until_error"><li>{cli}</li>' in html.unescape(
        response.content.decode())
    assert not Crawl.objects.exists()


def test_a_zero_post_load_delay_is_an_option_given(crawler_kind):
    assert refusal("add", "https://example.com/", "--no-browser", "--post-load-delay", "0") == (
        f"--post-load-delay {HTTP_ONLY}")
    crawler_kind("browsertrix")
    config = CrawlConfig.parse(seeds=["https://example.com/"], post_load_delay=0)
    assert config.model_dump(mode="json")["post_load_delay"] == 0
    assert config.browser_args() == ["--postLoadDelay", "0", "--screenshot", "thumbnail"]


def test_a_browser_crawl_takes_a_thumbnail_unless_told_none(crawler_kind):
    crawler_kind("browsertrix")
    plain = CrawlConfig.parse(seeds=["https://example.com/"])
    assert plain.browser_args() == ["--screenshot", "thumbnail"]
    assert "screenshot" not in plain.model_dump(mode="json")  # the default is not stored
    call_command("add", "https://example.com/", "--screenshot", "none", stdout=StringIO())
    crawl = Crawl.objects.get()
    assert crawl.config["screenshot"] == ["none"] and crawl.crawl_config.browser_args() == []
    assert refusal("add", "https://example.com/", "--screenshot", "none,view") == (
        "--screenshot: 'none' takes no screenshot: it is given alone")
    assert Crawl.objects.count() == 1


def test_no_screenshot_needs_no_browser():
    call_command("add", "https://example.com/", "--no-browser", "--screenshot", "none", stdout=StringIO())
    crawl = Crawl.objects.get()
    assert not crawl.crawl_config.uses_browser() and crawl.crawl_config.own_crawler_args() == []


@pytest.mark.usefixtures("admin_settings")
def test_the_schedule_form_has_the_browser_options_too(crawler_kind, admin_client, tmp_path):
    org = Org.objects.get(slug="default")
    form = {"org": org.pk, "cron": "0 3 * * *", "seeds": "https://example.com/", "scope_type": "prefix",
            "enabled": "on", "browser": "off", "behaviors": "autoscroll", "block_ads": "on", "profile": "login"}
    response = admin_client.post(reverse("admin:crawls_schedule_add"), form)
    page = html.unescape(response.content.decode())
    assert f'<ul class="errorlist" id="id_behaviors_error"><li>{HTTP_ONLY}</li>' in page
    assert not Schedule.objects.exists()
    crawler_kind("browsertrix")
    add_profile(org, "login", good_profile(tmp_path / "p.tar.gz"), tmp_path, timezone.now())
    response = admin_client.post(reverse("admin:crawls_schedule_add"), {**form, "browser": "auto"})
    assert response.status_code == 302, html.unescape(response.content.decode())[:3000]
    config = Schedule.objects.get().config
    assert (config["behaviors"], config["block_ads"], config["profile"]) == (["autoscroll"], True, "login")


@pytest.mark.usefixtures("admin_settings")
def test_the_admin_form_refuses_a_language_browsertrix_crawler_would_quit_on(crawler_kind, admin_client):
    crawler_kind("browsertrix")
    org = Org.objects.get(slug="default")
    response = admin_client.post(reverse("admin:crawls_crawl_add"), crawl_form(org, lang="de-DE"))
    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    message = LANG_REFUSED.format("de-DE").removeprefix("--lang: ")
    assert f'<ul class="errorlist" id="id_lang_error"><li>{message}</li>' in page
    assert not Crawl.objects.exists()


@pytest.mark.usefixtures("admin_settings")
@pytest.mark.parametrize(("choice", "stored", "shown_again"), [("on", True, "on"), ("off", False, "off"),
                                                               ("auto", True, "on")])
def test_the_admin_form_s_browser_choice_is_stored_and_shown_again(crawler_kind, admin_client, choice,
                                                                   stored, shown_again):
    org = Org.objects.get(slug="default")
    response = admin_client.post(reverse("admin:crawls_crawl_add"), crawl_form(org, browser=choice))
    assert response.status_code == 302, html.unescape(response.content.decode())[:3000]
    crawl = Crawl.objects.get()
    assert crawl.config["browser"] is stored
    again = admin_client.get(reverse("admin:crawls_crawl_add"), {"from": crawl.pk}).content.decode()
    assert re.search(rf'<option value="{shown_again}" selected>', again)


def test_archiver_chromium_picks_the_local_chromium_or_none_at_all(tmp_path):
    chromium = fake_chromium(tmp_path)
    assert Settings(launcher="local", chromium=chromium).chromium_path() == chromium
    assert Settings(launcher="local", chromium=str(tmp_path / "gone")).chromium_path() is None
    assert Settings(launcher="docker", chromium=chromium).chromium_path() == "/usr/bin/chromium"  # the image's
    assert Settings(launcher="docker", chromium="none").chromium_path() is None
    assert Settings(launcher="local", chromium="none").chromium_path() is None
    with pytest.raises(ConfigError, match="ARCHIVER_CHROMIUM"):
        conf.from_environ({"ARCHIVER_CHROMIUM": "chromium"})

"""--sitemap, --sitemap-since and --seed-file on `archiver add` and `schedule add`, and the
admin's form: validated once (CrawlConfig), stored in the crawl config only when given, and
handed to the crawler under its own option names (sitemap, sitemapFromDate)."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.core.management import CommandError, call_command

from crawls.admin.forms import CrawlConfigForm
from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlStatus, Schedule, Snapshot

pytestmark = pytest.mark.django_db


def add(*args: str) -> Crawl:
    out = io.StringIO()
    call_command("add", *args, "--no-browser", stdout=out)
    return Crawl.objects.get(pk=out.getvalue().strip())


def test_add_stores_the_sitemap_options_and_the_crawler_gets_its_own_names():
    auto = add("https://example.com/", "--sitemap", "--sitemap-since", "last")
    assert (auto.config["sitemap"], auto.config["sitemap_since"]) == ("auto", "last")
    handed = auto.crawl_config.crawler_config(None)
    assert handed["sitemap"] is True and "sitemapFromDate" not in handed  # "last": the runner's
    given = add("https://example.com/", "--sitemap", "https://example.com/map.xml.gz",
                "--sitemap-since", "2026-05-01")
    handed = given.crawl_config.crawler_config(None)
    assert (handed["sitemap"], handed["sitemapFromDate"]) == ("https://example.com/map.xml.gz", "2026-05-01")
    plain = add("https://example.com/")
    assert "sitemap" not in plain.config and "sitemap" not in plain.crawl_config.crawler_config(None)


@pytest.mark.parametrize(("args", "message"), [
    (("--sitemap-since", "2026-05-01"), "--sitemap-since '2026-05-01': needs a sitemap"),
    (("--sitemap", "--sitemap-since", "yesterday"), "--sitemap-since: 'yesterday' is not a date"),
    (("--sitemap", "file:///etc/passwd"), "--sitemap"),
    (("--sitemap", "http://169.254.169.254/sitemap.xml"), "169.254.169.254"),
])
def test_bad_sitemap_options_are_refused_and_nothing_is_written(args, message):
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        add("https://example.com/", *args)
    assert not Crawl.objects.exists()


def test_a_seed_file_adds_its_urls_skipping_comments_and_blank_lines(tmp_path):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("# weekly\nhttps://example.com/a\n\n  https://example.com/b  \n")
    crawl = add("https://example.com/", "--seed-file", str(seeds))
    assert crawl.seeds == ["https://example.com/", "https://example.com/a", "https://example.com/b"]
    only = add("--seed-file", str(seeds))
    assert only.seeds == ["https://example.com/a", "https://example.com/b"]
    call_command("schedule", "add", "0 3 * * *", "--seed-file", str(seeds), "--sitemap",
                 "--no-browser", stdout=io.StringIO())
    schedule = Schedule.objects.get()
    assert schedule.config["seeds"] == only.seeds and schedule.config["sitemap"] == "auto"


def test_a_bad_seed_file_is_refused(tmp_path):
    with pytest.raises(CommandError, match="--seed-file .*missing.txt: No such file"):
        add("--seed-file", str(tmp_path / "missing.txt"))
    big = tmp_path / "big.txt"
    big.write_bytes(b"https://example.com/\n" * (5 * 2**20 // 21))
    with pytest.raises(CommandError, match="larger than 4 MiB"):
        add("--seed-file", str(big))
    hostile = tmp_path / "hostile.txt"
    hostile.write_text("https://example.com/\nfile:///etc/passwd\n")
    with pytest.raises(CommandError, match="file:///etc/passwd"):
        add("--seed-file", str(hostile))
    with pytest.raises(CommandError, match="no seeds"):
        add()
    assert not Crawl.objects.exists()


def test_the_admin_form_offers_and_checks_the_sitemap_options():
    form = CrawlConfigForm(data={"seeds": "https://example.com/", "scope_type": "prefix",
                                 "sitemap": "auto", "sitemap_since": "last", "browser": "off"})
    assert form.is_valid(), form.errors
    assert (form.config.sitemap, form.config.sitemap_since) == ("auto", "last")
    bad = CrawlConfigForm(data={"seeds": "https://example.com/", "scope_type": "prefix",
                                "sitemap": "auto", "sitemap_since": "soon", "browser": "off"})
    assert not bad.is_valid() and "not a date" in str(bad.errors["sitemap_since"])


def test_a_stored_crawl_without_sitemap_options_reads_as_before():
    assert CrawlConfig(seeds=["https://example.com/"]).model_dump(mode="json") == {
        "seeds": ["https://example.com/"], "scope_type": "prefix", "depth": -1, "extra_hops": 0,
        "page_limit": None, "size_limit": None, "time_limit": None, "include": [], "exclude": [],
        "workers": 1, "scale": 1, "user_agent": None, "use_robots": False}


def test_a_retry_of_failed_pages_reads_no_sitemap():
    crawl = add("https://example.com/", "--sitemap", "--sitemap-since", "last")
    Crawl.objects.filter(pk=crawl.pk).update(status=CrawlStatus.COMPLETE)
    crawl.refresh_from_db()
    Snapshot.objects.create(crawl=crawl, url="https://example.com/broken", status="failed")
    crawl.retry_failed_pages(dt.datetime.now(dt.UTC))
    handed = crawl.launch_config().crawler_config(None)
    assert handed["seeds"] == ["https://example.com/broken"] and "sitemap" not in handed


def test_a_seed_file_url_is_handed_to_the_crawler_not_read_here(tmp_path):
    crawl = add("https://example.com/", "--seed-file", "https://example.com/seeds.txt")
    assert crawl.seeds == ["https://example.com/"]
    assert crawl.crawl_config.crawler_config(None)["seedFile"] == "https://example.com/seeds.txt"
    with pytest.raises(CommandError, match="adds to the seeds: give at least one URL"):
        add("--seed-file", "https://example.com/seeds.txt")
    with pytest.raises(CommandError, match="--seed-file: .*169.254.169.254 is a link-local address"):
        add("https://example.com/", "--seed-file", "http://169.254.169.254/seeds.txt")
    assert "seed_file" not in add("https://example.com/").config

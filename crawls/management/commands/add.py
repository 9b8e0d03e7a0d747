"""`archiver add URL...`: queue a crawl of these seeds."""

from __future__ import annotations

import argparse

from django.core.management.base import CommandError

from crawls import actions
from crawls.cli import (
    ArchiverCommand,
    arg_type,
    duration_arg,
    int_arg,
    parse_crawl_config,
    size_arg,
)
from crawls.config import BEHAVIORS, BROWSER_FLAGS, SCREENSHOTS, WAIT_UNTIL
from crawls.models import Org
from crawls.rules import requests_per_second
from crawls.validation import check_slug

SCOPES = ("page", "page-spa", "prefix", "host", "domain", "any", "custom")
# CrawlConfig's field names, as argparse's dests too
BROWSER_OPTIONS = ("browser", *BROWSER_FLAGS)
# The options of add_crawl_arguments: what `add` and `schedule add` both take.
CRAWL_OPTIONS = (
    "depth", "page_limit", "size_limit", "time_limit", "scope_type", "include", "exclude",
    "workers", "scale", "dedup", "qa", "host_rate", "sitemap", "sitemap_since", *BROWSER_OPTIONS,
)
MAX_SEED_FILE = 4 * 2**20  # bytes: MAX_SEEDS long URLs fit


class Command(ArchiverCommand):
    help = "Queue a crawl of one or more seed URLs; prints the new crawl's id."

    def add_arguments(self, parser):
        parser.add_argument("urls", nargs="*", metavar="URL",
                            help="http:// or https:// seed URLs (or --seed-file)")
        add_crawl_arguments(parser, dedup_default="off for a one-off crawl")
        parser.add_argument("--extra-hops", type=int_arg, default=0, help="hops beyond the scope")
        parser.add_argument("--user-agent", metavar="UA")
        parser.add_argument("--use-robots", action="store_true", help="obey robots.txt")
        parser.add_argument("--json", action="store_true", help="print the crawl as JSON")

    def run(self, *, urls, org, tags, json, seed_file, **options):
        config = parse_crawl_config({
            **seeds_given(urls, seed_file),
            **{name: options[name] for name in (*CRAWL_OPTIONS, "extra_hops", "user_agent", "use_robots")},
        })
        crawl = actions.add(find_org(org), config, tags)
        if json:
            self.write_json(crawl.summary())
        else:
            self.stdout.write(crawl.id)


def add_crawl_arguments(parser, dedup_default: str) -> None:
    """The crawl options `add` and `schedule add` share (CRAWL_OPTIONS), and --org, --tag."""
    parser.add_argument("--depth", type=int_arg, default=-1, help="link depth; -1 = unlimited")
    parser.add_argument("--limit", type=int_arg, dest="page_limit", metavar="PAGES",
                        help="stop after this many pages")
    parser.add_argument("--size-limit", type=size_arg, metavar="SIZE",
                        help="stop at this size: 500MB, 2GiB or bytes")
    parser.add_argument("--time-limit", type=duration_arg, metavar="DURATION",
                        help="stop after this running time: 90s, 30m, 2h or seconds")
    parser.add_argument("--scope", choices=SCOPES, default="prefix", dest="scope_type")
    parser.add_argument("--include", action="append", default=[], metavar="RX",
                        help="regex of URLs to include (repeatable)")
    parser.add_argument("--exclude", action="append", default=[], metavar="RX",
                        help="regex of URLs to exclude (repeatable)")
    parser.add_argument("--workers", type=int_arg, default=1, help="browser workers per instance")
    parser.add_argument("--scale", type=int_arg, default=1, help="crawler instances")
    parser.add_argument("--dedup", action=argparse.BooleanOptionalAction, default=None,
                        help="store revisit records for payloads the org kept already "
                             f"(default: {dedup_default})")
    parser.add_argument("--qa", action="store_true", default=False,
                        help="quality review once it ends and its archive is kept (as `archiver qa`)")
    parser.add_argument("--host-rate", type=arg_type(requests_per_second), metavar="PER_SECOND",
                        help="requests per second to one host, every crawl of it together "
                             "(default: ARCHIVER_HOST_RATE; 0: no limit; archiver's crawler only)")
    parser.add_argument("--seed-file", metavar="PATH|URL",
                        help="more seeds, one a line (# comments and blank lines skipped): a file, read "
                             "now, or a URL, read by the crawler when it starts")
    parser.add_argument("--sitemap", nargs="?", const="auto", metavar="URL",
                        help="queue the pages of this sitemap, or (no URL) of the sitemaps robots.txt "
                             "names, else /sitemap.xml; indexes and gzip are read")
    parser.add_argument("--sitemap-since", metavar="DATE",
                        help="only sitemap pages whose lastmod is from DATE (2026-05-01, "
                             "2026-05-01T10:00:00Z) or 'last': the start of the last complete crawl of "
                             "the same seeds")
    add_browser_arguments(parser)
    parser.add_argument("--org", default="default", metavar="SLUG")
    parser.add_argument("--tag", action="append", default=[], dest="tags", metavar="TAG")


def add_browser_arguments(parser) -> None:
    """The browser mode and options: browsertrix-crawler, or archiver's own crawler in browser
    mode (which takes all but --block-ads and --profile)."""
    group = parser.add_argument_group("browser mode and options")
    group.add_argument("--browser", action=argparse.BooleanOptionalAction, default=None,
                       help="archiver's own crawler: drive Chromium (--browser) or fetch over HTTP only "
                            "(--no-browser); default: browser when a Chromium is found (archiver doctor)")
    group.add_argument("--behaviors", metavar="A,B", help=f"in-page behaviors: {', '.join(BEHAVIORS)}")
    group.add_argument("--page-load-timeout", type=duration_arg, metavar="DURATION",
                       help="how long a page may take to load: 90s, 2m or seconds")
    group.add_argument("--post-load-delay", type=duration_arg, metavar="DURATION",
                       help="wait after a page loaded, before behaviors and screenshots")
    group.add_argument("--wait-until", metavar="A,B", help=f"when a page is loaded: {', '.join(WAIT_UNTIL)}")
    group.add_argument("--block-ads", action="store_true", help="do not load advertisements")
    group.add_argument("--screenshot", metavar="A,B", help=f"screenshots to take: {', '.join(SCREENSHOTS)} "
                            f"(default: thumbnail; none: no screenshot)")
    group.add_argument("--lang", metavar="CODE",
                       help="the browser's language, a two-letter ISO 639-1 code such as de")
    group.add_argument("--profile", metavar="NAME", help="a browser profile of the org (archiver profile add)")


def seeds_given(urls: list[str], seed_file: str | None) -> dict:
    """The config's `seeds`: the URLs on the command line, then those of a --seed-file path
    (read here, bounded: the crawl stores its seeds, so the file is not needed once it is
    added); or a --seed-file URL as `seed_file`, which the crawler reads (it adds to seeds)."""
    seeds = list(urls)
    if seed_file and seed_file.startswith(("http://", "https://")):
        if not seeds:
            raise CommandError("a --seed-file URL adds to the seeds: give at least one URL too")
        return {"seeds": seeds, "seed_file": seed_file}
    if seed_file:
        try:
            with open(seed_file, "rb") as file:
                data = file.read(MAX_SEED_FILE + 1)
        except OSError as exc:
            raise CommandError(f"--seed-file {seed_file}: {exc.strerror}") from None
        if len(data) > MAX_SEED_FILE:
            raise CommandError(f"--seed-file {seed_file}: larger than {MAX_SEED_FILE // 2**20} MiB")
        lines = (line.strip() for line in data.decode("utf-8", errors="replace").splitlines())
        seeds += [line for line in lines if line and not line.startswith("#")]
    if not seeds:
        raise CommandError("no seeds: a URL or --seed-file is required")
    return {"seeds": seeds}


def find_org(slug: str) -> Org:
    try:
        check_slug(slug)
        return Org.objects.get(slug=slug)
    except ValueError as exc:
        raise CommandError(f"--org: {exc}") from None
    except Org.DoesNotExist:
        raise CommandError(f"no org {slug!r} (create it with: archiver org set {slug})") from None


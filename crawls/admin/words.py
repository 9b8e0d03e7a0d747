"""The admin's words for a crawl's state: the 18 internal states (crawls/models/statuses.py)
in six groups a person asks about — active, waiting, paused, done, stopped, failed — each
with a colour, and a one-line reason when the crawl has none of its own; readable summaries
of seeds and configuration instead of JSON.

One mapping, so the list, the filter, the crawl's page and the home page say the same.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.utils.html import format_html, format_html_join
from django.utils.text import capfirst

from crawls.config import human_size
from crawls.models import CrawlStatus
from crawls.reasons import reason_line

S = CrawlStatus

# group -> the internal states in it
GROUPS = {
    "active": (S.STARTING, S.RUNNING, S.PENDING_WAIT, S.GENERATE_WACZ),
    "waiting": S.NOT_STARTED,
    "paused": (S.PAUSED,),
    "done": (S.COMPLETE,),
    "stopped": (S.STOPPED_BY_USER, S.STOPPED_QUOTA_REACHED, S.STOPPED_TIME_LIMIT,
                S.STOPPED_SIZE_LIMIT, S.STOPPED_PAGE_LIMIT, S.STOPPED_PAUSE_LIMIT,
                S.SKIPPED_QUOTA_REACHED, S.CANCELED),
    "failed": (S.FAILED,),
}
GROUP_OF = {status: group for group, statuses in GROUPS.items() for status in statuses}

# What the state means when the crawl stores no reason of its own.
MEANING = {
    S.QUEUED: "waiting for a runner to start it",
    S.STARTING: "its crawlers are starting",
    S.WAITING_CAPACITY: "waiting for room on the host",
    S.WAITING_ORG_LIMIT: "its org already runs its maximum of crawls",
    S.RUNNING: "crawling",
    S.PENDING_WAIT: "some crawlers finished; waiting for the others",
    S.GENERATE_WACZ: "packaging its archive",
    S.PAUSED: "paused; its queue is kept for resume",
    S.COMPLETE: "every page it found is done",
    S.STOPPED_BY_USER: "stopped on request; its archive is kept",
    S.STOPPED_QUOTA_REACHED: "its org's quota was reached",
    S.STOPPED_TIME_LIMIT: "its running-time limit was reached",
    S.STOPPED_SIZE_LIMIT: "its size limit was reached",
    S.STOPPED_PAGE_LIMIT: "its page limit was reached",
    S.STOPPED_PAUSE_LIMIT: "it stayed paused longer than allowed",
    S.SKIPPED_QUOTA_REACHED: "never started: its org's storage quota was full",
    S.FAILED: "no page could be archived, or a permanent error",
    S.CANCELED: "canceled on request; partial files discarded",
}


def group_of(crawl) -> str:
    return GROUP_OF.get(crawl.status, "failed")  # an unknown stored state is not hidden as fine


def state_words(crawl) -> str:
    """`active`, or `active, pause requested`."""
    return group_of(crawl) + (f", {crawl.intent} requested" if crawl.intent else "")


def one_line_reason(crawl) -> str:
    return reason_line(crawl) or MEANING.get(crawl.status, crawl.status)


def cut(text) -> str:
    """A value of a table cut to one line with …, whole in its title (admin.css `.cut`)."""
    text = str(text) if text not in (None, "") else "-"
    return format_html('<span class="cut" title="{}">{}</span>', text, text)


def state_badge(crawl):
    """The coloured state word, its internal state in the title for operators."""
    return format_html('<span class="state state-{}" title="{}">{}</span>',
                       group_of(crawl), crawl.status, state_words(crawl))


class PlainTitles:
    """Page titles in words — "Webhooks", "Webhook https://…", "Add a webhook" — where Django
    says "Select webhook to change" and "Change webhook". Mixed in before ModelAdmin."""

    def changelist_view(self, request, extra_context=None):
        title = capfirst(self.model._meta.verbose_name_plural)
        return super().changelist_view(request, {"title": title, **(extra_context or {})})

    def add_view(self, request, form_url="", extra_context=None):
        name = self.model._meta.verbose_name
        article = "an" if name[:1].lower() in "aeiou" else "a"
        return super().add_view(request, form_url, {"title": f"Add {article} {name}", **(extra_context or {})})

    def change_view(self, request, object_id, form_url="", extra_context=None):
        obj = self.get_object(request, unquote(object_id))
        if obj is not None:
            extra_context = {"title": f"{capfirst(self.model._meta.verbose_name)} {obj}", "subtitle": None,
                             **(extra_context or {})}
        return super().change_view(request, object_id, form_url, extra_context)


class StateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [(group, group) for group in GROUPS]

    def queryset(self, request, queryset):
        if self.value() in GROUPS:
            return queryset.filter(status__in=GROUPS[self.value()])
        return queryset


def seeds_html(seeds):
    """Each seed on its own line, wrapped, the whole URL a click away (a link)."""
    seeds = [seed for seed in seeds if isinstance(seed, str)] if isinstance(seeds, list) else []
    if not seeds:
        return "-"
    return format_html('<ul class="seed-list">{}</ul>', format_html_join(
        "", '<li><a class="long-value" href="{}" rel="noreferrer" title="{}">{}</a></li>',
        ((seed, seed, seed) for seed in seeds)))


def limit(value, shown) -> str:
    return "none" if value in (None, "", -1) else shown(value)


def config_rows(config: dict) -> list[tuple[str, str]]:
    """The configuration as labelled sentences; seeds are shown on their own."""
    config = config if isinstance(config, dict) else {}
    rows = [
        ("scope", str(config.get("scope_type", "prefix"))),
        ("link depth", limit(config.get("depth", -1), str).replace("none", "unlimited")),
        ("extra hops", str(config.get("extra_hops", 0))),
        ("page limit", limit(config.get("page_limit"), lambda v: f"{v} pages")),
        ("size limit", limit(config.get("size_limit"), human_size)),
        ("time limit", limit(config.get("time_limit"), lambda v: f"{v} s")),
        ("crawlers", f"{config.get('scale', 1)} instance(s), {config.get('workers', 1)} worker(s) each"),
        ("robots.txt", "obeyed" if config.get("use_robots") else "not obeyed"),
    ]
    for key, label in (("include", "only URLs matching"), ("exclude", "URLs excluded")):
        if config.get(key):
            rows.append((label, ", ".join(map(str, config[key]))))
    if config.get("browser") is not None:
        rows.append(("crawler", "a browser (Chromium) loads each page" if config["browser"]
                     else "HTTP only, no browser"))
    shown = {"seeds", "scope_type", "depth", "extra_hops", "page_limit", "size_limit", "time_limit",
             "scale", "workers", "use_robots", "include", "exclude", "browser"}
    rows += [option_words(key, value)
             for key, value in config.items() if key not in shown and value not in (None, False, "", [])]
    return rows


# The other options as people say them (a switch that is on, a number with its unit).
OPTION_WORDS = {
    "qa": ("quality review", lambda value: "once it ends"),
    "dedup": ("deduplication", lambda value: "on"),
    "block_ads": ("ads", lambda value: "blocked"),
    "page_load_timeout": ("page load timeout", lambda value: f"{value} s"),
    "post_load_delay": ("post-load delay", lambda value: f"{value} s"),
    "lang": ("language", str),
    "host_rate": ("host rate", lambda value: f"{value:g} requests a second to one host"),
    "sitemap": ("sitemap", lambda value: "found through robots.txt" if value == "auto" else value),
    "seed_file": ("more seeds from", str),
    "sitemap_since": ("sitemap pages modified since",
                      lambda value: "the last complete crawl" if value == "last" else value),
}


def option_words(key: str, value) -> tuple[str, str]:
    if key in OPTION_WORDS:
        label, shown = OPTION_WORDS[key]
        return label, shown(value)
    if value is True:
        return key.replace("_", " "), "yes"
    return key.replace("_", " "), ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def config_html(config: dict):
    return format_html('<dl class="config-summary">{}</dl>', format_html_join(
        "", "<dt>{}</dt><dd>{}</dd>", config_rows(config)))

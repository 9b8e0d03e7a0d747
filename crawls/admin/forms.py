"""The admin's crawl form: the fields of `archiver add`, typed the way the CLI takes them.

Each field is read with the CLI's own parser (whole numbers, sizes such as 500MB,
durations such as 2h, one seed or pattern per line); the crawl configuration is then
judged by `CrawlConfig.parse` alone, the same call behind `archiver add`, so the admin
refuses exactly what the CLI refuses, in the same words. The schedule form is the same
form plus a cron expression.
"""

from __future__ import annotations

import datetime as dt
from typing import get_args

from django import forms

from archiver.conf import duration_in_seconds, parse_duration
from archiver.errors import ActionRefused, ConfigError
from crawls import alerts, schedules
from crawls.actions import check_tags
from crawls.cli import whole_number
from crawls.config import BEHAVIORS, SCREENSHOTS, WAIT_UNTIL, CrawlConfig, ScopeType, parse_size
from crawls.lease import db_now
from crawls.models import BrowserProfile, Org, Schedule
from crawls.rules import requests_per_second

SCOPES = get_args(ScopeType)
BROWSER_FIELDS = ("browser", "behaviors", "page_load_timeout", "post_load_delay", "wait_until", "block_ads",
                  "screenshot", "lang", "profile")
BROWSER_CHOICES = {"auto": None, "on": True, "off": False}
CONFIG_FIELDS = ("seeds", "scope_type", "depth", "extra_hops", "page_limit", "size_limit",
                 "time_limit", "include", "exclude", "workers", "scale", "user_agent", "use_robots",
                 "dedup", "qa", "host_rate", "sitemap", "sitemap_since", "seed_file", *BROWSER_FIELDS)
TEXT_FIELDS = ("user_agent", "behaviors", "wait_until", "screenshot", "lang", "profile", "sitemap",
               "sitemap_since", "seed_file")  # "" = not set


class ParsedField(forms.CharField):
    """Text read by one of the CLI's parsers; its ValueError is the form's error message."""

    def __init__(self, parse, *, show=str, **kwargs):
        self.parse, self.show = parse, show
        kwargs.setdefault("required", False)
        kwargs.setdefault("widget", forms.TextInput(attrs={"size": 12}))
        super().__init__(**kwargs)

    def prepare_value(self, value):
        return self.show(value) if isinstance(value, int) and not isinstance(value, bool) else value

    def to_python(self, value):
        value = super().to_python(value)
        if value in self.empty_values:
            return None
        try:
            return self.parse(value)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


class LinesField(forms.CharField):
    """One value per line; blank lines are ignored."""

    def __init__(self, **kwargs):
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 3, "cols": 80, "wrap": "off"}))
        super().__init__(strip=False, **kwargs)

    def prepare_value(self, value):
        return "\n".join(value) if isinstance(value, list | tuple) else value

    def to_python(self, value):
        value = super().to_python(value) or ""
        return [line.strip() for line in value.splitlines() if line.strip()]


class TagsWidget(forms.TextInput):
    """A text input that crawls/static/crawls/tags.js turns into removable chips."""

    class Media:
        js = ["crawls/tags.js"]

    def __init__(self):
        super().__init__(attrs={"size": 60, "class": "tags-input", "data-tags": "1",
                                "placeholder": "weekly, news"})

    def format_value(self, value):
        return ", ".join(value) if isinstance(value, list | tuple) else value


class TagsField(forms.CharField):
    """Tags typed as `weekly, news`; each is checked like `archiver add --tag`."""

    widget = TagsWidget

    def __init__(self, **kwargs):
        super().__init__(required=False, **kwargs)

    def to_python(self, value):
        tags = [tag for tag in (super().to_python(value) or "").split(",") if tag.strip()]
        try:
            return check_tags(tags)
        except ActionRefused as exc:
            raise forms.ValidationError(str(exc)) from None


def exact_size(value: int) -> str:
    """Bytes as the largest unit that shows them exactly (`500MB`, `2GiB`, `1234`)."""
    for unit, size in (("TB", 10**12), ("TiB", 2**40), ("GB", 10**9), ("GiB", 2**30),
                       ("MB", 10**6), ("MiB", 2**20), ("KB", 10**3), ("KiB", 2**10)):
        if value % size == 0:
            return f"{value // size}{unit}"
    return str(value)


def exact_duration(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


class CrawlConfigForm(forms.Form):
    """The fields of a CrawlConfig; `clean()` leaves the validated config in `self.config`."""

    seeds = LinesField(help_text="One http:// or https:// URL per line.",
                       widget=forms.Textarea(attrs={"rows": 4, "cols": 80, "wrap": "off"}))
    scope_type = forms.ChoiceField(label="Scope", choices=[(s, s) for s in SCOPES], initial="prefix",
                                   help_text="Which links are followed: the seed page only, "
                                             "its URL prefix, its host, its domain, or any.")
    depth = ParsedField(whole_number, initial=-1, help_text="Link depth; -1 = unlimited.")
    extra_hops = ParsedField(whole_number, initial=0, help_text="Hops beyond the scope.")
    page_limit = ParsedField(whole_number, label="Page limit", help_text="Empty = no limit.")
    size_limit = ParsedField(parse_size, show=exact_size, label="Size limit",
                             help_text="For example 500MB or 2GiB; empty = no limit.")
    time_limit = ParsedField(parse_duration, show=exact_duration, label="Time limit",
                             help_text="Running time: 90s, 30m, 2h or 7d; empty = no limit.")
    include = LinesField(required=False, help_text="Regular expressions of URLs to include, one per line.")
    exclude = LinesField(required=False, help_text="Regular expressions of URLs to skip, one per line.")
    workers = ParsedField(whole_number, initial=1, help_text="Browser workers per instance.")
    scale = ParsedField(whole_number, initial=1, help_text="Crawler instances.")
    user_agent = forms.CharField(required=False, label="User agent", strip=False,
                                 widget=forms.TextInput(attrs={"size": 80}))
    use_robots = forms.BooleanField(required=False, label="Obey robots.txt")
    dedup = forms.NullBooleanField(
        required=False, label="Deduplicate",
        widget=forms.Select(choices=[("", "Default (on for schedules, off for one-off crawls)"),
                                     ("true", "Yes"), ("false", "No")]),
        help_text="Store revisit records for payloads the org kept already (docs/storage.md).")
    qa = forms.BooleanField(required=False, label="Quality review",
                            help_text="Replay its pages from the archive once it ends and score them "
                                      "(docs/cli.md#qa).")
    host_rate = ParsedField(requests_per_second, label="Host rate",
                            help_text="Requests per second to one host, every crawl of it together "
                                      "(archiver's crawler); empty = ARCHIVER_HOST_RATE, 0 = no limit.")
    sitemap = forms.CharField(required=False, widget=forms.TextInput(attrs={"size": 80}),
                              help_text="Also crawl the pages a sitemap lists: its URL, or auto (those "
                                        "robots.txt names, else /sitemap.xml); empty = none.")
    seed_file = forms.CharField(required=False, label="Seed file", widget=forms.TextInput(attrs={"size": 80}),
                                help_text="More seeds: the URL of a file of URLs, one a line, that the "
                                          "crawler reads when it starts; empty = none.")
    sitemap_since = forms.CharField(required=False, label="Sitemap since",
                                    help_text="Only sitemap pages whose lastmod is from then: a date "
                                              "(2026-05-01) or last (the start of the last complete "
                                              "crawl of the same seeds).")
    # The CLI's --browser/--no-browser/neither, and its browser options --behaviors ... --profile.
    browser = forms.TypedChoiceField(
        required=False, label="Browser", initial="auto", empty_value=None,
        choices=[(choice, choice) for choice in BROWSER_CHOICES],
        coerce=BROWSER_CHOICES.get,
        help_text="archiver's own crawler: drive Chromium (on) or fetch over HTTP only (off); auto = on "
                  "when a Chromium is found (archiver doctor says). Fixed when the crawl is added.",
    )
    behaviors = forms.CharField(required=False, help_text=f"Browser only. Comma-separated: {', '.join(BEHAVIORS)}; "
                                                          "empty = the crawler's default.")
    page_load_timeout = ParsedField(duration_in_seconds, show=exact_duration, label="Page load timeout",
                                    help_text="Browser only. 90s, 2m or seconds; empty = the crawler's default.")
    post_load_delay = ParsedField(duration_in_seconds, show=exact_duration, label="Post-load delay",
                                  help_text="Browser only. Wait after a page loaded, before behaviors.")
    wait_until = forms.CharField(required=False, label="Wait until",
                                 help_text=f"Browser only. Comma-separated: {', '.join(WAIT_UNTIL)}.")
    block_ads = forms.BooleanField(required=False, label="Block ads", help_text="Browser only.")
    screenshot = forms.CharField(required=False, label="Screenshots",
                                 help_text=f"Browser only. Comma-separated: {', '.join(SCREENSHOTS)}; "
                                           f"empty: a thumbnail; none: no screenshot.")
    lang = forms.CharField(required=False, label="Language", widget=forms.TextInput(attrs={"size": 12}),
                           help_text="Browser only. A two-letter ISO 639-1 code such as de.")
    profile = forms.CharField(required=False, label="Browser profile",
                              help_text="Browser only. The name of one of the org's profiles "
                                        "(archiver profile add).")

    config: CrawlConfig | None = None

    def clean(self):
        cleaned = super().clean()
        if any(name in self.errors for name in CONFIG_FIELDS):
            return cleaned  # a field the CLI's parsers refused already says why
        values = {name: cleaned.get(name) for name in CONFIG_FIELDS}
        # What the CLI leaves at its default when an option is not given.
        for name, default in (("depth", -1), ("extra_hops", 0), ("workers", 1), ("scale", 1)):
            if values[name] is None:
                values[name] = default
        for name in TEXT_FIELDS:
            values[name] = values[name] or None
        try:
            self.config = CrawlConfig.parse(**values)
        except ConfigError as exc:
            field = field_named_in(str(exc), self.fields)
            # Next to its field, the line needs no field name: it reads as the CLI's message.
            self.add_error(field, str(exc).split(": ", 1)[1] if field else str(exc))
            return cleaned
        org = cleaned.get("org")
        try:
            if org is not None:
                BrowserProfile.require(org, self.config.profile)
        except ConfigError as exc:
            self.add_error("profile", str(exc))
        return cleaned


def field_named_in(message: str, fields) -> str | None:
    """The form field an error line such as `seeds.0: ...` or `depth: ...` is about."""
    head = message.split(":", 1)[0].split(".", 1)[0].strip()
    return head if head in fields and head in CONFIG_FIELDS else None


def config_initial(config: dict) -> dict:
    """Form values showing a stored config (for "run again" and schedules)."""
    initial = {name: config[name] for name in CONFIG_FIELDS if name in config}
    for name in ("page_limit", "size_limit", "time_limit", *TEXT_FIELDS, "page_load_timeout",
                 "post_load_delay"):
        if initial.get(name) is None:
            initial.pop(name, None)
    if "browser" in initial:
        initial["browser"] = {True: "on", False: "off"}.get(initial["browser"], "auto")
    for name in ("behaviors", "wait_until", "screenshot"):  # lists, typed comma-separated
        if name in initial:
            initial[name] = ",".join(initial[name])
    return initial


class CrawlForm(CrawlConfigForm):
    """A new crawl: the configuration, its org and its tags."""

    org = forms.ModelChoiceField(queryset=Org.objects.all(), empty_label=None)
    tags = TagsField(help_text="Comma-separated, for example: weekly, news.")

    field_order = ["seeds", "org", "tags"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "org" not in self.initial:
            self.initial["org"] = Org.objects.filter(slug="default").values_list("pk", flat=True).first()


class ScheduleForm(CrawlConfigForm, forms.ModelForm):
    """A schedule: the crawl form plus a cron expression; its config is stored validated."""

    tags = TagsField(help_text="Comma-separated; every crawl of the schedule gets them.")
    watch_what = forms.ChoiceField(
        label="Alert when", required=False, initial="",
        choices=[("", "never (no change alerts)"), ("pages", "any page changed"),
                 ("urls", "one of these pages changed"), ("selector", "what a CSS selector selects changed")],
        help_text="A crawl.changed webhook event after a crawl that differs from the one before.")
    watch_urls = forms.CharField(label="Pages watched", required=False, widget=forms.Textarea(attrs={"rows": 3}),
                                 help_text="One URL a line, for “one of these pages changed”.")
    watch_selector = forms.CharField(label="CSS selector", required=False, max_length=500,
                                     help_text="Tag, .class, #id and descendants, e.g. main .price")

    class Meta:
        model = Schedule
        fields = ("org", "cron", "enabled")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial.update(config_initial(self.instance.config))
            self.initial["tags"] = self.instance.tags
            watch = self.instance.watch or {}
            self.initial["watch_what"] = next((key for key in ("pages", "urls", "selector") if watch.get(key)), "")
            self.initial["watch_urls"] = "\n".join(watch.get("urls", []))
            self.initial["watch_selector"] = watch.get("selector", "")
        self.watch = None

    def clean(self):
        cleaned = super().clean()
        what = cleaned.get("watch_what", "")
        urls = (cleaned.get("watch_urls") or "").split() if what == "urls" else []
        selector = (cleaned.get("watch_selector") or "").strip() if what == "selector" else None
        if what == "urls" and not urls:
            self.add_error("watch_urls", "Name at least one page to watch.")
        elif what == "selector" and not selector:
            self.add_error("watch_selector", "Give the selector to watch.")
        else:
            try:
                self.watch = alerts.parse_watch(what == "pages", urls, selector)
            except ValueError as exc:
                self.add_error("watch_urls" if what == "urls" else "watch_selector", str(exc))
        return cleaned

    def clean_cron(self):
        try:
            return schedules.check_cron(self.cleaned_data["cron"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def save(self, commit=True):
        if self.config is not None:
            self.instance.config = self.config.model_dump(mode="json")
        self.instance.tags = self.cleaned_data.get("tags") or []
        self.instance.watch = self.watch
        self.instance.watch_since = alerts.watch_since(self.instance, self.watch, db_now())
        return super().save(commit)


def next_runs(cron: str, now: dt.datetime, count: int = 5) -> list[dt.datetime]:
    """The next `count` slots of a cron expression after `now` (UTC)."""
    slots, after = [], now
    for _ in range(count):
        after = schedules.next_slot(cron, after)
        slots.append(after)
    return slots

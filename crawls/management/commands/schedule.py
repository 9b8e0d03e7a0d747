"""`archiver schedule add|list|enable|disable|watch|remove`: crawls queued by a cron entry (UTC)."""

from __future__ import annotations

from django.core.management.base import CommandError
from rich.table import Table

from crawls import alerts, schedules, wake
from crawls.actions import check_tags
from crawls.cli import (
    MAX_ID,
    ArchiverCommand,
    OneLineParser,
    age,
    check_range,
    parse_crawl_config,
)
from crawls.lease import db_now
from crawls.management.commands.add import (
    CRAWL_OPTIONS,
    add_crawl_arguments,
    find_org,
    seeds_given,
)
from crawls.models import Schedule
from crawls.rules import shown
from crawls.validation import check_cron_text


class Command(ArchiverCommand):
    help = "Queue a crawl at every slot of a cron expression (UTC); list, enable or disable them."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, parser_class=OneLineParser,
                                        metavar="{add,list,enable,disable,watch,remove}")
        adder = actions.add_parser("add", help="schedule a crawl of these seeds")
        adder.add_argument("cron", metavar="CRON", help="e.g. '0 3 * * *' (quote it)")
        adder.add_argument("urls", nargs="*", metavar="URL", help="seed URLs (or --seed-file)")
        add_crawl_arguments(adder, dedup_default="on for a schedule's crawls")
        add_watch_arguments(adder)
        lister = actions.add_parser("list", help="schedules with their next run and last crawl")
        lister.add_argument("--json", action="store_true")
        for name in ("enable", "disable"):
            toggle = actions.add_parser(name, help=f"{name} a schedule")
            toggle.add_argument("id", metavar="ID")
        watcher = actions.add_parser("watch", help="what change alerts (crawl.changed) watch")
        watcher.add_argument("id", metavar="ID")
        add_watch_arguments(watcher)
        watcher.add_argument("--none", action="store_true", dest="watch_none",
                             help="no change alerts (the default)")
        add_remove_parser(actions)

    def run(self, *, action, **options):
        if "id" in options:
            check_schedule_id(options["id"])
        getattr(self, f"do_{action}")(**options)

    def do_add(self, *, cron, urls, org, tags, seed_file, **options):
        cron = check_cron_text(cron)
        config = parse_crawl_config({**seeds_given(urls, seed_file), **{name: options[name] for name in CRAWL_OPTIONS}})
        watch = watch_from(options)
        now = db_now()
        schedule = schedules.create_schedule(find_org(org), cron, config, check_tags(tags), now=now)
        if watch:
            alerts.set_watch(schedule, watch, now)
        wake.nudge()
        self.stdout.write(f"schedule {schedule.pk}: next run {iso(schedule.retry_at)}")

    def do_enable(self, *, id, **options):
        schedule = schedules.find(id)
        schedules.enable(schedule, db_now())
        wake.nudge()
        self.stdout.write(f"enabled schedule {schedule.pk}: next run {iso(schedule.retry_at)}")

    def do_disable(self, *, id, **options):
        schedule = schedules.find(id)
        schedules.disable(schedule)
        self.stdout.write(f"disabled schedule {schedule.pk}")

    def do_watch(self, *, id, watch_none, **options):
        watch = watch_from(options)
        if watch_none == bool(watch):
            raise CommandError("say what to watch: --watch-pages, --watch-url URL, "
                               "--watch-selector CSS, or --none")
        schedule = schedules.find(id)
        alerts.set_watch(schedule, watch, db_now())
        self.stdout.write(f"schedule {schedule.pk} watches: {alerts.describe(watch)}")

    def do_remove(self, *, id, **options):
        schedule = schedules.find(id)
        Schedule.objects.filter(pk=schedule.pk).delete()  # its crawls stay (schedule = NULL)
        self.stdout.write(f"removed schedule {schedule.pk}")

    def do_list(self, *, json, **options):
        rows = list(Schedule.objects.select_related("org", "last_crawl").order_by("id"))
        if json:
            self.write_json([summary(schedule) for schedule in rows])
            return
        now = db_now()
        table = Table(box=None, header_style="bold", pad_edge=False)
        for column in ("ID", "CRON", "ORG", "SEEDS", "NEXT RUN (UTC)", "LAST CRAWL", "STATE", "WATCH"):
            table.add_column(column, no_wrap=True)
        for schedule in rows:
            last = schedule.last_crawl
            table.add_row(
                str(schedule.pk), schedule.cron, schedule.org.slug, seeds_text(schedule),
                iso(schedule.retry_at) if schedule.enabled else "disabled",
                f"{last.short_id} ({age(last.created_at, now)} ago)" if last else "-",
                last.status if last else "-", alerts.describe(schedule.watch),
            )
        self.render(table)


def check_schedule_id(text: str) -> None:
    """A number from 1 to MAX_ID, before schedules.find() puts it in a query."""
    if not (text.isascii() and text.isdigit()):
        raise CommandError(f"{shown(text)} is not a schedule id (ids are numbers; see: schedule list)")
    if len(text) > 40:  # far past MAX_ID; int() would refuse with its own words
        raise CommandError(f"ID {shown(text)}: must be from 1 to {MAX_ID}")
    check_range("ID", int(text), 1, MAX_ID)


def seeds_text(schedule: Schedule) -> str:
    seeds = schedule.config.get("seeds", [])
    return seeds[0] + (f" (+{len(seeds) - 1})" if len(seeds) > 1 else "") if seeds else "-"


def iso(value) -> str | None:
    return value.strftime("%Y-%m-%d %H:%M") if value else None


def summary(schedule: Schedule) -> dict:
    last = schedule.last_crawl
    return {
        "id": schedule.pk,
        "cron": schedule.cron,
        "org": schedule.org.slug,
        "enabled": schedule.enabled,
        "seeds": schedule.config.get("seeds", []),
        "config": schedule.config,
        "tags": schedule.tags,
        "watch": schedule.watch,
        "next_run": schedule.retry_at.isoformat().replace("+00:00", "Z")
        if schedule.enabled and schedule.retry_at else None,
        "last_crawl": {"id": last.id, "status": last.status} if last else None,
    }


def add_watch_arguments(parser) -> None:
    parser.add_argument("--watch-pages", action="store_true",
                        help="alert (crawl.changed) when any page changed since the last crawl")
    parser.add_argument("--watch-url", action="append", default=[], metavar="URL",
                        help="alert when this page changed (repeat for more)")
    parser.add_argument("--watch-selector", metavar="CSS",
                        help="alert when what this selector selects changed (tag, .class, #id, descendants)")


def watch_from(options) -> dict | None:
    try:
        return alerts.parse_watch(options["watch_pages"], options["watch_url"], options["watch_selector"])
    except ValueError as exc:
        raise CommandError(f"--watch: {exc}") from None


def add_remove_parser(actions) -> None:
    remover = actions.add_parser("remove", help="remove a schedule (the crawls it queued stay)")
    remover.add_argument("id", metavar="ID")

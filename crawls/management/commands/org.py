"""`archiver org set|list|delete`: organisations and their quotas."""

from __future__ import annotations

from django.core.management.base import CommandError
from django.db.models import Count, FloatField, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce
from rich.table import Table

from archiver.errors import ConfigError
from crawls.cli import ArchiverCommand, OneLineParser, optional_quota, whole_number
from crawls.config import human_size, size_in_bytes
from crawls.lease import db_now
from crawls.models import CrawlStatus, Org, OrgUsage, month_start
from crawls.validation import OrgInput

# How each quota option is read (`none` clears any of them: unlimited), and its column.
# The ranges are OrgInput's, the same for the admin: 1 up, never 0.
QUOTAS = {
    "max_concurrent_crawls": optional_quota(whole_number),
    "storage_quota": optional_quota(size_in_bytes),
    "exec_minutes": optional_quota(whole_number),
    "max_pages": optional_quota(whole_number),
}
FIELD_FOR_OPTION = {
    "max_concurrent_crawls": "max_concurrent_crawls",
    "storage_quota": "storage_quota_bytes",
    "exec_minutes": "exec_minutes_quota",
    "max_pages": "max_pages_per_crawl",
}
OPTION_FOR_FIELD = {field: "--" + option.replace("_", "-") for option, field in FIELD_FOR_OPTION.items()}
UNSET = object()


class Command(ArchiverCommand):
    help = "Create or update an org and its quotas (org set), or list orgs with usage (org list)."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="{set,list,delete}",
                                        parser_class=OneLineParser)
        setter = actions.add_parser("set", help="create or update an org")
        setter.add_argument("slug", metavar="SLUG")
        setter.add_argument("--name")
        setter.add_argument("--max-concurrent-crawls", type=QUOTAS["max_concurrent_crawls"],
                            default=UNSET, metavar="N")
        setter.add_argument("--storage-quota", type=QUOTAS["storage_quota"], default=UNSET,
                            metavar="SIZE", help="500GB, 2TiB, bytes, or none")
        setter.add_argument("--exec-minutes", type=QUOTAS["exec_minutes"], default=UNSET,
                            metavar="N", help="crawler minutes per month, or none")
        setter.add_argument("--max-pages", type=QUOTAS["max_pages"], default=UNSET,
                            metavar="N", help="pages per crawl, or none")
        lister = actions.add_parser("list", help="list orgs with their usage")
        lister.add_argument("--json", action="store_true")
        add_delete_parser(actions)

    def run(self, *, action, **options):
        if action == "set":
            self.set_org(**options)
        elif action == "delete":
            self.stdout.write(delete_org(options["slug"]))
        else:
            self.list_orgs(options["json"])

    def set_org(self, *, slug, name, **options):
        values = {
            FIELD_FOR_OPTION[option]: options[option]
            for option in FIELD_FOR_OPTION if options[option] is not UNSET
        }
        if name is not None:
            values["name"] = name
        try:
            org_input = OrgInput.parse(slug=slug, **values)
        except ConfigError as exc:
            raise CommandError(option_named(str(exc))) from None
        org, created = Org.objects.update_or_create(slug=slug, defaults=org_input.changes())
        self.stdout.write(f"{'created' if created else 'updated'} org {org.slug}")

    def list_orgs(self, as_json: bool):
        orgs = orgs_with_usage(db_now())
        if as_json:
            self.write_json([org_summary(org) for org in orgs])
            return
        table = Table(box=None, header_style="bold", pad_edge=False)
        for column in ("SLUG", "NAME", "ACTIVE", "STORED", "EXEC MIN (MONTH)", "MAX CRAWLS", "MAX PAGES"):
            table.add_column(column, no_wrap=True)
        for org in orgs:
            table.add_row(
                org.slug, org.name,
                f"{org.active_count}",
                used_of(human_size(org.bytes_stored),
                        None if org.storage_quota_bytes is None else human_size(org.storage_quota_bytes)),
                used_of(f"{org.month_seconds / 60:.0f}", org.exec_minutes_quota),
                # As the runner reads them: a concurrency of 0 admits nothing, while a
                # page limit of 0 is no limit (Crawl.effective_page_limit). Only old rows hold 0.
                quota_text(org.max_concurrent_crawls), quota_text(org.max_pages_per_crawl or None),
            )
        self.render(table)


def option_named(message: str) -> str:
    """`storage_quota_bytes: ...` as the user typed it: `--storage-quota: ...`."""
    field, sep, rest = message.partition(": ")
    if field == "slug":
        return rest
    return f"{OPTION_FOR_FIELD.get(field, '--' + field)}: {rest}" if sep else message


def quota_text(quota: int | None) -> str:
    """`-` for no quota, else the number (a 0 the runner enforces shows as 0)."""
    return "-" if quota is None else str(quota)


def used_of(used: str, quota) -> str:
    return used if quota is None else f"{used} / {quota}"


def orgs_with_usage(now):
    this_month = OrgUsage.objects.filter(org=OuterRef("pk"), month=month_start(now))
    return list(Org.objects.annotate(
        active_count=Count("crawls", filter=Q(crawls__status__in=CrawlStatus.ACTIVE)),
        month_seconds=Coalesce(Subquery(this_month.values("exec_seconds")[:1]), Value(0.0),
                               output_field=FloatField()),
    ).order_by("slug"))


def org_summary(org: Org) -> dict:
    return {
        "slug": org.slug,
        "name": org.name,
        "max_concurrent_crawls": org.max_concurrent_crawls,
        "storage_quota_bytes": org.storage_quota_bytes,
        "exec_minutes_quota": org.exec_minutes_quota,
        "max_pages_per_crawl": org.max_pages_per_crawl,
        "bytes_stored": org.bytes_stored,
        "exec_minutes_this_month": round(org.month_seconds / 60, 2),
        "active_crawls": org.active_count,
    }


def add_delete_parser(actions) -> None:
    deleter = actions.add_parser("delete", help="delete an org that has no crawls left")
    deleter.add_argument("slug", metavar="SLUG")


def delete_org(slug: str) -> str:
    """Delete an org with its schedules and webhooks; refused while a crawl or a browser
    profile belongs to it."""
    org = Org.objects.filter(slug=slug).first()
    if org is None:
        raise CommandError(f"no org {slug!r} (see `archiver org list`)")
    crawls = org.crawls.count()
    if crawls:
        raise CommandError(f"org {slug} still has {crawls} crawl(s): delete them first "
                           f"(archiver delete ID), or keep the org")
    profiles = org.browser_profiles.count()
    if profiles:  # files of its own: removed one by one, by name
        raise CommandError(f"org {slug} still has {profiles} browser profile(s): remove them first "
                           f"(archiver profile remove NAME --org {slug})")
    org.delete()
    return f"deleted org {slug}"

"""`archiver webhook add|list|remove|deliveries|replay|test`: where crawl events are POSTed.

A URL is checked with the same SSRF rules the runner applies at delivery (crawls.ssrf)
before anything is written. Secrets are write-only: no subcommand prints one, and `add`
reads its secret from a file, stdin or a prompt, never from its arguments (crawls/secret_input.py).
"""

from __future__ import annotations

from django.core.management.base import CommandError
from rich.table import Table

from crawls import ssrf
from crawls.actions import replay_delivery
from crawls.cli import MAX_ID, ArchiverCommand, OneLineParser, age, check_range, int_arg
from crawls.lease import db_now
from crawls.models import DeliveryStatus, Org, Webhook, WebhookDelivery
from crawls.secret_input import add_secret_file_option, read_secret
from crawls.validation import WebhookInput
from crawls.webhooks import shown_url

MAX_LISTED = 100_000


class Command(ArchiverCommand):
    help = "Add, list and remove webhooks; list, replay and test their deliveries."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, parser_class=OneLineParser,
                                        metavar="{add,list,remove,enable,disable,deliveries,replay,test}")
        add = actions.add_parser("add", help="POST crawl events to URL, signed with a secret")
        add.add_argument("url", metavar="URL")
        add_secret_file_option(add, "--secret", "webhook secret (the HMAC-SHA256 key receivers verify with)")
        add.add_argument("--events", default="", metavar="A,B",
                         help="event names, comma-separated (default: every event)")
        add.add_argument("--org", metavar="SLUG", help="only this org's crawls (default: all orgs)")
        add.add_argument("--json", action="store_true")
        lister = actions.add_parser("list", help="list webhooks (never their secrets)")
        lister.add_argument("--json", action="store_true")
        remove = actions.add_parser("remove", help="remove a webhook and its deliveries")
        remove.add_argument("id", type=int_arg, metavar="ID")
        add_toggle_parsers(actions)
        deliveries = actions.add_parser("deliveries", help="list deliveries, newest first")
        deliveries.add_argument("--failed", action="store_true", help="only dead letters")
        deliveries.add_argument("--webhook", type=int_arg, metavar="ID")
        deliveries.add_argument("--limit", type=int_arg, default=50, metavar="N")
        deliveries.add_argument("--json", action="store_true")
        replay = actions.add_parser("replay", help="deliver a failed delivery again, from scratch")
        replay.add_argument("id", type=int_arg, metavar="DELIVERY_ID")

    def run(self, *, action, **options):
        getattr(self, action)(**options)

    def add(self, *, url, secret_file, secret_in_argv, events, org, json, **_):
        secret = read_secret(secret_file, "webhook secret", secret_in_argv=secret_in_argv)
        hook = WebhookInput.parse(url=url, secret=secret, events=events.split(","), org=org)
        owner = None
        if hook.org is not None:
            owner = Org.objects.filter(slug=hook.org).first()
            if owner is None:
                raise CommandError(f"no org {hook.org!r} (see `archiver org list`)")
        hook.check_destination()
        row = Webhook.objects.create(url=hook.url, secret=hook.secret, events=hook.events, org=owner)
        if json:
            self.write_json(webhook_summary(row))
        else:
            self.stdout.write(f"added webhook {row.pk} → {ssrf.parse_webhook_url(hook.url).where}")

    def list(self, *, json, **_):
        hooks = Webhook.objects.select_related("org").order_by("id")
        if json:
            self.write_json([webhook_summary(hook) for hook in hooks])
            return
        table = Table(box=None, header_style="bold", pad_edge=False)
        for column in ("ID", "URL", "EVENTS", "ORG", "ENABLED", "PENDING", "FAILED"):
            table.add_column(column, no_wrap=True)
        for hook in hooks:
            counts = hook.deliveries.counts()
            table.add_row(str(hook.pk), shown_url(hook.url), ",".join(hook.events) or "all",
                          hook.org.slug if hook.org else "all", "yes" if hook.enabled else "no",
                          str(counts["pending"] + counts["delivering"]), str(counts["failed"]))
        self.render(table)

    def remove(self, *, id, **_):
        check_range("ID", id, 1, MAX_ID)
        deleted, _ = Webhook.objects.filter(pk=id).delete()
        if not deleted:
            raise CommandError(f"no webhook {id}")
        self.stdout.write(f"removed webhook {id}")

    def enable(self, *, id, **_):
        self.stdout.write(set_enabled(id, True))

    def disable(self, *, id, **_):
        self.stdout.write(set_enabled(id, False))

    def deliveries(self, *, failed, webhook, limit, json, **_):
        check_range("--limit", limit, 1, MAX_LISTED)
        check_range("--webhook", webhook, 1, MAX_ID)
        rows = WebhookDelivery.objects.select_related("event", "webhook").order_by("-id")
        if failed:
            rows = rows.filter(status=DeliveryStatus.FAILED)
        if webhook is not None:
            rows = rows.filter(webhook_id=webhook)
        counts = rows.counts()
        rows = list(rows[:limit])
        if json:
            self.write_json({"counts": counts, "deliveries": [delivery_summary(d) for d in rows]})
            return
        now = db_now()
        table = Table(box=None, header_style="bold", pad_edge=False)
        for column in ("ID", "WEBHOOK", "EVENT", "CRAWL", "STATUS", "ATTEMPTS", "HTTP", "AGE", "LAST ERROR"):
            table.add_column(column, no_wrap=column != "LAST ERROR")
        for d in rows:
            table.add_row(str(d.pk), str(d.webhook_id), d.event.name, d.event.crawl_id[:8], d.status,
                          str(d.attempts), str(d.last_status_code or "-"), age(d.created_at, now),
                          d.last_error or "")
        self.render(table)
        self.stdout.write(counts_line(counts))

    def replay(self, *, id, **_):
        check_range("DELIVERY_ID", id, 1, MAX_ID)
        delivery = WebhookDelivery.objects.filter(pk=id).first()
        if delivery is None:
            raise CommandError(f"no delivery {id}")
        self.stdout.write(replay_delivery(delivery))


def webhook_summary(hook: Webhook) -> dict:
    return {
        "id": hook.pk,
        "url": shown_url(hook.url),
        "events": hook.events,
        "org": hook.org.slug if hook.org else None,
        "enabled": hook.enabled,
        "created_at": hook.created_at.isoformat(),
        "deliveries": hook.deliveries.counts(),
    }


def delivery_summary(d: WebhookDelivery) -> dict:
    return {
        "id": d.pk,
        "webhook": d.webhook_id,
        "event": d.event.name,
        "event_id": str(d.event.event_id),
        "crawl": d.event.crawl_id,
        "status": d.status,
        "attempts": d.attempts,
        "last_status_code": d.last_status_code,
        "last_error": d.last_error or None,
        "retry_at": d.retry_at.isoformat() if d.retry_at else None,
        "created_at": d.created_at.isoformat(),
        "delivered_at": d.delivered_at.isoformat() if d.delivered_at else None,
    }


def counts_line(counts: dict[str, int]) -> str:
    parts = ", ".join(f"{counts[status]} {status}" for status in DeliveryStatus.values)
    return f"{counts['total']} deliveries: {parts}"


def add_toggle_parsers(actions) -> None:
    for name, words in (("enable", "deliver events to a webhook again"),
                        ("disable", "stop delivering new events to a webhook (it is kept)")):
        toggle = actions.add_parser(name, help=words)
        toggle.add_argument("id", type=int_arg, metavar="ID")


def set_enabled(pk: int, enabled: bool) -> str:
    """Enable or disable a webhook; a disabled one gets no deliveries for new events."""
    if not Webhook.objects.filter(pk=pk).update(enabled=enabled):
        raise CommandError(f"no webhook {pk}")
    return f"{'enabled' if enabled else 'disabled'} webhook {pk}"

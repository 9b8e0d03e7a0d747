"""`pingwebhook ID`: POST a signed ping to one webhook now and show the answer.

It lives in runner/ because it sends (execution); `webhook` in crawls/ only records intent.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from crawls.models import Webhook
from runner.webhooks import send_ping


class Command(BaseCommand):
    help = "POST a signed ping event to a webhook now and show the answer."

    def add_arguments(self, parser):
        parser.add_argument("id", type=int, metavar="ID")

    def handle(self, *args, id: int, **options):
        hook = Webhook.objects.filter(pk=id).first()
        if hook is None:
            raise CommandError(f"no webhook {id}")
        outcome = send_ping(hook)
        if not outcome.succeeded:
            raise CommandError(f"ping to webhook {id} failed: {outcome.error}")
        self.stdout.write(f"ping to webhook {id}: HTTP {outcome.status_code}")

"""/webhooks: `archiver webhook add|list|remove|deliveries|replay`. Secrets are write-only.

A URL is checked with the runner's SSRF rules (crawls.ssrf) before anything is written.
An org-scoped token sees only its org's webhooks: a webhook for every org (org null) hears
other orgs' events, so it is not the token's to see.
"""

from __future__ import annotations

from ninja import Query, Router, Status

from archiver.errors import ConfigError
from crawls.actions import replay_delivery
from crawls.api import pagination
from crawls.api.auth import need, scope_org_id, visible_orgs
from crawls.api.errors import ERRORS, invalid, not_found
from crawls.api.schemas import DeliveryPage, Message, RowId, WebhookChanged, WebhookIn, WebhookOut
from crawls.management.commands.webhook import delivery_summary, webhook_summary
from crawls.models import DeliveryStatus, Webhook, WebhookDelivery
from crawls.validation import WebhookInput

router = Router(tags=["webhooks"])


def visible_webhooks(request):
    hooks = Webhook.objects.select_related("org").order_by("id")
    org_id = scope_org_id(request)
    return hooks if org_id is None else hooks.filter(org_id=org_id)


def visible_deliveries(request):
    rows = WebhookDelivery.objects.select_related("event", "webhook")
    org_id = scope_org_id(request)
    return rows if org_id is None else rows.filter(webhook__org_id=org_id)


@router.get("/webhooks", response={200: list[WebhookOut], **ERRORS}, summary="Webhooks (never their secrets)")
def list_webhooks(request):
    need(request, "crawls.view_webhook")
    return [webhook_summary(hook) for hook in visible_webhooks(request)]


@router.post("/webhooks", response={201: WebhookChanged, **ERRORS},
             summary="POST crawl events to a URL, signed with a secret")
def add_webhook(request, body: WebhookIn):
    need(request, "crawls.add_webhook")
    # The CLI's validation path: the same rules and sentences (ConfigError → 422).
    hook_input = WebhookInput.parse(url=body.url, secret=body.secret, events=list(body.events))
    secret, events = hook_input.secret, hook_input.events
    owner = None
    slug = body.org or (None if scope_org_id(request) is None else visible_orgs(request).get().slug)
    if slug is not None:
        owner = visible_orgs(request).filter(slug=slug).first()
        if owner is None:
            raise not_found(f"no org {slug!r} (see `archiver org list`)")
    try:
        hook_input.check_destination()
    except ConfigError as exc:
        raise invalid(str(exc)) from None
    hook = Webhook.objects.create(url=body.url, secret=secret, events=events, org=owner)
    return Status(201, {"message": f"added webhook {hook.pk}", "webhook": webhook_summary(hook)})


@router.delete("/webhooks/{int:webhook_id}", response={200: Message, **ERRORS},
               summary="Remove a webhook and its deliveries")
def remove_webhook(request, webhook_id: RowId):
    need(request, "crawls.delete_webhook")
    deleted, _ = visible_webhooks(request).filter(pk=webhook_id).delete()
    if not deleted:
        raise not_found(f"no webhook {webhook_id}")
    return {"message": f"removed webhook {webhook_id}"}


@router.get("/webhooks/deliveries", response={200: DeliveryPage, **ERRORS},
            summary="Deliveries, newest first, with counts per status")
def list_deliveries(request, failed: bool = False, webhook: RowId | None = None,
                    limit: int = Query(50, ge=1, le=500),
                    cursor: str | None = Query(None, max_length=pagination.MAX_CURSOR)):
    need(request, "crawls.view_webhookdelivery")
    rows = visible_deliveries(request).order_by("-id")
    if failed:
        rows = rows.filter(status=DeliveryStatus.FAILED)
    if webhook is not None:
        rows = rows.filter(webhook_id=webhook)
    counts = rows.counts()
    before = pagination.int_cursor(cursor)
    if before is not None:
        rows = rows.filter(id__lt=before)
    found = list(rows[:limit + 1])
    more = len(found) > limit
    found = found[:limit]
    return {"counts": counts, "items": [delivery_summary(d) for d in found],
            "next_cursor": pagination.encode(str(found[-1].pk)) if more else None}


@router.post("/webhooks/deliveries/{int:delivery_id}/replay", response={200: Message, **ERRORS},
             summary="Deliver a failed delivery again, from scratch")
def replay(request, delivery_id: RowId):
    need(request, "crawls.change_webhookdelivery")
    delivery = visible_deliveries(request).filter(pk=delivery_id).first()
    if delivery is None:
        raise not_found(f"no delivery {delivery_id}")
    return {"message": replay_delivery(delivery)}  # ActionRefused → 409 unless it failed

"""/orgs: orgs with their quotas and usage (`archiver org list`), and `org set`."""

from __future__ import annotations

from argparse import ArgumentTypeError
from typing import Annotated

from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from ninja import Router, Status
from pydantic import Field

from crawls.api.auth import need, scope_org_id, visible_orgs
from crawls.api.errors import ERRORS, ApiError, invalid, not_found
from crawls.api.schemas import OrgChanged, OrgIn, OrgOut
from crawls.lease import db_now
from crawls.management.commands.org import FIELD_FOR_OPTION, QUOTAS, org_summary, orgs_with_usage
from crawls.models import Org
from crawls.validation import OrgInput

router = Router(tags=["orgs"])
Slug = Annotated[str, Field(min_length=1, max_length=50)]


def summaries(request, slug: str | None = None) -> list[dict]:
    org_id = scope_org_id(request)
    return [org_summary(org) for org in orgs_with_usage(db_now())
            if (org_id is None or org.pk == org_id) and (slug is None or org.slug == slug)]


@router.get("/orgs", response={200: list[OrgOut], **ERRORS}, summary="Orgs with quotas and usage")
def list_orgs(request):
    need(request, "crawls.view_org")
    return summaries(request)


@router.get("/orgs/{slug}", response={200: OrgOut, **ERRORS}, summary="One org with quotas and usage")
def get_org(request, slug: Slug):
    need(request, "crawls.view_org")
    found = summaries(request, slug)
    if not found:
        raise not_found(f"no org {slug!r}")
    return found[0]


def quota_changes(body: OrgIn) -> dict:
    """The fields given, read by the same converters as `org set`'s options."""
    changes = {}
    for option, field in FIELD_FOR_OPTION.items():
        if option not in body.model_fields_set:
            continue
        value = getattr(body, option)
        try:
            changes[field] = None if value is None else QUOTAS[option](str(value))
        except ArgumentTypeError as exc:
            raise invalid(f"{option}: {exc}") from None
    if "name" in body.model_fields_set:
        changes["name"] = body.name or ""
    return changes


def need_quota_right(request, slug: str) -> None:
    """Quotas bound what an org may cost, so they are a right of their own; a token scoped
    to one org (the org's own program) never changes them, whoever its user is."""
    if scope_org_id(request) is not None:
        raise ApiError(403, f"a token scoped to org {slug!r} cannot change its quotas")
    need(request, "crawls.change_org_quotas")


@router.put("/orgs/{slug}", response={200: OrgChanged, 201: OrgChanged, **ERRORS},
            summary="Create an org, or change only the fields given (`archiver org set`)")
def set_org(request, slug: Slug, body: OrgIn):
    try:
        validate_slug(slug)
    except ValidationError:
        raise invalid(f"{slug!r} is not a slug (letters, digits, - and _)") from None
    exists = Org.objects.filter(slug=slug).exists()
    if scope_org_id(request) is not None and not visible_orgs(request).filter(slug=slug).exists():
        raise not_found(f"no org {slug!r}")
    need(request, "crawls.change_org" if exists else "crawls.add_org")
    changes = quota_changes(body)
    if set(changes) & set(Org.QUOTA_FIELDS):
        need_quota_right(request, slug)
    # The CLI's validation path (crawls.validation.OrgInput): same limits, same sentences.
    changes = OrgInput.parse(slug=slug, **changes).changes()
    org, created = Org.objects.update_or_create(slug=slug, defaults=changes)
    message = f"{'created' if created else 'updated'} org {org.slug}"
    return Status(201 if created else 200, {"message": message, "org": summaries(request, slug)[0]})

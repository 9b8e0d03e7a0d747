"""/collections: `archiver collection ...` over HTTP (issue 24). An org-scoped token sees
only its org's collections, and only its org's crawls: anything else is "not found"."""

from __future__ import annotations

from ninja import Router, Schema
from ninja.responses import Status
from pydantic import Field

from archiver.errors import NotAllowed
from crawls import actions
from crawls.api.auth import need, scope_org_id, visible_crawls, visible_orgs
from crawls.api.errors import ERRORS, not_found
from crawls.api.schemas import Message, Out, RowId
from crawls.collection_files import serve_package
from crawls.models import Collection
from crawls.models.collections import MAX_NAME

router = Router(tags=["collections"])


class CollectionOut(Out):
    id: int
    name: str
    slug: str
    org: str
    description: str
    crawls: list[str]
    created_at: str
    public_link: bool


class CollectionIn(Schema):
    name: str = Field(min_length=1, max_length=MAX_NAME)
    description: str = Field("", max_length=10_000)
    org: str | None = Field(None, max_length=50, description="org slug (default: the token's org, else default)")


class CrawlsIn(Schema):
    crawls: list[str] = Field(min_length=1, max_length=1000, description="crawl ids (any unique prefix)")


class CollectionChanged(Out):
    message: str
    collection: CollectionOut


def out(collection: Collection) -> dict:
    return {"id": collection.pk, **collection.summary()}


def visible_collections(request):
    rows = Collection.objects.select_related("org").order_by("org__slug", "name")
    org_id = scope_org_id(request)
    return rows if org_id is None else rows.filter(org_id=org_id)


def visible_collection(request, collection_id: int) -> Collection:
    found = visible_collections(request).filter(pk=collection_id).first()
    if found is None:
        raise not_found(f"no collection {collection_id}")
    return found


def visible_members(request, ids: list[str]):
    try:
        return [visible_crawls(request).by_prefix(text) for text in ids]
    except NotAllowed as exc:
        raise not_found(str(exc)) from None


@router.get("/collections", response={200: list[CollectionOut], **ERRORS}, summary="Collections")
def list_collections(request):
    need(request, "crawls.view_collection")
    return [out(c) for c in visible_collections(request)[:10_000]]


@router.post("/collections", response={201: CollectionChanged, **ERRORS}, summary="A new, empty collection")
def create_collection(request, body: CollectionIn):
    need(request, "crawls.add_collection")
    slug = body.org or (visible_orgs(request).get().slug if scope_org_id(request) else "default")
    org = visible_orgs(request).filter(slug=slug).first()
    if org is None:
        raise not_found(f"no org {slug!r}")
    collection = actions.create_collection(org, body.name, body.description)
    return Status(201, {"message": f"created collection {collection.name!r}", "collection": out(collection)})


@router.get("/collections/{int:collection_id}", response={200: CollectionOut, **ERRORS}, summary="A collection")
def show_collection(request, collection_id: RowId):
    need(request, "crawls.view_collection")
    return out(visible_collection(request, collection_id))


@router.post("/collections/{int:collection_id}/crawls", response={200: CollectionChanged, **ERRORS},
             summary="Add crawls of the collection's org")
def add_crawls(request, collection_id: RowId, body: CrawlsIn):
    need(request, "crawls.change_collection")
    collection = visible_collection(request, collection_id)
    message = actions.add_to_collection(collection, visible_members(request, body.crawls))
    return {"message": message, "collection": out(collection)}


@router.delete("/collections/{int:collection_id}/crawls/{crawl_id}", response={200: CollectionChanged, **ERRORS},
               summary="Remove a crawl from the collection (the crawl stays)")
def remove_crawl(request, collection_id: RowId, crawl_id: str):
    need(request, "crawls.change_collection")
    collection = visible_collection(request, collection_id)
    message = actions.remove_from_collection(collection, visible_members(request, [crawl_id[:64]]))
    return {"message": message, "collection": out(collection)}


@router.delete("/collections/{int:collection_id}", response={200: Message, **ERRORS},
               summary="Delete a collection (its crawls stay)")
def delete_collection(request, collection_id: RowId):
    need(request, "crawls.delete_collection")
    return {"message": actions.delete_collection(visible_collection(request, collection_id))}


@router.get("/collections/{int:collection_id}/download", response={**ERRORS},
            summary="The collection as one multi-WACZ zip (datapackage.json), with Range")
def download(request, collection_id: RowId):
    need(request, "crawls.view_collection")
    return serve_package(request, visible_collection(request, collection_id))

"""The admin of collections (issue 24): a crawl picker limited to the collection's org,
Replay (the collection in a frame of the replay origin), Download (one multi-WACZ zip),
public links opened (shown once) and revoked as actions, and staff's `/web/<ts>/<url>`.

Every change goes through crawls.actions, as the CLI's and the API's do.
"""

from __future__ import annotations

import time
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from archiver import conf
from archiver.errors import ActionRefused
from crawls import actions, capability, wayback
from crawls.admin.words import PlainTitles
from crawls.collection_files import serve_package
from crawls.collection_replay import web_answer
from crawls.models import Collection, Crawl


@admin.register(Collection)
class CollectionAdmin(PlainTitles, admin.ModelAdmin):
    list_display = ("name", "org", "member_count", "public", "created_at", "links")
    list_filter = ("org",)
    search_fields = ("name", "description")
    filter_horizontal = ("crawls",)
    actions = ["open_links", "revoke_links"]

    def get_fields(self, request, obj=None):
        return ["org", "name", "description"] if obj is None else ["org", "name", "description", "crawls"]

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else ("org", "name")

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        # Only the collection's own org's crawls: a forged POST naming another is "not a valid choice".
        if db_field.name == "crawls":
            match = request.resolver_match
            org_id = Collection.objects.filter(pk=match.kwargs.get("object_id")).values_list(
                "org_id", flat=True).first() if match else None
            kwargs["queryset"] = Crawl.objects.filter(org_id=org_id).order_by("-created_at")
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    @admin.display(description="crawls")
    def member_count(self, obj):
        return obj.crawls.count()

    @admin.display(description="public link", boolean=True)
    def public(self, obj):
        return obj.link_hash is not None

    @admin.display(description="")
    def links(self, obj):
        return format_html('<a href="{}">Replay</a> · <a href="{}">Download</a>',
                           reverse("admin:crawls_collection_replay", args=[obj.pk]),
                           reverse("admin:crawls_collection_download", args=[obj.pk]))

    def save_model(self, request, obj, form, change):
        try:
            if not change:
                created = actions.create_collection(obj.org, obj.name, obj.description)
                obj.pk, obj.slug, obj.created_at = created.pk, created.slug, created.created_at
            else:
                actions.describe_collection(obj, form.cleaned_data["description"])
        except ActionRefused as exc:
            raise PermissionDenied(str(exc)) from None

    def save_related(self, request, form, formsets, change):
        if not change:
            return
        collection = form.instance
        wanted = set(form.cleaned_data["crawls"])
        have = set(collection.crawls.all())
        if wanted - have:
            actions.add_to_collection(collection, list(wanted - have))
        if have - wanted:
            actions.remove_from_collection(collection, list(have - wanted))

    def delete_model(self, request, obj):
        actions.delete_collection(obj)

    def delete_queryset(self, request, queryset):
        for collection in queryset:
            actions.delete_collection(collection)

    @admin.action(description="Open a public link (shown once; replaces any older one)", permissions=["change"])
    def open_links(self, request, queryset):
        for collection in queryset:
            secret = actions.open_collection_link(collection)
            messages.warning(request, f"Public link of {collection.name}: {conf.get().replay_url}/c/{secret}/ "
                                      "(copy it now; it is not shown again)")

    @admin.action(description="Revoke the public link", permissions=["change"])
    def revoke_links(self, request, queryset):
        for collection in queryset.filter(link_hash__isnull=False):
            messages.info(request, actions.close_collection_link(collection))

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<int:pk>/replay/", view(self.replay), name="crawls_collection_replay"),
            path("<int:pk>/download/", view(self.download), name="crawls_collection_download"),
            *super().get_urls(),
        ]

    def replay(self, request, pk: int):
        """The collection in a frame of the replay origin, to a capability for it."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        collection = get_object_or_404(Collection, pk=pk)
        query = urlencode({key: request.GET[key] for key in ("url", "ts") if request.GET.get(key)})
        token = capability.mint_collection(collection.pk, time.time())
        context = {**self.admin_site.each_context(request), "opts": Collection._meta, "collection": collection,
                   "title": f"Replay of collection {collection.name}",
                   "frame": f"{conf.get().replay_url}/c/{token}/" + (f"?{query}" if query else "")}
        return TemplateResponse(request, "admin/crawls/crawl/replay.html", context)

    def download(self, request, pk: int):
        if not self.has_view_permission(request):
            raise PermissionDenied
        return serve_package(request, get_object_or_404(Collection, pk=pk))


def web(request, stamp: str, url: str):
    """Staff's `/web/<timestamp>/<url>` across every org's crawls: the nearest capture opens in
    its crawl's Replay page, never on this origin."""
    if not request.user.has_perm("crawls.view_crawl"):
        raise PermissionDenied
    url = wayback.normal_url(url, request.META.get("QUERY_STRING", ""))

    def render(name: str, context: dict, status: int):
        return TemplateResponse(request, f"admin/crawls/web_{name}.html",
                                {**admin.site.each_context(request), **context}, status=status)

    return web_answer(request, Crawl.objects.all(), stamp, url, open_capture=lambda snapshot: HttpResponseRedirect(
        reverse("admin:crawls_crawl_replay", args=[snapshot.crawl_id]) + "?" + urlencode(
            {"url": snapshot.url, "ts": wayback.timestamp(snapshot.captured_at)})),
        web_url=lambda stamp_, url_: f"/web/{stamp_}/{url_}", render=render)

"""The admin's import page (/admin/crawls/crawl/import/): an archive made elsewhere uploaded
and taken in as `archiver import` takes a file (runner/intake.py).

The body is bounded by ARCHIVER_ARCHIVE_MAX_BYTES from its Content-Length before it is read
(archiver/body_limit.py lets this one path past the 2.5 MB cap); Django writes a large file
to a temporary file as it arrives, never to memory; the org's storage quota is checked
before anything is kept; and a refusal leaves nothing (intake's rule)."""

from __future__ import annotations

import os
import secrets

from django.contrib import messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.utils import timezone

from archiver import conf
from crawls.admin.views import require
from crawls.config import human_size
from crawls.models import Crawl, Org

PATH = "/admin/crawls/crawl/import/"  # archiver/body_limit.py lets this path's bodies through
CHUNK = 1 << 20


def import_page(modeladmin, request):
    require(request, "add")
    settings = conf.get()
    context = {**modeladmin.admin_site.each_context(request), "opts": Crawl._meta,
               "title": "Import archives", "orgs": Org.objects.order_by("slug"),
               "most": human_size(settings.archive_max_bytes)}
    if request.method == "POST":
        refusal, crawl = take_upload(request, settings)
        if crawl is not None:
            messages.success(request, f"imported as crawl {crawl.short_id}: {crawl.pages_done} page(s)")
            return redirect("admin:crawls_crawl_change", crawl.pk)
        context["refusal"] = refusal
    return TemplateResponse(request, "admin/crawls/crawl/import.html", context)


def take_upload(request, settings) -> tuple[str, Crawl | None]:
    """(the refusal, None) or ("", the imported crawl)."""
    from runner import intake  # the runner's file guards; loaded only when an import comes

    length = request.META.get("CONTENT_LENGTH") or ""
    if length.isdigit() and int(length) > settings.archive_max_bytes + CHUNK:
        return (f"the upload is {human_size(int(length))}, over the "
                f"{human_size(settings.archive_max_bytes)} an archive may have"), None
    upload = request.FILES.get("archive")
    org = Org.objects.filter(slug=request.POST.get("org", "")).first()
    if upload is None or org is None:
        return "choose an org and an archive file", None
    folder = settings.data_dir / intake.IMPORTS
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"upload-{secrets.token_hex(8)}"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as out:
            for chunk in upload.chunks(CHUNK):
                out.write(chunk)
        imported = intake.import_archives(settings, org, [path], timezone.now())
    except intake.ImportRefused as exc:
        return str(exc).replace(str(path), upload.name[:200]), None
    finally:
        path.unlink(missing_ok=True)
    imported.crawl.refresh_from_db()
    return "", imported.crawl

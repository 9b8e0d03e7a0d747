"""Request bodies past Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB) are answered 413 before
anything reads them: a JSON error in the API's shape under /api/, a line of plain text
elsewhere (the admin). Left to Django, reading one raised RequestDataTooBig inside the API's
views, answered as a 500 with a traceback in the log (issue 36).

The one file upload, an archive to import (POST /api/v1/imports, and the admin's import
page), is let through: its view bounds the body by its own limits before reading it, into
a file (crawls/api/routes_imports.py, crawls/admin/imports.py). No other body is legitimately larger. A body sent without
Content-Length (chunked) is not read by Django at all."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse, JsonResponse

# Archives to import: crawls/api/routes_imports.py, crawls/admin/imports.py
UPLOAD_PATHS = ("/api/v1/imports", "/admin/crawls/crawl/import/")


class BodySizeLimit:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and _content_length(request) > limit and not _upload(request):
            message = f"the request body is too large: at most {limit} bytes"
            if request.path.startswith("/api/"):
                return JsonResponse({"code": "too_large", "message": message}, status=413)
            return HttpResponse(f"{message}\n", status=413, content_type="text/plain; charset=utf-8")
        return self.get_response(request)


def _upload(request) -> bool:
    return request.method == "POST" and request.path in UPLOAD_PATHS


def _content_length(request) -> int:
    value = request.META.get("CONTENT_LENGTH") or "0"
    return int(value) if value.isdigit() else 0

"""The /api/v1/ NinjaAPI: its auth, error handlers and routers."""

from __future__ import annotations

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI

from crawls.api import (
    routes_collections,
    routes_crawls,
    routes_files,
    routes_imports,
    routes_orgs,
    routes_schedules,
    routes_search,
    routes_webhooks,
)
from crawls.api.auth import StaffSession, TokenAuth
from crawls.api.errors import install_handlers

api = NinjaAPI(
    title="archiver",
    version="1",
    description="Crawls, their pages, files and logs; orgs, schedules and webhooks. "
                "Authenticate with `Authorization: Bearer <token>` (`archiver token create`).",
    auth=[TokenAuth(), StaffSession()],
    urls_namespace="api-v1",
    docs_url="/docs",
    openapi_url="/openapi.json",
)
install_handlers(api)
for module in (routes_crawls, routes_files, routes_imports, routes_orgs, routes_schedules, routes_webhooks,
               routes_search):
    api.add_router("/", module.router)
api.add_router("/", routes_collections.router)


@csrf_exempt  # it changes nothing, and its answer must be JSON for every method
def unknown_endpoint(request, rest: str = ""):
    """Any other /api/v1/ path: a JSON 404 like every other refusal, not Django's HTML page."""
    return JsonResponse({"code": "not_found", "message": f"no API endpoint {request.path}"}, status=404)

"""The /api/v1/ NinjaAPI: its auth, error handlers and routers."""

from __future__ import annotations

from ninja import NinjaAPI

from crawls.api import routes_crawls, routes_files, routes_orgs, routes_schedules, routes_webhooks
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
for module in (routes_crawls, routes_files, routes_orgs, routes_schedules, routes_webhooks):
    api.add_router("/", module.router)

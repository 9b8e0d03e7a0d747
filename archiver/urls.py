from django.contrib import admin
from django.shortcuts import redirect
from django.templatetags.static import static
from django.urls import path, re_path
from django.views.generic import RedirectView

admin.autodiscover()  # settings install SimpleAdminConfig: the registrations are made here

from crawls.admin import collections as collections_admin  # noqa: E402
from crawls.api.app import api, unknown_endpoint  # noqa: E402
from crawls.metrics import metrics_view  # noqa: E402

admin.site.site_header = "archiver"
admin.site.site_title = "archiver"
admin.site.index_title = "Crawls, orgs and webhooks"

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    # Browsers ask for /favicon.ico on pages that name no icon (the API's, a 404's).
    path("favicon.ico", lambda request: redirect(static("crawls/favicon.svg"))),
    path("admin/", admin.site.urls),
    # Prometheus scrapes; behind ARCHIVER_METRICS_TOKEN (docs/metrics.md).
    path("metrics", metrics_view),
    path("api/v1/", api.urls),
    re_path(r"^api/v1/(?P<rest>.*)$", unknown_endpoint),
    # Wayback-style addresses for staff (crawls/wayback.py): they open the crawl's Replay page.
    path("web/<str:stamp>/<path:url>", admin.site.admin_view(collections_admin.web)),
]

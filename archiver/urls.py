from django.contrib import admin
from django.urls import path, re_path
from django.views.generic import RedirectView

from crawls.api.app import api, unknown_endpoint

admin.site.site_header = "archiver"
admin.site.site_title = "archiver"
admin.site.index_title = "Crawls, orgs and webhooks"

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    re_path(r"^api/v1/(?P<rest>.*)$", unknown_endpoint),
]

"""The replay origin's only routes (no admin, no API): ReplayWeb.page's files, and one
crawl's replay page, package and archives to a capability (crawls/replay_views.py)."""

from django.urls import path

from crawls import replay_views

urlpatterns = [
    path("replay/", replay_views.asset),
    path("replay/index.html", replay_views.asset),
    path("replay/<str:name>", replay_views.asset),
    path("c/<str:token>/", replay_views.page),
    path("c/<str:token>/replay.json", replay_views.package),
    path("c/<str:token>/files/<int:file_pk>/<str:name>", replay_views.archive),
]

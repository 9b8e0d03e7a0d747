"""The replay origin's only routes (no admin, no API): ReplayWeb.page's files, and one
crawl's (or a collection's) replay page, package and archives to a capability or a
collection's public link (crawls/replay_views.py)."""

from django.urls import path

from crawls import collection_replay as collections
from crawls import replay_views

urlpatterns = [
    path("replay/", replay_views.asset),
    path("replay/index.html", replay_views.asset),
    path("replay/<str:name>", replay_views.asset),
    # A crawl's capability, or a collection's (or its public link): crawls/collection_replay.py.
    path("c/<str:token>/", collections.either(replay_views.page, collections.page)),
    path("c/<str:token>/replay.json", collections.either(replay_views.package, collections.replay_json)),
    path("c/<str:token>/files/<int:file_pk>/<str:name>",
         collections.either(replay_views.archive, collections.archive)),
    path("c/<str:token>/pages", collections.pages),
    path("c/<str:token>/web/<str:stamp>/<path:url>", collections.web),
]

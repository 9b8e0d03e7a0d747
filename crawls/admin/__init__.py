"""The admin: crawls and their snapshots, orgs, schedules, API tokens, webhooks and their
deliveries, one module each (as crawls/models is split); the crawl's own pages in views.py,
the forms in forms.py, the rate-limited log-in in login.py.

Django's autodiscover imports this package: importing it registers every ModelAdmin.
"""

import types

from django.contrib import admin
from django.urls import path

from crawls.admin import (  # noqa: F401  the registrations
    collections,
    crawl,
    org,
    schedules,
    search,
    tokens,
    webhooks,
)
from crawls.admin.home import index
from crawls.admin.login import RateLimitedLoginForm

admin.site.login_form = RateLimitedLoginForm  # failed log-ins are limited per address and user
admin.site.index = types.MethodType(index, admin.site)  # the control room (crawls/admin/home.py)

# The search page (/admin/search/, admin:archiver_search): a page of the site, not of a model.
_model_urls = admin.site.get_urls
admin.site.get_urls = lambda: [
    path("search/", admin.site.admin_view(search.search_page), name="archiver_search"),
    *_model_urls(),
]

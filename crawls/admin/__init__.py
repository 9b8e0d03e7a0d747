"""The admin: crawls and their snapshots, orgs, schedules, API tokens, webhooks and their
deliveries, one module each (as crawls/models is split); the crawl's own pages in views.py,
the forms in forms.py, the rate-limited log-in in login.py.

Django's autodiscover imports this package: importing it registers every ModelAdmin.
"""

from django.contrib import admin

from crawls.admin import (  # noqa: F401  the registrations
    collections,  # noqa: F401, I001  the registration (issue 24)
    crawl,
    org,
    schedules,
    tokens,
    webhooks,
)
from crawls.admin.login import RateLimitedLoginForm

admin.site.login_form = RateLimitedLoginForm  # failed log-ins are limited per address and user

"""The admin: crawls and their snapshots, orgs, schedules, API tokens, webhooks and their
deliveries, one module each (as crawls/models is split); the crawl's own pages in views.py,
the forms in forms.py, the rate-limited log-in in login.py.

Django's autodiscover imports this package: importing it registers every ModelAdmin.
"""

import types

from django.contrib import admin

from crawls.admin import crawl, org, schedules, tokens, webhooks  # noqa: F401  the registrations
from crawls.admin.home import index
from crawls.admin.login import RateLimitedLoginForm

admin.site.login_form = RateLimitedLoginForm  # failed log-ins are limited per address and user
admin.site.index = types.MethodType(index, admin.site)  # the control room (crawls/admin/home.py)

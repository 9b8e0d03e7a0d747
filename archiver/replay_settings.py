"""Settings of the replay origin's server (archiver/replay_wsgi.py): archiver's settings
with none of the admin. No sessions, no authentication or CSRF middleware, no admin or
API routes: what it serves is granted by a capability in the URL (crawls/capability.py),
and it answers only to the replay origin's host name (ARCHIVER_REPLAY_URL)."""

from archiver.settings import *  # noqa: F403
from archiver.settings import ARCHIVER

INSTALLED_APPS = [
    "django.contrib.auth",  # the crawl models refer to users (API tokens)
    "django.contrib.contenttypes",
    "crawls",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "archiver.db_unavailable.DatabaseUnavailable",
]
ROOT_URLCONF = "archiver.replay_urls"
WSGI_APPLICATION = "archiver.replay_wsgi.application"
ALLOWED_HOSTS = [ARCHIVER.replay_host]
# The frame's URL holds the capability: it is never sent on as a Referer.
SECURE_REFERRER_POLICY = "no-referrer"

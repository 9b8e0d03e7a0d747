"""Django settings. archiver's own options live in archiver.conf (ARCHIVER_* variables)."""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from archiver import conf
from archiver.errors import ConfigError

# This package's folder, the same in a clone and in an installed wheel: no setting depends
# on the repository's layout (the data dir defaults to ./data of the working directory).
PACKAGE_DIR = Path(__file__).resolve().parent

# The data dir holds sessions, password hashes, webhook secrets and archives: everything
# this process creates (the database, Redis files, run/redis.json, archives) is private
# to its user, 0700 folders and 0600 files. crawls/checks.py warns when one is wider.
os.umask(0o077)
FILE_UPLOAD_PERMISSIONS = 0o600  # Django's storages (collectstatic) chmod files to this
FILE_UPLOAD_DIRECTORY_PERMISSIONS = 0o700

try:
    ARCHIVER = conf.get()
    # The ARCHIVER_* variables that are not fields of conf.Settings, read the same way: the
    # environment over the data dir's archiver.env.
    _variables = conf.environment()  # lower case: not a Django setting, never on a debug page
except ConfigError as exc:
    raise ImproperlyConfigured(str(exc)) from None

DATA_DIR = ARCHIVER.data_dir


def _secret_key() -> str:
    """A per-installation key kept in the data dir, so sessions survive restarts.

    Importing the settings never creates the data dir: where there is none yet (a command
    run in the wrong folder, or before `migrate`), the key lives only in this process.
    """
    if key := _variables.get("ARCHIVER_SECRET_KEY"):
        return key
    path = DATA_DIR / "secret_key"
    with contextlib.suppress(FileNotFoundError):
        return path.read_text().strip()
    if not DATA_DIR.is_dir():
        return secrets.token_urlsafe(50)
    key = secrets.token_urlsafe(50)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        # Two commands started at once on a new data dir (the daemon and `add`): the other
        # wrote it. Wait for its bytes rather than read an empty file.
        for _ in range(50):
            if saved := path.read_text().strip():
                return saved
            time.sleep(0.02)
        raise ConfigError(f"{path} is empty: remove it and a new key is made") from None
    with os.fdopen(fd, "w") as handle:
        handle.write(key)
    return key


SECRET_KEY = _secret_key()
DEBUG = _variables.get("ARCHIVER_DEBUG") == "1"
# The admin never answers to the replay origin's host name (ARCHIVER_REPLAY_URL): archived
# pages run there, and cookies are shared by every port of a host name. (Naming it in
# ARCHIVER_ALLOWED_HOSTS, or 127.0.0.1, which start.sh serves the admin on, is an error of
# crawls/checks.py; localhost and [::1] are quietly left to the replay.)
ALLOWED_HOSTS_ASKED = ["127.0.0.1"] + [h for h in _variables.get("ARCHIVER_ALLOWED_HOSTS").split(",") if h]
ALLOWED_HOSTS = [h for h in [*ALLOWED_HOSTS_ASKED, "localhost", "[::1]"]
                 if h.strip("[]").lower() != ARCHIVER.replay_host]

INSTALLED_APPS = [
    # Admin modules are imported by archiver/urls.py (admin.autodiscover), only where a URL is
    # served: every CLI command and the daemon would otherwise pay for importing them (about
    # 0.5 s of CPU each, a third of a short command's).
    "django.contrib.admin.apps.SimpleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "ninja",  # serves the API docs' Swagger UI from our static files, not a CDN
    "crawls",
    "runner",
]

MIDDLEWARE = [
    "archiver.body_limit.BodySizeLimit",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "archiver.csp.ContentSecurityPolicyMiddleware",
    "archiver.db_unavailable.DatabaseUnavailable",
]

ROOT_URLCONF = "archiver.urls"
WSGI_APPLICATION = "archiver.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [PACKAGE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def _database() -> dict:
    url = ARCHIVER.database_url or f"sqlite:///{DATA_DIR / 'archiver.sqlite3'}"
    try:
        db = dj_database_url.parse(url, conn_max_age=600, conn_health_checks=True)
    except ValueError as exc:
        raise ImproperlyConfigured(f"ARCHIVER_DATABASE_URL: {exc}") from None
    if "postgresql" in db["ENGINE"]:
        # A server out of reach (not refusing) would hold each connection attempt, and with it
        # a stopping daemon, for as long as TCP tries; ?connect_timeout= in the URL wins.
        db.setdefault("OPTIONS", {}).setdefault("connect_timeout", 5)
    if db["ENGINE"] == "django.db.backends.sqlite3":
        # Its folder is created by `migrate` only (crawls/management/commands/migrate.py).
        db["CONN_MAX_AGE"] = 0 if db["NAME"] == ":memory:" else None
        # A daemon, the admin and CLI commands write at once: WAL lets readers run during
        # writes, IMMEDIATE takes the write lock up front so a transaction never fails on
        # upgrade, and the busy timeout waits instead of raising "database is locked".
        db["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": (
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                "PRAGMA busy_timeout=30000; PRAGMA foreign_keys=ON;"
            ),
        }
    return db


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Staff passwords guard crawls and their archives: long, not common, not all digits, not
# the username. (Tests keep a fast hasher; these apply to passwords people set.)
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
     "OPTIONS": {"min_length": 12}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
# ReplayWeb.page's files (scripts/replay-files.sh) are in crawls/replayweb/ of a clone, or,
# for an installed wheel, whose package folder is nobody's to write, in the data dir's
# replay/ (docs/admin.md). Only the replay origin serves them (crawls/replay_views.py), never
# the admin's static files: its service worker must not control the admin's origin.
REPLAY_DIRS = [PACKAGE_DIR.parent / "crawls" / "replayweb", DATA_DIR / "replay"]
# No script of a page may read the CSRF token (Django's forms carry it in a hidden field).
CSRF_COOKIE_HTTPONLY = True
LOGIN_URL = "admin:login"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s [%(name)s] %(message)s"}},
    # No capability or public link secret in any line (archiver/replay_logging.py).
    "filters": {"secrets": {"()": "archiver.replay_logging.WithoutCapabilities"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain",
                            "filters": ["secrets"]}},
    "root": {"handlers": ["stderr"], "level": _variables.get("ARCHIVER_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

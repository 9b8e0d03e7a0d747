"""Start-up checks (`archiver check`, and before every command): fail loudly, early."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from django.conf import settings as django_settings
from django.core.checks import Error, Warning, register

from archiver import conf


@register("archiver")
def check_data_dir(app_configs, **kwargs):
    settings = conf.get()
    path = settings.data_dir
    if path.exists() and not os.access(path, os.W_OK):
        return [Error(f"ARCHIVER_DATA_DIR {path} is not writable", id="archiver.E001")]
    return []


@register("archiver")
def check_redis_available(app_configs, **kwargs):
    settings = conf.get()
    if settings.redis_url is None and shutil.which("redis-server") is None:
        return [
            Warning(
                "ARCHIVER_REDIS_URL is unset and redis-server is not on PATH: "
                "the daemon cannot start its embedded Redis",
                hint="apt-get install redis-server, or set ARCHIVER_REDIS_URL",
                id="archiver.W001",
            )
        ]
    return []


@register("archiver")
def check_replay_origin(app_configs, **kwargs):
    """The replay origin shares no host name with the admin (cookies ignore ports)."""
    host = conf.get().replay_host
    if host in {h.strip("[]").lower() for h in django_settings.ALLOWED_HOSTS_ASKED}:
        return [Error(
            f"ARCHIVER_REPLAY_URL's host {host} is also the admin's: archived pages replayed "
            "there would share the admin's cookies (every port of a host name does)",
            hint="give the replay a host name of its own, e.g. http://127.0.0.2:8090 (the default)",
            id="archiver.E002")]
    return []


# --- a private data dir ----------------------------------------------------------------------

# Folders and files that hold secrets or everyone's data, relative to the data dir. The
# database's -wal/-shm files are named after it (see private_paths); the embedded Redis's
# password is in redis/redis.conf, next to its data.
PRIVATE_DIRS = ("", "run", "redis", "crawls", "archives", "static", "profiles")
SECRET_FILES = ("secret_key", "admin-password", "archiver.env")
LISTED_DIRS = ("run", "redis")  # everything directly inside these is checked too


def private_paths(data_dir: Path, database: Path | None) -> list[Path]:
    """What must be private: the data dir, its folders, its secrets, the database files and
    what is directly in run/ and redis/ (redis.json, Redis's config, dump and append-only
    files). Archives are private through their 0700 folders: they are not walked."""
    paths = [data_dir / name for name in (*PRIVATE_DIRS, *SECRET_FILES)]
    for name in LISTED_DIRS:
        if (data_dir / name).is_dir():
            # A pid file is no secret (gunicorn writes its own 0644 whatever the umask).
            paths += sorted(p for p in (data_dir / name).iterdir() if p.suffix != ".pid")
    if database is not None:
        paths += [database, *(database.with_name(database.name + s) for s in ("-wal", "-shm"))]
    return list(dict.fromkeys(paths))


def too_open(path: Path) -> int | None:
    """The permission bits of `path` if group or others have any; None if private or absent."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(mode):
        return None
    bits = stat.S_IMODE(mode)
    return bits if bits & 0o077 else None


@register("archiver")
def check_private_data_dir(app_configs, **kwargs):
    """Warn, naming each path and the chmod that fixes it, when something widened the data
    dir's permissions (an older archiver, a `cp`, a backup restore, a different umask)."""
    from crawls.cli import sqlite_file

    data_dir = conf.get().data_dir
    warnings = []
    for path in private_paths(data_dir, sqlite_file()):
        bits = too_open(path)
        if bits is None:
            continue
        private = 0o700 if stat.S_ISDIR(path.lstat().st_mode) else 0o600
        warnings.append(Warning(
            f"{path} is readable by other users (mode {bits:04o}): it holds archiver's "
            f"private data",
            hint=f"chmod {private:o} {path}",
            id="archiver.W002",
        ))
    return warnings

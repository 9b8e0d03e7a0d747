"""Start-up checks (`manage.py check`, and before every command): fail loudly, early."""

from __future__ import annotations

import os
import shutil

from django.core.checks import Error, Warning, register

from archiver import conf


@register()
def check_data_dir(app_configs, **kwargs):
    settings = conf.get()
    path = settings.data_dir
    if path.exists() and not os.access(path, os.W_OK):
        return [Error(f"ARCHIVER_DATA_DIR {path} is not writable", id="archiver.E001")]
    return []


@register()
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

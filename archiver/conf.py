"""archiver's own settings, read from ARCHIVER_* environment variables.

Every value is validated by pydantic once; a bad value raises ConfigError naming the
variable and what it expected, so the daemon refuses to start instead of misbehaving.
Library code calls `get()` at run time, never at import time.

The settings are kept by concern in archiver/options/ (the data dir, the runner, Redis,
launchers, the address policy, storage, replay); `Settings` is all of them in one model.
"""

from __future__ import annotations

import functools
import os
import re

from pydantic import ConfigDict, ValidationError

from archiver.errors import ConfigError
from archiver.options.data import DataSettings
from archiver.options.launchers import (  # noqa: F401 - callers find them here
    CHROMIUM_NAMES,
    CRAWLER_VERSION,
    IMAGE_CHROMIUM,
    LauncherSettings,
    default_crawler_image,
    find_chromium,
)
from archiver.options.policy import PolicySettings
from archiver.options.redis import RedisSettings
from archiver.options.replay import ReplaySettings
from archiver.options.runner import RunnerSettings
from archiver.options.storage import S3Target, StorageSettings, local_storage  # noqa: F401
from archiver.options.text import constraints, duration_in_seconds, origin_of, parse_duration  # noqa: F401
from archiver.options.variables import ENV, SECRET_VARIABLES


class Settings(ReplaySettings, StorageSettings, PolicySettings, LauncherSettings, RedisSettings,
               RunnerSettings, DataSettings):
    """Every setting of archiver, flat: `settings.redis_url`, `settings.s3` ...

    pydantic validates the fields of the last base first, so a validator that reads another
    concern's value (the storage folder the data dir, the Docker timeout the lease) finds it
    in `info.data`: keep DataSettings and RunnerSettings at the end."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


def from_environ(environ: dict[str, str] | None = None) -> Settings:
    environ = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for field, variable in ENV.items():
        raw = environ.get(variable)
        if raw is None or raw == "":
            continue
        if field == "pause_limit":
            try:
                raw = parse_duration(raw)
            except ValueError as exc:
                raise ConfigError(f"{variable}: {exc}") from None
        values[field] = raw
    try:
        return Settings(**values)
    except ValidationError as exc:
        error = exc.errors()[0]
        message = str(error["msg"]).removeprefix("Value error, ")
        if not error["loc"]:  # a rule across settings: its message names them
            raise ConfigError(message) from None
        variable = ENV.get(str(error["loc"][0]), str(error["loc"][0]))
        got = "not shown: a secret" if variable in SECRET_VARIABLES else repr(shown(environ.get(variable)))
        raise ConfigError(f"{variable}: {message} (got {got})") from None


def shown(value: str | None) -> str | None:
    """A setting's value as an error message may quote it: a URL's credentials masked
    (database and Redis URLs carry passwords)."""
    if value is None or "@" not in value:
        return value
    return re.sub(r"^([^:/]*:?//)[^@/]*@", r"\1***@", value)


@functools.cache
def get() -> Settings:
    """The settings of this process, validated once."""
    return from_environ()

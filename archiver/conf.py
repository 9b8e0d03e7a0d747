"""archiver's own settings, read from ARCHIVER_* environment variables over the data dir's
archiver.env (what scripts/start.sh was given: archiver/options/kept.py).

Every value is validated by pydantic once; a bad value raises ConfigError naming the
variable and what it expected, so the daemon refuses to start instead of misbehaving.
Library code calls `get()` at run time, never at import time.

The settings are kept by concern in archiver/options/ (the data dir, the runner, Redis,
launchers, the address policy, storage, replay); `Settings` is all of them in one model.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from pydantic import ConfigDict, ValidationError

from archiver.errors import ConfigError
from archiver.options import kept
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
from archiver.options.text import constraints, duration_in_seconds, origin_of, parse_duration, shown  # noqa: F401
from archiver.options.variables import ENV, SECRET_VARIABLES


class Settings(ReplaySettings, StorageSettings, PolicySettings, LauncherSettings, RedisSettings,
               RunnerSettings, DataSettings):
    """Every setting of archiver, flat: `settings.redis_url`, `settings.s3` ...

    pydantic validates the fields of the last base first, so a validator that reads another
    concern's value (the storage folder the data dir, the Docker timeout the lease) finds it
    in `info.data`: keep DataSettings and RunnerSettings at the end."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


def from_environ(environ: dict[str, str] | None = None) -> Settings:
    """The settings of `environ`; None: this process's environment over the data dir's file."""
    if environ is None:
        seen = kept.layered(os.environ)
        return settings_of(seen.values, seen.origins)
    return settings_of(environ, {})


def settings_of(values: dict[str, str], origins: dict[str, str]) -> Settings:
    """Settings from variable values; a refusal names the variable, and the file it came
    from when not the environment."""
    fields: dict[str, object] = {}
    for field, variable in ENV.items():
        raw = values.get(variable)
        if raw is None or raw == "":
            continue
        if field == "pause_limit":
            try:
                raw = parse_duration(raw)
            except ValueError as exc:
                raise ConfigError(f"{variable}: {exc}{from_file(origins.get(variable))}") from None
        fields[field] = raw
    try:
        return Settings(**fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        message = str(error["msg"]).removeprefix("Value error, ")
        if not error["loc"]:  # a rule across settings: its message names them
            raise ConfigError(message) from None
        variable = ENV.get(str(error["loc"][0]), str(error["loc"][0]))
        got = "not shown: a secret" if variable in SECRET_VARIABLES else repr(shown(values.get(variable)))
        raise ConfigError(f"{variable}: {message} (got {got}{from_file(origins.get(variable), ', ')})") from None


def from_file(origin: str | None, joint: str = " ") -> str:
    return f"{joint}from {origin}" if origin not in (None, kept.ENVIRONMENT, kept.DEFAULT) else ""


def environment() -> kept.Layered:
    """This process's ARCHIVER_* values (the environment over the data dir's file) and where
    each came from: for the variables that are not fields of Settings, and for doctor."""
    return kept.layered(os.environ)


def keep(environ: dict[str, str] | None = None) -> tuple[Path, list[str]]:
    """scripts/start.sh: keep the ARCHIVER_* variables of `environ` (None: this process's) in
    the data dir's file, once they are valid. Returns the file and the names it holds."""
    environ = os.environ if environ is None else environ
    values = kept.kept_from(environ)
    data_dir = kept.data_dir_of(environ)
    settings_of({**values, kept.DATA_DIR: str(data_dir)}, {})  # refuses what every process would
    return kept.write(data_dir, values), list(values)


@functools.cache
def get() -> Settings:
    """The settings of this process, validated once."""
    return from_environ()

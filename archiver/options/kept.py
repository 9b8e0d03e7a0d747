"""The settings scripts/start.sh was given, kept in the data dir so every process reads them.

start.sh writes the ARCHIVER_* variables of its environment into <data dir>/archiver.env
(0600); every `archiver` command, the daemon, the admin and the replay server read that
file, and an environment variable of the same name wins over its line. The data dir itself
is found first (ARCHIVER_DATA_DIR, else ./data), so the file cannot name it.

The file is plain `NAME=value` lines: the rest of the line is the value, with no quoting,
so what a person edits by hand is what archiver reads.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from archiver.errors import ConfigError
from archiver.options.text import shown
from archiver.options.variables import ENV, SECRET_VARIABLES
from archiver.private_files import write_private

FILE_NAME = "archiver.env"
DATA_DIR = "ARCHIVER_DATA_DIR"
# Variables read beside those of Settings: archiver/settings.py's, and start.sh's port.
OTHER_VARIABLES = ("ARCHIVER_SECRET_KEY", "ARCHIVER_ALLOWED_HOSTS", "ARCHIVER_DEBUG", "ARCHIVER_LOG_LEVEL",
                   "ARCHIVER_PORT")
KEPT = tuple(variable for variable in ENV.values() if variable != DATA_DIR) + OTHER_VARIABLES
# Never shown, not even by `archiver doctor`.
SECRETS = frozenset(SECRET_VARIABLES | {"ARCHIVER_SECRET_KEY"})
ENVIRONMENT, DEFAULT = "environment", "default"
MAX_BYTES = 1 << 20  # a settings file is a few hundred bytes; a bigger one is not ours
HEADER = """\
# archiver's settings, kept by scripts/start.sh from the ARCHIVER_* variables it was given.
# Every archiver process reads them (commands, daemon, admin, replay server); a variable of
# the same name in a process's environment wins. One NAME=value a line, the value as is (no
# quotes); an empty ARCHIVER_X= given to start.sh removes a line. docs/configuration.md
"""


@dataclasses.dataclass(frozen=True)
class Layered:
    """The ARCHIVER_* values a process runs with, and where each came from: ENVIRONMENT,
    the file's path, or DEFAULT (then it has no value here)."""

    values: dict[str, str]
    origins: dict[str, str]
    path: Path

    def get(self, name: str, default: str = "") -> str:
        return self.values.get(name) or default


def data_dir_of(environ: Mapping[str, str]) -> Path:
    """The data dir as Settings resolves it: ARCHIVER_DATA_DIR, else ./data."""
    return Path(environ.get(DATA_DIR) or "data").expanduser().resolve()


def file_in(data_dir: Path) -> Path:
    return data_dir / FILE_NAME


def layered(environ: Mapping[str, str]) -> Layered:
    """The environment's ARCHIVER_* values over the data dir's file's."""
    path = file_in(data_dir_of(environ))
    stored = read(path)
    values, origins = {}, {}
    for name in (DATA_DIR, *KEPT):
        if name in environ:
            values[name], origins[name] = environ[name], ENVIRONMENT
        elif name in stored:
            values[name], origins[name] = stored[name], str(path)
        else:
            origins[name] = DEFAULT
    return Layered(values, origins, path)


def read(path: Path) -> dict[str, str]:
    """The file's settings; {} when there is none. A file archiver cannot read, or one with
    a line it does not know, stops the process (ConfigError), as a bad variable does."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{path} is over {MAX_BYTES} bytes: not a settings file")
    try:
        return parse(data.decode("utf-8"), path)
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text") from None


def parse(text: str, path: Path) -> dict[str, str]:
    """NAME=value lines; blank lines and # comments are skipped. An error names the line and
    the variable, never the value (it may be a secret)."""
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, equals, value = line.partition("=")
        where = f"{path}, line {number}"
        if name == DATA_DIR:
            raise ConfigError(f"{where}: {DATA_DIR} cannot be set in the data dir's own file "
                              "(it is how the file is found): set it in the environment")
        if not equals or name not in KEPT:
            raise ConfigError(f"{where}: {name[:60]!r} is not an archiver setting "
                              "(NAME=value, one a line: docs/configuration.md)")
        if name in values:
            raise ConfigError(f"{where}: {name} is set twice")
        values[name] = value
    return values


def kept_from(environ: Mapping[str, str]) -> dict[str, str]:
    """The file's settings updated with what `environ` gives: a value replaces a line, an
    empty value removes it, a variable not given leaves its line as it was."""
    values = read(file_in(data_dir_of(environ)))
    for name in KEPT:
        if environ.get(name):
            if "\n" in environ[name] or "\r" in environ[name]:
                raise ConfigError(f"{name} holds a line break: it cannot be kept")
            values[name] = environ[name]
        elif name in environ:
            values.pop(name, None)
    return {name: values[name] for name in KEPT if name in values}


def write(data_dir: Path, values: Mapping[str, str]) -> Path:
    """Replace the file at once with these lines (0600), so no reader sees half of it."""
    path = file_in(data_dir)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private(path, HEADER + "".join(f"{name}={value}\n" for name, value in values.items()))
    return path


def described(seen: Layered) -> list[str]:
    """Where each setting comes from, as `archiver doctor` prints it: the data dir, one line
    per variable set (its value, never a secret's, a URL's password masked), the defaults."""
    there = seen.path.is_file()
    lines = [f"Settings: the environment over {seen.path}, then defaults:" if there else
             f"Settings: the environment, then defaults (no {seen.path}: scripts/start.sh writes it):"]
    data_dir = str(seen.path.parent)
    lines.append(f"  data dir {data_dir} (ARCHIVER_DATA_DIR, environment)" if seen.origins[DATA_DIR] == ENVIRONMENT
                 else f"  data dir {data_dir} (default: ./data of the working directory)")
    for name, origin in seen.origins.items():
        if name != DATA_DIR and origin != DEFAULT:
            lines.append(f"  {name}={value_shown(name, seen.values[name])} "
                         f"({'environment' if origin == ENVIRONMENT else FILE_NAME})")
    defaults = [name for name, origin in seen.origins.items() if origin == DEFAULT and name != DATA_DIR]
    lines.append(f"  default: {', '.join(defaults)}" if defaults else "  default: none")
    return lines


def value_shown(name: str, value: str) -> str:
    if value == "":
        return " (empty: the default)"
    return "(a secret, not shown)" if name in SECRETS else query_masked(shown(value))


def query_masked(value: str) -> str:
    """A URL's query values masked, its parameters' names kept: a Redis or PostgreSQL URL may
    carry its password there (`?password=`), a signing URL a token."""
    head, mark, query = value.partition("?")
    if not mark or "://" not in head:
        return value
    return head + "?" + "&".join(key + ("=***" if equals else "")
                                 for key, equals, _ in (part.partition("=") for part in query.split("&")))

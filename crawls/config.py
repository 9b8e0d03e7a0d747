"""Validated crawl configuration and the user-input parsers the CLI and admin share."""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from archiver.conf import parse_duration
from archiver.errors import ConfigError

ScopeType = Literal["page", "page-spa", "prefix", "host", "domain", "any", "custom"]

SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
MAX_SIZE = 2**50  # one pebibyte: larger is a typo, not a plan


def parse_size(text: str | int) -> int:
    """`500MB`, `2GiB`, `1.5 gb` or plain bytes, as bytes."""
    if isinstance(text, int):
        value = text
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
        unit = match and match.group(2).lower()
        if not match or unit not in SIZE_UNITS:
            raise ValueError(f"{text!r} is not a size (try 500MB, 2GiB or a number of bytes)")
        value = int(float(match.group(1)) * SIZE_UNITS[unit])
    if not 0 < value <= MAX_SIZE:
        raise ValueError(f"{text!r} is out of range (1 byte to 1 PiB)")
    return value


def human_size(num: int | float | None) -> str:
    if num is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(num) < 1000 or unit == "TB":
            return f"{num:.0f} {unit}" if unit == "B" else f"{num:.1f} {unit}"
        num /= 1000
    return f"{num:.1f} TB"  # pragma: no cover


def check_url(url: str) -> str:
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url!r}: only http:// and https:// URLs can be crawled")
    if not parts.hostname:
        raise ValueError(f"{url!r}: the URL has no host")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise ValueError(f"{url!r}: the port is not a number from 0 to 65535") from None
    if any(ch.isspace() for ch in url):
        raise ValueError(f"{url!r}: the URL contains white space")
    return url


def check_regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{pattern!r} is not a valid regular expression: {exc}") from None
    return pattern


class CrawlConfig(BaseModel):
    """What to crawl and within which limits. Stored on the crawl as JSON."""

    model_config = ConfigDict(extra="forbid")

    seeds: list[str] = Field(min_length=1, max_length=10_000)
    scope_type: ScopeType = "prefix"
    depth: int = Field(default=-1, ge=-1, le=1000, description="-1 = unlimited")
    extra_hops: int = Field(default=0, ge=0, le=10)
    page_limit: int | None = Field(default=None, ge=1, le=100_000_000)
    size_limit: int | None = Field(default=None, ge=1, le=MAX_SIZE)
    time_limit: int | None = Field(default=None, ge=1, le=10 * 365 * 86400)
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    workers: int = Field(default=1, ge=1, le=16)
    scale: int = Field(default=1, ge=1, le=8)
    user_agent: str | None = None
    use_robots: bool = False

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, value: list[str]) -> list[str]:
        return [check_url(url) for url in value]

    @field_validator("include", "exclude")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        return [check_regex(rx) for rx in value]

    @classmethod
    def parse(cls, **values) -> CrawlConfig:
        """Validate, raising ConfigError with one readable line."""
        try:
            return cls(**values)
        except ValidationError as exc:
            raise ConfigError(first_error(exc)) from None

    def crawler_config(self, page_limit: int | None) -> dict:
        """The crawler's own config file (the real option names, see crawler-protocol.md)."""
        config: dict = {
            "seeds": self.seeds,
            "scopeType": self.scope_type,
            "depth": self.depth,
            "extraHops": self.extra_hops,
            "include": self.include,
            "exclude": self.exclude,
        }
        if page_limit:
            config["limit"] = page_limit
        if self.user_agent:
            config["userAgent"] = self.user_agent
        if self.use_robots:
            config["useRobots"] = True
        from archiver import conf  # here only: the rest of this module needs no settings

        allow = conf.get().crawl_allow_networks
        if allow:
            # archiver's crawler refuses local addresses unless told (docs/security.md).
            config["allowNetworks"] = list(allow)
        return config


def first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    message = error["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def parse_duration_arg(text: str) -> int:
    return parse_duration(text)

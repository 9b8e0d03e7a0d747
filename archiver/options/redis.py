"""Redis: the server the runner uses (or the embedded one and where it listens), the
address crawlers are handed, and the memory a server and one crawl may use."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, field_validator

from archiver.options.data import url_with_scheme


class RedisSettings(BaseModel):
    redis_url: str | None = None
    # Where the embedded Redis listens: crawlers on other hosts (a swarm) need an address
    # they can reach. Every connection needs a password; crawls log in as their own user.
    redis_bind: tuple[str, ...] = ("127.0.0.1",)
    # The Redis address handed to crawlers (scheme, host, port; never credentials: each
    # crawl has its own), when it differs from the one the runner uses.
    redis_public_url: str | None = None
    # The embedded Redis's maxmemory (noeviction: a write over it fails, crawl state is never
    # evicted), and what one crawl's database may hold on any Redis before the crawl stops.
    redis_max_bytes: int = Field(default=1 << 30, ge=32 << 20, le=1 << 50)
    crawl_redis_max_bytes: int = Field(default=256 << 20, ge=1 << 20, le=1 << 50)
    # How many of the org's kept payloads (the newest archives' first) a deduplicating
    # crawl is handed in its Redis: 200 to 350 bytes each there, a copy per running crawl.
    dedup_max_payloads: int = Field(default=500_000, ge=0, le=1 << 40)

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str | None) -> str | None:
        return url_with_scheme(value, ("redis://", "rediss://", "unix://"))

    @field_validator("redis_bind", mode="before")
    @classmethod
    def _addresses(cls, value):
        if isinstance(value, str):
            value = tuple(value.replace(",", " ").split())
        if not value:
            raise ValueError("names no address")
        for address in value:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise ValueError(f"{address!r} is not an IP address") from None
        return tuple(value)

    @field_validator("redis_public_url")
    @classmethod
    def _public_redis(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("redis", "rediss") or not parts.hostname:
            raise ValueError("must be redis://HOST[:PORT] or rediss://HOST[:PORT]")
        if parts.username or parts.password:
            raise ValueError("must not hold credentials: each crawl logs in as its own user")
        if parts.path not in ("", "/"):
            raise ValueError("must not name a database: each crawl has its own")
        try:
            parts.port  # noqa: B018 - raises on a port out of range
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        return value

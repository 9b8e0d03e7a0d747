"""Who may be reached and trusted: the networks crawls may fetch although the address policy
refuses local addresses, the webhook receivers allowed, and the admin's reverse proxies."""

from __future__ import annotations

import ipaddress

from archiver_crawler.netpolicy import parse_networks, split_networks
from pydantic import BaseModel, Field, SecretStr, field_validator


class PolicySettings(BaseModel):
    # CIDRs the crawl address policy opens for every crawl (docs/security.md); none by default.
    crawl_allow_networks: tuple[str, ...] = ()
    webhook_allow_hosts: tuple[str, ...] = ()
    webhook_allow_domains: tuple[str, ...] = ()
    # Reverse proxies in front of the admin (addresses or CIDRs) whose X-Forwarded-For names
    # the client; from anyone else the header is ignored (crawls/admin/login.py).
    trusted_proxies: tuple[str, ...] = ()
    # The bearer token a Prometheus scraper sends for /metrics (crawls/metrics.py); unset:
    # /metrics answers 404. At least 16 characters: it guards a view of the whole fleet.
    metrics_token: SecretStr | None = None
    # Requests per second to one host, every crawl and runner together (the crawler's
    # hosts.py); 0: no limit. A crawl's own host_rate replaces it; host_rates, by host
    # pattern, replace both.
    host_rate: float = Field(default=2.0, ge=0, le=1000)
    host_rates: tuple[tuple[str, float], ...] = ()

    @field_validator("metrics_token")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 16:
            raise ValueError("must be at least 16 characters (a guessable token opens the whole fleet's figures)")
        return value

    @field_validator("crawl_allow_networks", mode="before")
    @classmethod
    def _networks(cls, value):
        # The crawler's own parser, so archiver refuses at start-up what the crawler would.
        return tuple(str(network) for network in parse_networks(split_networks(value)))

    @field_validator("webhook_allow_hosts", "webhook_allow_domains", mode="before")
    @classmethod
    def _split(cls, value):
        if isinstance(value, str):
            return tuple(part.strip().lower() for part in value.split(",") if part.strip())
        return value

    @field_validator("host_rates", mode="before")
    @classmethod
    def _rates(cls, value):
        if not isinstance(value, str):
            return value
        from archiver_crawler.errors import ConfigError
        from archiver_crawler.hosts import host_options  # the crawler's reading, so it agrees

        try:
            return host_options({"hostRates": value})["rates"].patterns
        except ConfigError as exc:
            raise ValueError(str(exc).removeprefix("--hostRates").lstrip(": ")) from None

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _proxies(cls, value):
        parts = value.split(",") if isinstance(value, str) else value
        try:
            return tuple(str(ipaddress.ip_network(part.strip(), strict=False)) for part in parts if part.strip())
        except ValueError as exc:
            raise ValueError(f"a comma-separated list of IP addresses or CIDRs ({exc})") from None

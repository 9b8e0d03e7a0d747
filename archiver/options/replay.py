"""The replay origin: where archived pages are replayed, and where its server listens."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, field_validator

from archiver.options.text import origin_of


class ReplaySettings(BaseModel):
    # The origin archived pages are replayed on: never the admin's host name (cookies ignore
    # ports). 127.0.0.2 is loopback on Linux, a host of its own for the browser, and, like
    # 127.0.0.1, trusted for service workers without TLS (docs/security.md#replay).
    replay_url: str = "http://127.0.0.2:8090"
    # host:port the replay server listens on; unset: the replay URL's host and port.
    replay_bind: str | None = None

    @field_validator("replay_url")
    @classmethod
    def _replay_origin(cls, value: str) -> str:
        return origin_of(value)

    @field_validator("replay_bind")
    @classmethod
    def _replay_bind(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536 or any(c.isspace() for c in value):
            raise ValueError("must be HOST:PORT, e.g. 127.0.0.1:8090")
        return value

    @property
    def replay_host(self) -> str:
        """The replay origin's host name, which the admin must never answer to."""
        return urlsplit(self.replay_url).hostname

    @property
    def replay_listen(self) -> str:
        """Where the replay server binds (gunicorn's --bind)."""
        if self.replay_bind:
            return self.replay_bind
        parts = urlsplit(self.replay_url)
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        return f"{host}:{parts.port or (443 if parts.scheme == 'https' else 80)}"

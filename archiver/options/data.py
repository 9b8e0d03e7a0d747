"""Where archiver keeps its things: the data dir, the database, and this instance's name."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field, field_validator


class DataSettings(BaseModel):
    data_dir: Path = Path("data")
    database_url: str | None = None
    instance_id: str = Field(default_factory=lambda: os.uname().nodename, min_length=1)

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @field_validator("database_url")
    @classmethod
    def _database_scheme(cls, value: str | None) -> str | None:
        return url_with_scheme(value, ("sqlite://", "postgres://", "postgresql://"))

    @property
    def run_dir(self) -> Path:
        """Sockets, pid files and the embedded Redis's files."""
        return self.data_dir / "run"

    @property
    def crawls_dir(self) -> Path:
        """One folder per crawl, mounted into its crawler containers."""
        return self.data_dir / "crawls"

    @property
    def wake_socket(self) -> Path:
        return self.run_dir / "wake.sock"


def url_with_scheme(value: str | None, allowed: tuple[str, ...]) -> str | None:
    if value is not None and not value.startswith(allowed):
        raise ValueError(f"must start with one of {', '.join(allowed)}")
    return value

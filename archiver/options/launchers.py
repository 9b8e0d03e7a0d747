"""Launchers: which one starts crawlers (Docker, Swarm or local processes), the crawler it
runs and whether that crawler drives a browser, and where Swarm places it."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from archiver.options.text import constraints

CRAWLER_VERSION = "0.1.0"
# Where Chromium is looked for, in this order (the crawler's --chromium default too).
CHROMIUM_NAMES = ("/usr/bin/chromium", "chromium", "chromium-browser")
IMAGE_CHROMIUM = "/usr/bin/chromium"  # Debian's, in the image build-crawler-image.sh builds


def find_chromium() -> str | None:
    """The first Chromium of CHROMIUM_NAMES on this host, or None."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def default_crawler_image() -> str:
    return f"archiver/crawler:{CRAWLER_VERSION}"


class LauncherSettings(BaseModel):
    launcher: Literal["auto", "docker", "local", "swarm"] = "auto"
    crawler_image: str = Field(default_factory=default_crawler_image, min_length=1)
    # Which crawler that is: browser options (docs/crawlers.md) need browsertrix-crawler.
    crawler_kind: Literal["auto", "archiver", "browsertrix"] = "auto"
    # Seconds any one Docker engine call may take; None: 5 s, or a third of a shorter lease.
    docker_timeout: float | None = Field(default=None, gt=0, le=60)
    # Replaces archiver-crawler for the local launcher (e.g. browsertrix-crawler from source).
    local_crawler_command: tuple[str, ...] = ()
    # The Chromium archiver's own crawler drives in browser mode under the local launcher;
    # `none`: no Chromium anywhere, so new crawls default to HTTP mode.
    chromium: str | None = None
    # Placement constraints of every Swarm service, and more per org (by slug).
    swarm_constraints: tuple[str, ...] = ()
    swarm_org_constraints: dict[str, tuple[str, ...]] = Field(default_factory=dict)

    @field_validator("docker_timeout")
    @classmethod
    def _under_the_lease(cls, value: float | None, info) -> float | None:
        # A slow engine call must never outlast the lease of the crawl it is made for
        # (lease_seconds is validated first: RunnerSettings comes before this model).
        lease = info.data.get("lease_seconds")
        if value is not None and lease is not None and value > lease / 3:
            raise ValueError(f"must be at most a third of ARCHIVER_LEASE_SECONDS ({lease / 3:g} s)")
        return value

    @field_validator("local_crawler_command", mode="before")
    @classmethod
    def _command_line(cls, value):
        if isinstance(value, str):
            try:
                value = tuple(shlex.split(value))
            except ValueError as exc:
                raise ValueError(f"not a command line: {exc}") from None
            if not value:
                raise ValueError("is empty")
        if any("\0" in part for part in value):
            raise ValueError("holds a NUL character")
        return value

    @field_validator("chromium")
    @classmethod
    def _chromium(cls, value: str | None) -> str | None:
        if value is None or value == "none":
            return value
        if not os.path.isabs(value) or "\0" in value:
            raise ValueError("must be the absolute path of a Chromium, or none")
        return value

    @field_validator("swarm_constraints", mode="before")
    @classmethod
    def _constraints(cls, value):
        return constraints(value)

    @field_validator("swarm_org_constraints", mode="before")
    @classmethod
    def _org_constraints(cls, value):
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise ValueError('not JSON (try {"org-slug": ["node.labels.zone==eu"]})') from None
        if not isinstance(value, dict):
            raise ValueError('must be a JSON object of org slugs (try {"org-slug": ["node.labels.zone==eu"]})')
        return {str(slug): constraints(rules) for slug, rules in value.items()}

    @property
    def docker_call_timeout(self) -> float:
        return self.docker_timeout or min(5.0, self.lease_seconds / 3)

    def crawler_name(self, launcher: str | None = None) -> str:
        """The crawler a launcher (`docker`, `swarm` or `local`; None: as ARCHIVER_LAUNCHER says) runs,
        as a message names it: the image, or the local command."""
        if (launcher or self.launcher) != "local":
            return self.crawler_image
        return self.local_crawler_command[0] if self.local_crawler_command else "archiver-crawler (local)"

    def browser_crawler(self, launcher: str | None = None) -> bool:
        """Whether that crawler drives a browser (takes --behaviors, --profile ...).

        ARCHIVER_CRAWLER_KIND says so, or `auto` reads the name: an image (or, for the local
        launcher, a command) whose name holds `browsertrix` is the real browsertrix-crawler.
        Labels are not read: judging an `add` must not need the Docker engine."""
        if self.crawler_kind != "auto":
            return self.crawler_kind == "browsertrix"
        if (launcher or self.launcher) == "local":
            return any("browsertrix" in part.lower() for part in self.local_crawler_command)
        repository = self.crawler_image.rsplit("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
        return "browsertrix" in repository.lower()

    def chromium_path(self, launcher: str | None = None) -> str | None:
        """The Chromium archiver's own crawler would drive for that launcher, or None.

        The local launcher: this host's, ARCHIVER_CHROMIUM or else the first of CHROMIUM_NAMES
        (the crawler's own default order). An image: the one scripts/build-crawler-image.sh
        installs; the engine is not asked, so judging an `add` needs no engine.
        ARCHIVER_CHROMIUM=none: none anywhere."""
        if self.chromium == "none":
            return None
        if (launcher or self.launcher) != "local":
            return IMAGE_CHROMIUM
        if self.chromium:
            return self.chromium if os.path.isfile(self.chromium) and os.access(self.chromium, os.X_OK) else None
        return find_chromium()

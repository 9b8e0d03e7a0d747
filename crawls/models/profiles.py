"""Browser profiles: the logged-in browsers an org's crawls may start from."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from archiver.errors import ConfigError
from crawls.models.org import Org
from crawls.models.statuses import CrawlStatus


class BrowserProfile(models.Model):
    """A logged-in browser's profile (a tar.gz, as browsertrix-crawler's --profile takes it),
    stored privately under the data dir (crawls/profiles.py) and used by name by an org's
    crawls. The row holds no secret: the file does."""

    org = models.ForeignKey(Org, on_delete=models.PROTECT, related_name="browser_profiles")
    name = models.CharField(max_length=64)
    sha256 = models.CharField(max_length=64)
    size_bytes = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["org", "name"]
        constraints = [models.UniqueConstraint(fields=["org", "name"], name="browser_profile_name_per_org")]

    def __str__(self) -> str:
        return f"{self.org.slug}/{self.name}"

    @staticmethod
    def require(org: Org, name: str | None) -> None:
        """ConfigError unless `name` is None or a profile of `org` (what a new crawl needs)."""
        if name is not None and not BrowserProfile.objects.filter(org=org, name=name).exists():
            raise ConfigError(
                f"no browser profile {name!r} in org {org.slug!r} "
                f"(add it with: archiver profile add {name} FILE --org {org.slug})"
            )

    def users(self) -> list[str]:
        """What still needs this profile: the org's active crawls and schedules naming it."""
        # Through the org's relations: crawl.py imports this module (a new crawl's profile
        # must exist), so this one does not import Crawl or Schedule.
        crawls = self.org.crawls.filter(status__in=CrawlStatus.ACTIVE, config__profile=self.name)
        schedules = self.org.schedules.filter(config__profile=self.name)
        return ([f"crawl {crawl_id[:8]}" for crawl_id in crawls.values_list("pk", flat=True)[:5]]
                + [f"schedule {pk}" for pk in schedules.values_list("pk", flat=True)[:5]])

    def summary(self) -> dict:
        return {"org": self.org.slug, "name": self.name, "sha256": self.sha256,
                "size_bytes": self.size_bytes, "created_at": self.created_at.isoformat()}

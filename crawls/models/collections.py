"""Collections: a named set of one org's crawls, replayed and downloaded as one (issue 24).

A crawl may be in several collections. A collection may have one public read-only link,
`/c/<secret>/` on the replay origin (docs/security.md, "Public collection links"): only the
SHA-256 of the secret is kept, as for API tokens, so the link is shown once and a stolen
database does not open it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets

from django.db import models
from django.utils import timezone
from django.utils.text import slugify

from archiver.errors import NotAllowed
from crawls.models.crawl import Crawl
from crawls.models.files import CrawlFile
from crawls.models.org import Org

LINK_PREFIX = "pub_"  # never holds a dot: a replay capability always does (crawls/capability.py)
MAX_NAME = 100


def link_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class Collection(models.Model):
    """A named, described set of one org's crawls."""

    org = models.ForeignKey(Org, on_delete=models.CASCADE, related_name="collections")
    name = models.CharField(max_length=MAX_NAME)
    slug = models.SlugField(max_length=MAX_NAME)
    description = models.TextField(blank=True, default="")
    crawls = models.ManyToManyField(Crawl, blank=True, related_name="collections")
    created_at = models.DateTimeField(default=timezone.now)
    link_hash = models.CharField(max_length=64, null=True, blank=True, unique=True, editable=False,
                                 help_text="SHA-256 of the public link's secret; empty = no public link.")
    link_created_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["org", "name"]
        constraints = [
            models.UniqueConstraint(fields=["org", "name"], name="collection_name_per_org"),
            models.UniqueConstraint(fields=["org", "slug"], name="collection_slug_per_org"),
        ]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def create(cls, org: Org, name: str, description: str = "", *, now: dt.datetime) -> Collection:
        name = name.strip()
        slug = slugify(name)[:MAX_NAME]
        if not name or len(name) > MAX_NAME or not slug:
            raise NotAllowed(f"a collection's name has 1 to {MAX_NAME} characters, "
                             "with at least one letter or digit")
        if cls.objects.filter(org=org, slug=slug).exists():
            raise NotAllowed(f"org {org.slug} already has a collection named {name!r} (or like it)")
        return cls.objects.create(org=org, name=name, slug=slug, description=description, created_at=now)

    def describe(self, description: str) -> None:
        self.description = description
        self.save(update_fields=["description"])

    def check_members(self, crawls: list[Crawl]) -> None:
        others = [crawl.short_id for crawl in crawls if crawl.org_id != self.org_id]
        if others:
            raise NotAllowed(f"crawl {', '.join(others)} is not of org {self.org.slug}, "
                             f"the org of collection {self.name!r}")

    def add_crawls(self, crawls: list[Crawl]) -> int:
        """Add crawls of this collection's org; how many were not in it already."""
        self.check_members(crawls)
        before = self.crawls.count()
        self.crawls.add(*crawls)
        return self.crawls.count() - before

    def remove_crawls(self, crawls: list[Crawl]) -> int:
        missing = [c.short_id for c in crawls if not self.crawls.filter(pk=c.pk).exists()]
        if missing:
            raise NotAllowed(f"crawl {', '.join(missing)} is not in collection {self.name!r}")
        self.crawls.remove(*crawls)
        return len(crawls)

    def open_link(self, now: dt.datetime) -> str:
        """A new public link secret (any previous link stops working); only its hash is kept."""
        secret = f"{LINK_PREFIX}{secrets.token_urlsafe(32)}"
        Collection.objects.filter(pk=self.pk).update(link_hash=link_hash(secret), link_created_at=now)
        self.link_hash, self.link_created_at = link_hash(secret), now
        return secret

    def close_link(self) -> None:
        if not Collection.objects.filter(pk=self.pk, link_hash__isnull=False).update(
                link_hash=None, link_created_at=None):
            raise NotAllowed(f"collection {self.name!r} has no public link")
        self.link_hash = self.link_created_at = None

    @classmethod
    def by_link(cls, secret: str) -> Collection | None:
        """The collection a public link opens, or None (unknown, revoked, malformed)."""
        if not secret.startswith(LINK_PREFIX) or len(secret) > 100:
            return None
        return cls.objects.select_related("org").filter(link_hash=link_hash(secret)).first()

    def files(self):
        """Its members' archive files, in a stable order (a download's layout depends on it)."""
        return CrawlFile.objects.filter(crawl__collections=self).order_by("crawl_id", "created_at", "pk")

    def summary(self) -> dict:
        return {"id": self.pk, "name": self.name, "slug": self.slug, "org": self.org.slug, "description": self.description,
                "crawls": sorted(self.crawls.values_list("id", flat=True)),
                "created_at": self.created_at.isoformat(), "public_link": self.link_hash is not None}

"""The HTTP API's tokens (crawls/api) and the responses kept for idempotent retries."""

from __future__ import annotations

import datetime as dt

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from archiver.errors import NotAllowed
from crawls.models.crawl import Crawl
from crawls.models.org import Org


class ApiTokenQuerySet(models.QuerySet):
    def usable(self):
        """Not revoked, and owned by an active user."""
        return self.filter(revoked_at__isnull=True, user__is_active=True)


class ApiToken(models.Model):
    """A secret a program sends as `Authorization: Bearer <token>`; stored hashed only.

    The token reads `arch_<prefix>_<secret>`: the prefix finds the row, the SHA-256 of the
    whole token must match `secret_hash`. Requests count in a fixed one-minute window
    (`window_start`, `window_count`) against `rate_limit` per minute.
    """

    user = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64, help_text="SHA-256 of the whole token, hex.")
    org = models.ForeignKey(Org, null=True, blank=True, on_delete=models.CASCADE, related_name="api_tokens",
                            help_text="Only this org's crawls; empty = every org.")
    read_only = models.BooleanField(default=False)
    rate_limit = models.PositiveIntegerField(default=600, help_text="Requests per minute.")
    window_start = models.DateTimeField(null=True, blank=True)
    window_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(cls, user, name: str, *, org: Org | None = None, read_only: bool = False,
              rate_limit: int = 600, now: dt.datetime | None = None) -> tuple[ApiToken, str]:
        """A new token and its secret, which exists only in the return value."""
        token = cls(user=user, name=name, org=org, read_only=read_only, rate_limit=rate_limit,
                    created_at=now or timezone.now())
        secret = token.new_secret()
        token.save()
        return token, secret

    def new_secret(self) -> str:
        """Give this unsaved token a prefix and a secret; only the secret's hash is kept."""
        import hashlib
        import secrets

        self.prefix = secrets.token_hex(4)
        secret = f"arch_{self.prefix}_{secrets.token_urlsafe(32)}"
        self.secret_hash = hashlib.sha256(secret.encode()).hexdigest()
        return secret

    def revoke(self, now: dt.datetime) -> None:
        if not ApiToken.objects.filter(pk=self.pk, revoked_at__isnull=True).update(revoked_at=now):
            raise NotAllowed(f"token {self.prefix} is already revoked")
        self.revoked_at = now

    def count_request(self, now: dt.datetime, cost: int = 1) -> float | None:
        """Count one request, worth `cost` requests, in this minute's window: None if allowed,
        else the seconds until the window ends (Retry-After). Two guarded UPDATEs, no
        read-modify-write."""
        if cost <= 0:
            return None
        window = now.replace(second=0, microsecond=0)
        rows = ApiToken.objects.filter(pk=self.pk)
        # Twice: a concurrent request may start this minute's window between our two UPDATEs
        # (then both missed, and the first one counts us the second time).
        for _ in range(2):
            # At or after: another worker whose clock read came a moment later may already
            # have started the next minute's window; this request counts in that one.
            if rows.filter(window_start__gte=window,
                           window_count__lte=self.rate_limit - cost).update(
                    window_count=F("window_count") + cost, last_used_at=now):
                return None
            if cost <= self.rate_limit and rows.filter(
                    Q(window_start__lt=window) | Q(window_start__isnull=True)).update(
                    window_start=window, window_count=cost, last_used_at=now):
                return None
        return max((window + dt.timedelta(minutes=1) - now).total_seconds(), 1)


class IdempotencyKey(models.Model):
    """A POST /crawls retried with the same Idempotency-Key returns this first response."""

    user = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="+")
    token = models.ForeignKey(ApiToken, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    body_sha256 = models.CharField(max_length=64)
    crawl = models.ForeignKey(Crawl, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    status_code = models.PositiveSmallIntegerField()
    response = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["token", "key"], name="idempotency_per_token",
                                    condition=Q(token__isnull=False)),
            models.UniqueConstraint(fields=["user", "key"], name="idempotency_per_session_user",
                                    condition=Q(token__isnull=True)),
        ]

    def __str__(self) -> str:
        return self.key

"""The lease queue every schedulable row uses: due rows, one-statement claims, renewals.

A row is due when `retry_at <= now`. Claiming moves `retry_at` to the lease's expiry,
records the owner and bumps `lease_token`, in ONE conditional UPDATE whose outer WHERE
re-checks the due condition, so two claimers can never both win a row. The token is a
fencing token: renewals and transitions name it, and a lost lease changes nothing.
Finished rows carry `retry_at = NULL` and a partial index keeps them out of every scan.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db import connection, models, transaction
from django.utils import timezone

FAR_FUTURE = dt.datetime(9999, 1, 1, tzinfo=dt.UTC)


def db_now() -> dt.datetime:
    """The clock every runner agrees on: the database's on PostgreSQL, ours on SQLite."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT clock_timestamp()")
            return cursor.fetchone()[0]
    return timezone.now()


@dataclass(frozen=True)
class Claim:
    pk: object
    token: int


class LeaseQuerySet(models.QuerySet):
    def due(self, now: dt.datetime):
        return self.filter(retry_at__lte=now)

    def claim(self, owner: str, now: dt.datetime, lease_seconds: float, limit: int = 1,
              order_by: tuple[str, ...] = ("retry_at", "created_at")) -> list[Claim]:
        """Claim up to `limit` due rows of this queryset for `owner`; returns what we won."""
        table = self.model._meta.db_table
        expiry = now + dt.timedelta(seconds=lease_seconds)
        with transaction.atomic(using=self.db):
            candidates = self.due(now).order_by(*order_by).values("pk")[:limit]
            if connection.vendor == "postgresql":
                candidates = candidates.select_for_update(skip_locked=True)
            inner_sql, inner_params = candidates.query.sql_with_params()
            with connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE {table} SET retry_at = %s, lease_owner = %s, "
                    f"lease_token = lease_token + 1 "
                    f"WHERE id IN ({inner_sql}) AND retry_at <= %s "
                    f"RETURNING id, lease_token",
                    [expiry, owner, *inner_params, now],
                )
                return [Claim(pk, token) for pk, token in cursor.fetchall()]

    def renew(self, pk, token: int, now: dt.datetime, lease_seconds: float) -> bool:
        """Extend our lease; False means it was lost (expired and claimed by another)."""
        expiry = now + dt.timedelta(seconds=lease_seconds)
        return bool(self.filter(pk=pk, lease_token=token).update(retry_at=expiry))

    def release(self, pk, token: int, retry_at: dt.datetime | None) -> bool:
        """Give the row back, due again at `retry_at` (None only for finished rows)."""
        return bool(
            self.filter(pk=pk, lease_token=token).update(retry_at=retry_at, lease_owner="")
        )

    def leased_by(self, owner: str):
        return self.filter(lease_owner=owner, retry_at__isnull=False)


class Leased(models.Model):
    """The lease fields. Subclasses add a partial index on (retry_at, created_at)."""

    retry_at = models.DateTimeField(
        null=True, blank=True, help_text="Due when <= now; lease expiry while claimed; NULL once finished."
    )
    lease_owner = models.CharField(max_length=64, blank=True, default="", help_text="Runner holding the lease.")
    lease_token = models.BigIntegerField(default=0, help_text="Fencing token, bumped by every claim.")

    class Meta:
        abstract = True

    def lease_is_live(self, now: dt.datetime) -> bool:
        return bool(self.lease_owner) and self.retry_at is not None and self.retry_at > now


def due_index(table_prefix: str) -> models.Index:
    return models.Index(
        fields=["retry_at", "created_at"],
        name=f"{table_prefix}_due",
        condition=models.Q(retry_at__isnull=False),
    )

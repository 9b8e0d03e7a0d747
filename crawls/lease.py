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

from django.db import DEFAULT_DB_ALIAS, connections, models
from django.utils import timezone

FAR_FUTURE = dt.datetime(9999, 1, 1, tzinfo=dt.UTC)


def db_now(using: str = DEFAULT_DB_ALIAS) -> dt.datetime:
    """The clock every runner agrees on: the database's on PostgreSQL, ours on SQLite."""
    connection = connections[using]
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
        """Claim up to `limit` due rows of this queryset for `owner`; returns what we won.

        One statement, so it is its own transaction on both databases. The inner SELECT
        picks the oldest due rows through the partial due index; on PostgreSQL it locks
        them and skips rows another claimer holds, so concurrent claimers take different
        rows instead of queueing behind each other. The outer `retry_at <= now` re-checks
        the due condition on the row as it is when updated: SQLite serialises writers,
        and PostgreSQL re-reads a row it had to wait for, so a row is won at most once.
        """
        connection = connections[self.db]
        ops = connection.ops
        table = ops.quote_name(self.model._meta.db_table)
        pk = ops.quote_name(self.model._meta.pk.column)
        ordering = ", ".join(ops.quote_name(self.model._meta.get_field(f).column) for f in order_by)
        lock = " FOR UPDATE SKIP LOCKED" if connection.vendor == "postgresql" else ""
        scope, scope_params = self._scope_sql(pk)
        # Adapted as the ORM adapts them: SQLite compares datetimes as text, and a lease
        # stored in another spelling would not be due at the instant it expires.
        now_value = ops.adapt_datetimefield_value(now)
        expiry = ops.adapt_datetimefield_value(now + dt.timedelta(seconds=lease_seconds))
        # Written out rather than compiled from a queryset: compiling the due subquery
        # cost more than running it (docs/leases.md).
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET retry_at = %s, lease_owner = %s, lease_token = lease_token + 1 "
                f"WHERE {pk} IN (SELECT {pk} FROM {table} WHERE retry_at <= %s{scope} "
                f"ORDER BY {ordering} LIMIT %s{lock}) "
                f"AND retry_at <= %s RETURNING {pk}, lease_token",
                [expiry, owner, now_value, *scope_params, limit, now_value],
            )
            return [Claim(row_pk, token) for row_pk, token in cursor.fetchall()]

    def _scope_sql(self, pk: str) -> tuple[str, list]:
        """This queryset's own filters (e.g. `status__in=...`) as SQL on the bare table.

        Filters on the table's own columns are inlined, so the due scan applies them row
        by row and stops at the first `limit` matches; filters that join other tables
        become an `IN (subquery)`, which is correct but reads every matching row.
        """
        query = self.query
        if not query.where:
            return "", []
        if len(query.alias_map) > 1:
            sql, params = self.order_by().values("pk").query.sql_with_params()
            return f" AND {pk} IN ({sql})", list(params)
        sql, params = query.get_compiler(self.db).compile(query.where)
        return f" AND {sql}", list(params)

    def renew(self, pk, token: int, now: dt.datetime, lease_seconds: float) -> bool:
        """Extend our lease; False means it was lost (expired and claimed by another)."""
        expiry = now + dt.timedelta(seconds=lease_seconds)
        return bool(self.filter(pk=pk, lease_token=token).update(retry_at=expiry))

    def renew_all(self, owner: str, tokens: dict, now: dt.datetime, lease_seconds: float) -> list:
        """Extend every lease in `tokens` (pk -> the token `owner` holds it by) in ONE
        statement; returns the pks renewed. A row released, finished (retry_at NULL) or
        claimed since, by anyone, has another owner, token or no retry_at: left alone."""
        if not tokens:
            return []
        connection = connections[self.db]
        ops = connection.ops
        table = ops.quote_name(self.model._meta.db_table)
        pk = ops.quote_name(self.model._meta.pk.column)
        expiry = ops.adapt_datetimefield_value(now + dt.timedelta(seconds=lease_seconds))
        pairs = ", ".join(["(%s, %s)"] * len(tokens))
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET retry_at = %s WHERE lease_owner = %s AND retry_at IS NOT NULL "
                f"AND ({pk}, lease_token) IN (VALUES {pairs}) RETURNING {pk}",
                [expiry, owner, *(value for pair in tokens.items() for value in pair)],
            )
            return [row[0] for row in cursor.fetchall()]

    def release(self, pk, token: int, retry_at: dt.datetime | None) -> bool:
        """Give the row back, due again at `retry_at` (None only for finished rows)."""
        return bool(
            self.filter(pk=pk, lease_token=token).update(retry_at=retry_at, lease_owner="")
        )

    def take_over_from(self, owners, now: dt.datetime) -> int:
        """Rows that `owners` (runners known dead) leased are due now, not when their leases
        end; how many. Their tokens stay: a claim bumps them, fencing the dead owners."""
        return self.filter(lease_owner__in=owners, retry_at__gt=now).update(retry_at=now)

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


def due_by_creation_index(table_prefix: str) -> models.Index:
    """For claims that take the oldest *created* due rows first (`order_by=("created_at",)`).

    The scan walks rows in creation order and stops at the first due ones; without it,
    such a claim reads and sorts every due row.
    """
    return models.Index(
        fields=["created_at"],
        name=f"{table_prefix}_due_created",
        condition=models.Q(retry_at__isnull=False),
    )

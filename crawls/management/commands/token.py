"""`archiver token create|list|revoke`: API tokens (docs/api.md). A secret is shown once."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from rich.table import Table

from crawls.cli import ArchiverCommand, OneLineParser, int_arg
from crawls.lease import db_now
from crawls.models import ApiToken, Org

MAX_NAME = 100


class Command(ArchiverCommand):
    help = "Create, list and revoke API tokens (Authorization: Bearer <token>)."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, parser_class=OneLineParser,
                                        metavar="{create,list,revoke}")
        create = actions.add_parser("create", help="create a token and print its secret, once")
        create.add_argument("name", metavar="NAME", help="what the token is for, e.g. cms-prod")
        create.add_argument("--user", required=True, metavar="USERNAME",
                            help="whose permissions the token carries")
        create.add_argument("--org", metavar="SLUG", help="only this org's crawls (default: every org)")
        create.add_argument("--read-only", action="store_true", help="GET requests only")
        create.add_argument("--rate-limit", type=int_arg, default=600, metavar="N",
                            help="requests per minute (default 600)")
        lister = actions.add_parser("list", help="list tokens (never their secrets)")
        lister.add_argument("--json", action="store_true")
        revoke = actions.add_parser("revoke", help="revoke a token at once")
        revoke.add_argument("prefix", metavar="PREFIX", help="the token's prefix (see token list)")

    def run(self, *, action, **options):
        getattr(self, action)(**options)

    def create(self, *, name, user, org, read_only, rate_limit, **_):
        if not name.strip() or len(name) > MAX_NAME:
            raise CommandError(f"{name!r}: a token name is 1 to {MAX_NAME} characters")
        if not 1 <= rate_limit <= 1_000_000:
            raise CommandError(f"--rate-limit {rate_limit}: must be from 1 to 1000000")
        owner = get_user_model().objects.filter(username=user).first()
        if owner is None:
            raise CommandError(f"no user {user!r} (create one with: archiver createsuperuser)")
        scope = None
        if org is not None:
            scope = Org.objects.filter(slug=org).first()
            if scope is None:
                raise CommandError(f"no org {org!r} (see `archiver org list`)")
        token, secret = ApiToken.issue(owner, name.strip(), org=scope, read_only=read_only,
                                       rate_limit=rate_limit, now=db_now())
        self.stderr.write(f"token {token.prefix} for {owner.get_username()}: store it now, "
                          "it is not shown again")
        self.stdout.write(secret)

    def list(self, *, json, **_):
        tokens = ApiToken.objects.select_related("user", "org").order_by("id")
        if json:
            self.write_json([summary(token) for token in tokens])
            return
        table = Table(box=None, header_style="bold", pad_edge=False)
        for column in ("PREFIX", "NAME", "USER", "ORG", "ACCESS", "RATE/MIN", "LAST USED", "STATE"):
            table.add_column(column, no_wrap=True)
        for token in tokens:
            table.add_row(token.prefix, token.name, token.user.get_username(),
                          token.org.slug if token.org else "all",
                          "read-only" if token.read_only else "read-write", str(token.rate_limit),
                          f"{token.last_used_at:%Y-%m-%d %H:%M}" if token.last_used_at else "never",
                          "revoked" if token.revoked_at else "active")
        self.render(table)

    def revoke(self, *, prefix, **_):
        token = ApiToken.objects.filter(prefix=prefix.strip().lower()).first()
        if token is None:
            raise CommandError(f"no token {prefix!r} (see `archiver token list`)")
        token.revoke(db_now())  # NotAllowed if already revoked
        self.stdout.write(f"revoked token {token.prefix} ({token.name})")


def summary(token: ApiToken) -> dict:
    return {
        "prefix": token.prefix,
        "name": token.name,
        "user": token.user.get_username(),
        "org": token.org.slug if token.org else None,
        "read_only": token.read_only,
        "rate_limit": token.rate_limit,
        "created_at": token.created_at.isoformat(),
        "last_used_at": token.last_used_at.isoformat() if token.last_used_at else None,
        "revoked_at": token.revoked_at.isoformat() if token.revoked_at else None,
    }

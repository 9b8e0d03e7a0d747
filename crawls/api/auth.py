"""Who is calling, what they may see, and what they may do.

Two ways in: an API token (`Authorization: Bearer arch_<prefix>_<secret>`, counted against
its rate limit) or the admin's session cookie of an active staff user (CSRF-checked for
unsafe methods, as the admin's own forms are). Every operation then asks `need()` for the
Django model permission it needs; a read-only token may only read; an org-scoped token sees
only its org, and everything else is "not found", never "forbidden".
"""

from __future__ import annotations

import hashlib
import hmac

from ninja.security import HttpBearer, SessionAuth

from crawls.api.errors import ApiError, rate_limited
from crawls.lease import db_now
from crawls.models import ApiToken, Crawl, Org

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def find_token(secret: str) -> ApiToken | None:
    """The usable token whose hash matches `secret`, or None."""
    parts = secret.split("_")
    if len(parts) < 3 or parts[0] != "arch":
        return None
    token = ApiToken.objects.usable().select_related("user", "org").filter(prefix=parts[1]).first()
    digest = hashlib.sha256(secret.encode()).hexdigest()
    if token is None or not hmac.compare_digest(digest, token.secret_hash):
        return None
    return token


class TokenAuth(HttpBearer):
    """A bearer token; each accepted request counts against the token's rate limit."""

    def authenticate(self, request, token: str):
        found = find_token(token)
        if found is None:
            return None
        wait = found.count_request(db_now())  # the clock every gunicorn worker and host shares
        if wait is not None:
            raise rate_limited(f"token {found.prefix} made its {found.rate_limit} requests of this "
                               f"minute; retry in {wait:.0f} s", wait)
        request.api_token = found
        return found


class StaffSession(SessionAuth):
    """The admin's session: active staff only (the admin's live views use the API)."""

    def _get_key(self, request):
        # Without a session cookie there is nothing to forge: a plain 401, not a CSRF 403.
        if self.param_name not in request.COOKIES:
            return None
        return super()._get_key(request)

    def authenticate(self, request, key):
        user = request.user
        if user.is_authenticated and user.is_active and user.is_staff:
            request.api_token = None
            return user
        return None


def caller(request):
    """(user, token or None) of an authenticated request."""
    token = getattr(request, "api_token", None)
    return (token.user if token else request.user), token


def need(request, permission: str) -> None:
    """Refuse (403) unless the caller may do this: a writable token for unsafe methods,
    and the user's Django permission `permission` (e.g. `crawls.change_crawl`)."""
    user, token = caller(request)
    if token is not None and token.read_only and request.method not in SAFE_METHODS:
        raise ApiError(403, f"token {token.prefix} is read-only", code="read_only_token")
    if not user.has_perm(permission):
        raise ApiError(403, f"user {user.get_username()!r} does not have the permission {permission}")


def scope_org_id(request) -> int | None:
    """The one org an org-scoped token may see; None means every org."""
    _, token = caller(request)
    return token.org_id if token is not None else None


def visible_crawls(request):
    crawls = Crawl.objects.select_related("org")
    org_id = scope_org_id(request)
    return crawls if org_id is None else crawls.filter(org_id=org_id)


def visible_orgs(request):
    org_id = scope_org_id(request)
    return Org.objects.all() if org_id is None else Org.objects.filter(pk=org_id)


def default_org_slug(request) -> str:
    """Where a new crawl goes without `org`: the token's org, else `default` (as the CLI)."""
    _, token = caller(request)
    return token.org.slug if token is not None and token.org_id else "default"

"""Admin log-in with a limit on failed attempts per (client address, username).

After MAX_FAILURES failures within WINDOW, that address may not try that username again
until LOCKOUT has passed, even with the right password: a guesser learns nothing more, and
the user still logs in from their own address. The count lives in the database
(LoginFailure), so every gunicorn worker sees it. Only a hash of the pair is stored; a
successful log-in clears it.

Behind a reverse proxy every request comes from the proxy's address, so the pair would be
per username alone and anyone could lock anyone out: with ARCHIVER_TRUSTED_PROXIES, the
client is the nearest address in X-Forwarded-For that is not a trusted proxy. The header
of any other peer is ignored (a guesser cannot name a fresh address per try).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import math

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from archiver import conf
from crawls.models import LoginFailure

MAX_FAILURES = 5
WINDOW = dt.timedelta(minutes=15)
LOCKOUT = dt.timedelta(minutes=15)


def client_address(remote_addr: str, forwarded_for: str, trusted: tuple[str, ...]) -> str:
    """The address that sent the request: REMOTE_ADDR, unless that is a trusted proxy; then
    X-Forwarded-For read from the right (each proxy appends its peer), skipping trusted ones."""
    networks = [ipaddress.ip_network(network) for network in trusted]
    if not in_networks(remote_addr, networks):
        return remote_addr
    for hop in reversed([part.strip() for part in forwarded_for.split(",") if part.strip()]):
        if not in_networks(hop, networks):
            return hop
    return remote_addr


def in_networks(address: str, networks) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)


def attempt_key(address: str, username: str) -> str:
    return hashlib.sha256(f"{address}\0{username.strip().lower()}".encode()).hexdigest()


def locked_for(key: str, now: dt.datetime) -> dt.timedelta | None:
    """How much longer this pair must wait, or None if it may try now."""
    row = LoginFailure.objects.filter(key=key, locked_until__gt=now).first()
    return row.locked_until - now if row else None


def record_failure(key: str, now: dt.datetime) -> None:
    """Count one failure; the MAX_FAILURES-th within WINDOW locks the pair out."""
    with transaction.atomic():
        if LoginFailure.objects.filter(key=key, first_at__lt=now - WINDOW).update(
                failures=1, first_at=now, locked_until=None):
            return
        if not LoginFailure.objects.filter(key=key).update(failures=F("failures") + 1):
            try:
                with transaction.atomic():
                    LoginFailure.objects.create(key=key, failures=1, first_at=now)
            except IntegrityError:  # a concurrent failure created it first
                LoginFailure.objects.filter(key=key).update(failures=F("failures") + 1)
        LoginFailure.objects.filter(key=key, failures__gte=MAX_FAILURES, locked_until__isnull=True).update(
            locked_until=now + LOCKOUT)


def forget_failures(key: str) -> None:
    LoginFailure.objects.filter(key=key).delete()


class RateLimitedLoginForm(AdminAuthenticationForm):
    """The admin's log-in form, refusing a pair that failed too often recently."""

    def clean(self):
        now = timezone.now()
        meta = self.request.META if self.request else {}
        address = client_address(meta.get("REMOTE_ADDR", ""), meta.get("HTTP_X_FORWARDED_FOR", ""),
                                 conf.get().trusted_proxies)
        key = attempt_key(address, self.cleaned_data.get("username") or "")
        if wait := locked_for(key, now):
            minutes = max(math.ceil(wait.total_seconds() / 60), 1)
            raise forms.ValidationError(
                f"Too many failed log-ins for this username from your address: "
                f"try again in {minutes} minute(s).", code="rate_limited")
        try:
            cleaned = super().clean()
        except forms.ValidationError:
            record_failure(key, now)
            raise
        forget_failures(key)
        return cleaned

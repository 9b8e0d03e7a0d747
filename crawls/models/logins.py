"""Failed admin log-ins, counted to slow down password guessing (crawls/admin_login.py)."""

from __future__ import annotations

from django.db import models


class LoginFailure(models.Model):
    """Failed admin log-ins for one (address, username) pair, to slow down password guessing."""

    key = models.CharField(max_length=64, unique=True, help_text="sha256 of address and username.")
    failures = models.PositiveIntegerField(default=0)
    first_at = models.DateTimeField(help_text="The first failure of the current window.")
    locked_until = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.failures} failures"

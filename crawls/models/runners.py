"""The runner daemons: one row each, alive while its heartbeat is fresh."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class RunnerRecord(models.Model):
    """A runner daemon, alive while its heartbeat is fresh."""

    id = models.CharField(primary_key=True, max_length=64)
    hostname = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    data_dir = models.CharField(max_length=500)
    started_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(default=timezone.now)
    stopped_at = models.DateTimeField(null=True, blank=True)
    # Written with each heartbeat (runner/tick_stats.py `exported`): the admin, another
    # process and maybe another host, serves them at /metrics (crawls/metrics.py).
    tick_stats = models.JSONField(default=dict, blank=True,
                                  help_text="Its tick durations so far, as a coarse histogram.")

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid}"

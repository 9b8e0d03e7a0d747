"""The runner's pace and limits: how many crawls, how long a lease, when a crawl stalls,
pauses too long, is retained, or keeps too big an archive or log."""

from __future__ import annotations

from pydantic import BaseModel, Field


class RunnerSettings(BaseModel):
    max_concurrent_crawls: int = Field(default=2, ge=1, le=1000)
    lease_seconds: int = Field(default=30, ge=5, le=3600)
    poll_interval: float = Field(default=2.0, gt=0, le=300)
    stall_minutes: float = Field(default=15, gt=0)
    pause_limit: int = Field(default=7 * 24 * 3600, ge=60, description="seconds")
    retention_days: float | None = Field(default=None, gt=0)
    disk_threshold_percent: float = Field(default=90, gt=0, le=100)
    max_launch_attempts: int = Field(default=5, ge=1, le=100)
    # The largest WACZ or WARC the runner keeps from a crawler (runner/archive.py); bigger is refused.
    archive_max_bytes: int = Field(default=64 << 30, ge=1 << 20, le=1 << 50)
    crawl_log_mb: float = Field(default=10, gt=0, le=100_000, description="log kept per crawl, newest")

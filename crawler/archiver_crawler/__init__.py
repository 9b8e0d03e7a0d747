"""archiver's own crawler: HTTP-only, browsertrix-crawler compatible launch and Redis protocol."""

__version__ = "0.1.0"

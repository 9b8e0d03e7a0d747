"""archiver: a crawl orchestrator for one host."""

__version__ = "0.1.0"

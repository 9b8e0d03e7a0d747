"""Exit codes (the real crawler's numbers) and the exceptions that lead to them."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    SUCCESS = 0
    GENERIC_ERROR = 1
    OUT_OF_SPACE = 3
    INVALID_CONFIG = 4
    REDIS_UNAVAILABLE = 8
    FAILED = 9
    INTERRUPTED = 11
    FORCED_INTERRUPT = 13
    SIZE_LIMIT = 14
    TIME_LIMIT = 15
    DISK_UTILIZATION = 16
    UPLOAD_FAILED = 22


class CrawlerError(Exception):
    """Base of the crawler's own errors; each carries the exit code it ends the process with."""

    exit_code = ExitCode.GENERIC_ERROR


class ConfigError(CrawlerError):
    """An option or config file value is invalid; relaunching will not help."""

    exit_code = ExitCode.INVALID_CONFIG


class RedisUnavailable(CrawlerError):
    """The state store cannot be reached."""

    exit_code = ExitCode.REDIS_UNAVAILABLE


class OutOfSpace(CrawlerError):
    """Writing to the crawl directory failed for lack of disk space."""

    exit_code = ExitCode.OUT_OF_SPACE


class UploadFailed(CrawlerError):
    """The session's WACZ could not be uploaded or reported (STORE_ENDPOINT_URL ...); a
    relaunch packages and uploads it again."""

    exit_code = ExitCode.UPLOAD_FAILED

"""archiver's exception tree. Code catches these, never bare Exception, at item boundaries."""


class ArchiverError(Exception):
    """Base of every error archiver raises on purpose."""


class ConfigError(ArchiverError):
    """A setting or a crawl configuration is invalid; the message names what and why."""


class NotAllowed(ArchiverError):
    """A state transition that the crawl's current state does not allow."""


class ActionRefused(ArchiverError):
    """A user action (crawls/actions.py) refused; `str()` is the sentence people read.

    `kind` says why: "state" (the crawl's or delivery's state forbids it now), "invalid"
    (no state would take this input) or "unavailable" (storage did not answer; trying again
    may work). `advice`, if any, is what a person can do about it: the CLI and the admin
    show it in brackets after `message`, the API answers `message` alone.
    """

    STATE, INVALID, UNAVAILABLE = "state", "invalid", "unavailable"

    def __init__(self, message: str, kind: str = STATE, advice: str = ""):
        super().__init__(f"{message} ({advice})" if advice else message)
        self.message = message
        self.kind = kind


class LeaseLost(ArchiverError):
    """Our lease on a row expired or was taken over: hands off that row."""


class QuotaExceeded(ArchiverError):
    """An org quota or a crawl limit forbids the requested work."""


class LaunchError(ArchiverError):
    """A crawler instance could not be started.

    `permanent` says whether trying again can help (a missing image can, a refused
    configuration cannot).
    """

    def __init__(self, message: str, *, permanent: bool = False):
        super().__init__(message)
        self.permanent = permanent


class EngineUnavailable(LaunchError):
    """The Docker engine (or another launcher backend) does not answer right now."""


class ImageMissing(LaunchError):
    """The crawler image is not on the Docker engine. The launcher never pulls one itself
    (a pull can take minutes and would hold the daemon's loop); the message says how to get it."""


class WebhookRefused(ArchiverError):
    """A webhook URL or its resolved address is not allowed (SSRF protection)."""


class ProgressCorrupt(ArchiverError):
    """A crawl's progress keys in Redis hold something no crawler writes (a counter that is
    not a number, a key of the wrong type). Reading again will not help: the message names
    the key and the problem, and the crawl fails after a bounded time instead of retrying
    forever. Redis being unreachable is not this: that stays redis.ConnectionError."""

    def __init__(self, key: str, problem: str):
        super().__init__(f"Redis key {key} {problem}")
        self.key = key
        self.problem = problem


class CrawlFailed(ArchiverError):
    """A held crawl cannot go on (a permanent crawler error, relaunches exhausted ...): the
    supervise step's error boundary fails it with this message (the cause first), its
    `detail` (where it came from: instance, exit code) and `stop_reason`."""

    def __init__(self, message: str, stop_reason: str = "", detail: str = ""):
        super().__init__(message)
        self.stop_reason = stop_reason
        self.detail = detail

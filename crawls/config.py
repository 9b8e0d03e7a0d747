"""Validated crawl configuration: `CrawlConfig`, the one entry point for crawl input, and
the crawler's options it carries (sizes, durations, browser options).

`CrawlConfig.parse(**values)` raises ConfigError with one readable line. The field rules it
shares with crawls/validation.py (URLs and hosts, header values, regexes, tags) are in
crawls/rules.py, so every way in (CLI, admin, API) refuses in the same words.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
)
from pydantic_core import PydanticCustomError

from archiver.conf import parse_duration
from archiver.errors import ConfigError
from crawls.rules import (
    Regexes,
    check_header_value,
    check_regex,
    check_url,
    first_error,
    shown,
    without_credentials,
)

ScopeType = Literal["page", "page-spa", "prefix", "host", "domain", "any", "custom"]

SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
MAX_SIZE = 2**50  # one pebibyte: larger is a typo, not a plan

MAX_SEEDS = 10_000


# --- sizes and durations -----------------------------------------------------------------


def size_in_bytes(text: str | int) -> int:
    """`500MB`, `2GiB`, `1.5 gb` or plain bytes, as bytes; ValueError if it is not a size."""
    if isinstance(text, int):
        return text
    # Up to 100 digits, or an exponent (1e30): a number read is refused by its range, with
    # the range (exit 1). Fraction reads it exactly; three exponent digits bound its size.
    match = re.fullmatch(r"\s*(\d{1,100}(?:\.\d{1,30})?(?:[eE][+-]?\d{1,3})?)\s*([a-zA-Z]{0,3})\s*", text)
    unit = match and match.group(2).lower()
    if not match or unit not in SIZE_UNITS:
        raise ValueError(f"{shown(text)} is not a size (try 500MB, 2GiB or a number of bytes)")
    return int(Fraction(match.group(1)) * SIZE_UNITS[unit])


def parse_size(text: str | int) -> int:
    """A size (see size_in_bytes) from 1 byte to MAX_SIZE."""
    value = size_in_bytes(text)
    if not 0 < value <= MAX_SIZE:
        raise ValueError(f"{shown(text)} is out of range (1 byte to 1 PiB)")
    return value


def human_size(num: int | float | None) -> str:
    if num is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(num) < 1000 or unit == "TB":
            return f"{num:.0f} {unit}" if unit == "B" else f"{num:.1f} {unit}"
        num /= 1000
    return f"{num:.1f} TB"  # pragma: no cover


def human_duration(seconds: float) -> str:
    """A length of time as a sentence says it: "20 s", "2 min 5 s", "1 h 30 min"."""
    total = max(round(seconds), 0)
    if total < 60:
        return f"{total} s"
    if total < 3600:
        minutes, secs = divmod(total, 60)
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(round(total / 60), 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


# --- browser options (browsertrix-crawler only; docs/crawlers.md) --------------------------

# The values the real crawler documents for its --behaviors, --waitUntil and --screenshot.
BEHAVIORS = ("autoscroll", "autoplay", "autofetch", "autoclick", "siteSpecific")
WAIT_UNTIL = ("load", "domcontentloaded", "networkidle0", "networkidle2")
SCREENSHOTS = ("view", "thumbnail", "fullPage", "fullPageFinal")
# A browser crawl takes a thumbnail of every page unless told otherwise: the admin lists a
# crawl's pages with them (crawls/admin/pages.py). "none" is archiver's word for no screenshot.
DEFAULT_SCREENSHOTS = ["thumbnail"]
NO_SCREENSHOT = "none"
# Field → the real crawler's flag; archiver's own crawler takes them in browser mode only,
# and not the ones in REAL_CRAWLER_ONLY.
BROWSER_FLAGS = {
    "behaviors": "--behaviors", "page_load_timeout": "--pageLoadTimeout",
    "post_load_delay": "--postLoadDelay", "wait_until": "--waitUntil", "block_ads": "--blockAds",
    "screenshot": "--screenshot", "lang": "--lang", "profile": "--profile",
}
REAL_CRAWLER_ONLY = ("block_ads", "profile")
MAX_WAIT_SECONDS = 3600
# The two-letter ISO 639-1 codes: the only --lang browsertrix-crawler takes (anything else,
# de-DE too, makes it quit at launch with exit 17), so the only ones archiver accepts.
ISO_639_1_CODES = """
    aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy
    da de dv dz ee el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu
    hy hz ia id ie ig ii ik io is it iu ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb
    lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my na nb nd ne ng nl nn no nr nv ny oc oj om
    or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn so sq sr ss st su sv sw
    ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo za zh zu
"""
ISO_639_1 = frozenset(ISO_639_1_CODES.split())
PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def given(value) -> bool:
    """Whether a browser option is set: not None, and not an unticked flag (0 counts)."""
    return value is not None and value is not False


def split_commas(value):
    """`"autoscroll, autoplay"` as a list; a list (the API's JSON) as it is."""
    return [part.strip() for part in value.split(",")] if isinstance(value, str) else value


def choices_of(what: str, choices: tuple[str, ...]):
    def check(values: list[str] | None) -> list[str] | None:
        if values is None:
            return None
        if not values:
            raise ValueError(f"give at least one {what}, or leave it out for the crawler's default")
        for value in values:
            if value not in choices:
                raise ValueError(f"{shown(value)} is not a {what} (one of {', '.join(choices)})")
        return list(dict.fromkeys(values))

    return check


def choice_list(what: str, choices: tuple[str, ...]):
    """An optional list of `choices`, given as a list or as one comma-separated string."""
    return Annotated[
        Annotated[list[StrictStr], Field(max_length=100)] | None,
        BeforeValidator(split_commas),
        AfterValidator(choices_of(what, choices)),
        Field(description=f"comma-separated or a list: {', '.join(choices)}"),
    ]


Behaviors = choice_list("behavior", BEHAVIORS)
WaitUntil = choice_list("page load condition", WAIT_UNTIL)


def check_no_screenshot(kinds: list[str] | None) -> list[str] | None:
    if kinds and NO_SCREENSHOT in kinds and len(kinds) > 1:
        raise ValueError(f"{NO_SCREENSHOT!r} takes no screenshot: it is given alone")
    return kinds


Screenshots = Annotated[choice_list("screenshot kind", (*SCREENSHOTS, NO_SCREENSHOT)),
                        AfterValidator(check_no_screenshot)]


def asked(name: str, value) -> bool:
    """Whether a browser option asks the browser for something ("none" screenshots do not)."""
    return given(value) and not (name == "screenshot" and value == [NO_SCREENSHOT])


def check_lang(value: str) -> str:
    """A language as browsertrix-crawler takes it: an ISO 639-1 code, in lower case."""
    if value.lower() not in ISO_639_1:
        raise ValueError(f"{shown(value)} is not a two-letter ISO 639-1 language code (such as en, de or "
                         f"pt), the only form browsertrix-crawler takes (not de-DE or pt-BR)")
    return value.lower()


def check_profile_name(value: str) -> str:
    if not PROFILE_NAME.fullmatch(value):
        raise ValueError(
            f"{shown(value)} is not a profile name (1 to 64 letters, digits, - and _, "
            f"starting with a letter or digit)"
        )
    return value


def input_context() -> dict:
    """What judging new crawl input needs to know beyond the values: the crawler archiver
    drives, whether it is archiver's own (browser mode only with a Chromium), and the
    Chromium found for the configured launcher (archiver.conf.Settings.chromium_path)."""
    from archiver import conf  # here only: the rest of this module needs no settings

    settings = conf.get()
    own = not settings.browser_crawler()
    return {"crawler": settings.crawler_name(), "own_crawler": own,
            "chromium": settings.chromium_path() if own else None,
            "allow_networks": settings.crawl_allow_networks}


def check_seed_address(url: str, allow: tuple[str, ...]) -> str:
    """A seed whose host is an address (in any spelling the crawler and Chromium read as
    one: `127。0。0。5`, `2130706437`, `[::ffff:127.0.0.5]`) that the crawl address policy
    refuses, with ARCHIVER_CRAWL_ALLOW_NETWORKS opening `allow`, is refused here with the
    crawler's own reason; names are judged by the crawler once resolved."""
    from archiver_crawler import netpolicy  # the crawler's rules, read only for new input

    try:
        ip = netpolicy.literal_address(urlsplit(url).hostname or "")
    except netpolicy.NotAnAddress as exc:
        raise ValueError(f"{shown(without_credentials(url))}: {exc}") from None
    if ip is not None:
        policy = netpolicy.AddressPolicy(netpolicy.parse_networks(allow))
        try:
            policy.check(str(ip), str(ip))
        except netpolicy.AddressRefused as exc:
            raise ValueError(f"{shown(without_credentials(url))}: {exc}") from None
    return url


class CrawlConfig(BaseModel):
    """What to crawl and within which limits. Stored on the crawl as JSON.

    Its booleans and whole numbers are strict: the CLI and the admin parse their text
    themselves, and an API client's `"yes"`, `"2"`, `true` for a depth or `10.0` is refused
    (422), not read as something it may not have meant."""

    model_config = ConfigDict(extra="forbid")

    seeds: list[StrictStr] = Field(min_length=1, max_length=MAX_SEEDS)
    scope_type: ScopeType = "prefix"
    depth: StrictInt = Field(default=-1, ge=-1, le=1000, description="-1 = unlimited")
    extra_hops: StrictInt = Field(default=0, ge=0, le=10)
    page_limit: StrictInt | None = Field(default=None, ge=1, le=100_000_000)
    size_limit: StrictInt | None = Field(default=None, ge=1, le=MAX_SIZE)
    time_limit: StrictInt | None = Field(default=None, ge=1, le=10 * 365 * 86400)
    include: Regexes = Field(default_factory=list)
    exclude: Regexes = Field(default_factory=list)
    workers: StrictInt = Field(default=1, ge=1, le=16)
    scale: StrictInt = Field(default=1, ge=1, le=8)
    user_agent: StrictStr | None = None
    use_robots: StrictBool = False
    dedup: StrictBool | None = Field(
        default=None, description="revisit records for payloads the org kept already; "
                                  "None: on for a schedule's crawls, off for one-off crawls")
    qa: StrictBool = Field(default=False, description="quality review once the crawl ends and its archive "
                                                      "is kept (runner/qa_queue.py)")
    host_rate: StrictFloat | None = Field(
        default=None, ge=0, le=1000,
        description="requests per second to one host, every crawl of it together (archiver's "
                    "crawler); None: ARCHIVER_HOST_RATE; 0: no limit")
    # Browser mode of archiver's own crawler; None (auto) is resolved when the crawl is added,
    # so its mode never changes between launches. Declared before the options it allows.
    browser: StrictBool | None = Field(default=None, validate_default=True,
                                       description="None: browser mode when a Chromium is found")
    # Browser options (None: the crawler's default): browsertrix-crawler, or archiver's own
    # crawler in browser mode.
    behaviors: Behaviors = None
    page_load_timeout: StrictInt | None = Field(default=None, ge=1, le=MAX_WAIT_SECONDS, description="seconds")
    post_load_delay: StrictInt | None = Field(default=None, ge=0, le=MAX_WAIT_SECONDS, description="seconds")
    wait_until: WaitUntil = None
    block_ads: StrictBool = False
    screenshot: Screenshots = None
    lang: StrictStr | None = None
    profile: Annotated[StrictStr, AfterValidator(check_profile_name)] | None = Field(
        default=None, description="the name of a browser profile of the crawl's org (archiver profile add)")
    # Seeds from sitemaps (both crawlers: --sitemap, --sitemapFromDate); None: none read.
    sitemap: StrictStr | None = Field(
        default=None, max_length=2048,
        description='"auto" (the sitemaps robots.txt names, else /sitemap.xml) or a sitemap URL')
    seed_file: StrictStr | None = Field(
        default=None, max_length=2048,
        description="a URL of more seeds, one a line, that the crawler reads when it starts")
    sitemap_since: StrictStr | None = Field(
        default=None, max_length=64,
        description='only sitemap URLs with a lastmod from then: a W3C date (2026-05-01, '
                    '2026-05-01T10:00:00Z) or "last", the start of the last complete crawl of the same seeds')

    @model_serializer(mode="wrap")
    def _without_unset_browser_options(self, handler) -> dict:
        # Stored configs, payloads and the API show browser options only when a crawl has them,
        # and the mode once it is resolved (crawls stored before it have none: HTTP mode).
        data = handler(self)
        return {key: value for key, value in data.items()
                if (key not in BROWSER_FLAGS or given(value))
                and not (key in ("dedup", "browser", "sitemap", "sitemap_since", "seed_file")
                         and value is None)
                and not (key == "qa" and not value)
                and not (key == "host_rate" and value is None)}

    @field_validator("browser")
    @classmethod
    def _browser_mode(cls, value: bool | None, info: ValidationInfo) -> bool | None:
        context = info.context
        if context is None:  # a stored crawl keeps the mode it was added with
            return value
        if not context.get("own_crawler"):
            if value is False:
                raise PydanticCustomError(
                    "browser_mode",
                    "the configured crawler {crawler} always drives a browser; HTTP mode needs archiver's "
                    "own crawler (leave ARCHIVER_CRAWLER_IMAGE at its default)",
                    {"crawler": context.get("crawler")},
                )
            return True
        if value is None:
            return context.get("chromium") is not None
        if value and context.get("chromium") is None:
            raise PydanticCustomError(
                "browser_mode",
                "no Chromium found for archiver's own crawler (install the chromium package, or set "
                "ARCHIVER_CHROMIUM to its path)", {},
            )
        return value

    @field_validator(*BROWSER_FLAGS)
    @classmethod
    def _needs_a_browser(cls, value, info: ValidationInfo):
        # Only new input is judged (parse() passes the context): a stored crawl stays readable
        # whatever crawler is configured later.
        context = info.context
        if context is None or not context.get("own_crawler") or not asked(info.field_name, value):
            return value
        if info.field_name in REAL_CRAWLER_ONLY:
            raise PydanticCustomError(
                "browser_crawler",
                "needs browsertrix-crawler; archiver's own crawler {crawler} does not take it "
                "(set ARCHIVER_CRAWLER_IMAGE to a browsertrix-crawler image)",
                {"crawler": context.get("crawler")},
            )
        if not info.data.get("browser"):
            why = ("no Chromium was found (install the chromium package, or set ARCHIVER_CHROMIUM)"
                   if context.get("chromium") is None else "browser mode is off for this crawl")
            raise PydanticCustomError(
                "browser_crawler",
                "needs browser mode; archiver's own crawler {crawler} fetches over HTTP only here: {why}",
                {"crawler": context.get("crawler"), "why": why},
            )
        return value

    @field_validator("lang")
    @classmethod
    def _lang(cls, value: str | None, info: ValidationInfo) -> str | None:
        # New input only: a crawl stored with a BCP 47 tag of an older archiver stays readable.
        return value if value is None or info.context is None else check_lang(value)

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, value: list[str], info: ValidationInfo) -> list[str]:
        seeds = [check_url(url) for url in value]
        if info.context is not None:  # new input: a stored crawl stays readable
            allow = tuple(info.context.get("allow_networks", ()))
            seeds = [check_seed_address(url, allow) for url in seeds]
        return seeds

    @field_validator("sitemap", "seed_file")
    @classmethod
    def _sitemap(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or (value == "auto" and info.field_name == "sitemap"):
            return value
        url = check_url(value)
        if info.context is not None:  # new input: the address policy, as for seeds
            url = check_seed_address(url, tuple(info.context.get("allow_networks", ())))
        return url

    @field_validator("sitemap_since")
    @classmethod
    def _sitemap_since(cls, value: str | None, info: ValidationInfo) -> str | None:
        from archiver_crawler.sitemap import w3c_datetime  # the crawler's reading of the date

        if value is None:
            return None
        if info.data.get("sitemap") is None:
            raise ValueError("needs a sitemap (--sitemap): it filters the URLs of the sitemaps")
        if value != "last" and w3c_datetime(value) is None:
            raise ValueError(f"{shown(value)} is not a date such as 2026-05-01 or "
                             f"2026-05-01T10:00:00Z, nor 'last'")
        return value

    @field_validator("include", "exclude")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        return [check_regex(rx) for rx in value]

    @field_validator("user_agent")
    @classmethod
    def _user_agent(cls, value: str | None) -> str | None:
        return None if value is None else check_header_value(value, name="the user agent")

    @classmethod
    def parse(cls, **values) -> CrawlConfig:
        """Validate new input, raising ConfigError with one readable line."""
        try:
            return cls.model_validate(values, context=input_context())
        except ValidationError as exc:
            raise ConfigError(first_error(exc, model=cls)) from None

    def uses_browser(self) -> bool:
        """Whether any browser option is set (not the mode: see `browser`)."""
        return any(asked(name, getattr(self, name)) for name in BROWSER_FLAGS)

    def browser_args(self) -> list[str]:
        """The real crawler's flags for the browser options set, but --profile: where the
        profile file is depends on the launcher (runner/launchers)."""
        args = []
        for name, flag in BROWSER_FLAGS.items():
            value = getattr(self, name)
            if name == "screenshot":
                value = DEFAULT_SCREENSHOTS if value is None else value
                if value == [NO_SCREENSHOT]:
                    continue
            if name == "profile" or not given(value):
                continue
            if value is True:
                args.append(flag)
            else:
                args += [flag, ",".join(value) if isinstance(value, list) else str(value)]
        return args

    def own_crawler_args(self, chromium: str | None = None) -> list[str]:
        """archiver's own crawler's flags (docs/crawlers.md): in browser mode --browser, the
        browser options and, when given, which Chromium (every crawler gets --text to-pages:
        LaunchSpec.crawler_args)."""
        if not self.browser:
            return []
        return ["--browser", *self.browser_args(),
                *(["--chromium", chromium] if chromium else [])]

    def crawler_config(self, page_limit: int | None) -> dict:
        """The crawler's own config file (the real option names, see crawler-protocol.md)."""
        config: dict = {
            "seeds": self.seeds,
            "scopeType": self.scope_type,
            "depth": self.depth,
            "extraHops": self.extra_hops,
            "include": self.include,
            "exclude": self.exclude,
        }
        if page_limit:
            config["limit"] = page_limit
        if self.user_agent:
            config["userAgent"] = self.user_agent
        if self.use_robots:
            config["useRobots"] = True
        if self.sitemap:
            config["sitemap"] = True if self.sitemap == "auto" else self.sitemap
        if self.sitemap_since and self.sitemap_since != "last":  # "last": runner/launch.py
            config["sitemapFromDate"] = self.sitemap_since
        if self.seed_file:
            config["seedFile"] = self.seed_file
        from archiver import conf  # here only: the rest of this module needs no settings

        allow = conf.get().crawl_allow_networks
        if allow:
            # archiver's crawler refuses local addresses unless told (docs/security.md).
            config["allowNetworks"] = list(allow)
        return config



def parse_duration_arg(text: str) -> int:
    return parse_duration(text)

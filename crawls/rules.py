"""The field rules every way in shares (CLI, admin, API): URLs and hosts, header values,
regexes, tags, and the words of a refusal (`shown`, `first_error`).

The rules are plain functions raising ValueError, so the pydantic models of
crawls/config.py (crawls) and crawls/validation.py (orgs, webhooks, schedules) speak with
the same words. Messages never echo a URL's user name or password, and show at most SHOWN
characters of any value, escaped: a refusal is one line whatever the input was.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    StrictStr,
    TypeAdapter,
    ValidationError,
)

from archiver.errors import ConfigError

MAX_URL_LENGTH = 2048  # what browsers and servers reliably accept
MAX_HOST_LENGTH = 253  # a DNS name, without its final dot
MAX_LABEL_LENGTH = 63
MAX_HEADER_LENGTH = 512  # a User-Agent longer than this is a mistake
MAX_REGEX_LENGTH = 1000  # compiled at once; the crawler compiles it again per URL
MAX_REGEXES = 100
MAX_TAG_LENGTH = 100
MAX_TAGS = 50
RANGE_TEXT = {"size_limit": "1 byte to 1 PiB", "time_limit": "1 second to 10 years"}
SHOWN = 60  # characters of a refused value quoted back in a message

HOST_LABEL = re.compile(r"[a-z0-9_-]+")
NUMERIC_LABEL = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)")
RATE = re.compile(r"[0-9]+(?:\.[0-9]+)?|\.[0-9]+")


def shown(value: object, limit: int = SHOWN) -> str:
    """`value` quoted for a message: escaped (so one line) and cut to `limit` characters."""
    if isinstance(value, str):
        return repr(value[:limit] + "…") if len(value) > limit else repr(value)
    text = repr(value)
    return text[:limit] + "…" if len(text) > limit else text


def printable(text: str) -> bool:
    """No control characters (CR, LF, NUL, ...), line separators or other invisible marks."""
    return text.isprintable()

# --- URLs and hosts ----------------------------------------------------------------------


def without_credentials(url: str) -> str:
    """The URL as a message may show it: nothing before its last `@` (user, password)."""
    return "…@" + url.rsplit("@", 1)[1] if "@" in url else url


def check_url(url: str) -> str:
    """A seed URL: http(s), a valid host, no credentials, at most MAX_URL_LENGTH characters."""
    if not isinstance(url, str):
        raise ValueError("a URL must be text")
    url = url.strip()
    if not url:
        raise ValueError("the URL is empty")
    quoted = shown(without_credentials(url))
    if len(url) > MAX_URL_LENGTH:
        raise ValueError(f"{quoted}: the URL is longer than {MAX_URL_LENGTH} characters")
    if not all(printable(ch) and not ch.isspace() for ch in url):
        raise ValueError(f"{quoted}: the URL contains white space or control characters")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise ValueError(f"{quoted}: not a valid URL") from None
    if "@" in parts.netloc:
        raise ValueError(
            f"{quoted}: seed URLs may not contain a user name or password (they would be shown "
            f"in status, the admin and webhooks)"
        )
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"{quoted}: only http:// and https:// URLs can be crawled")
    if not parts.hostname:
        raise ValueError(f"{quoted}: the URL has no host")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise ValueError(f"{quoted}: the port is not a number from 1 to 65535")
    try:
        check_host(parts.hostname, bracketed="[" in parts.netloc)
    except ValueError as exc:
        raise ValueError(f"{quoted}: {exc}") from None
    return url


def crawlable(url: str) -> bool:
    """Whether `url` passes the seed rules (check_url)."""
    try:
        check_url(url)
    except ValueError:
        return False
    return True


def check_host(host: str, *, bracketed: bool = False) -> str:
    """A host name (IDNA, labels of 1 to 63 characters, 253 in all) or an IP address,
    as its ASCII form; ValueError says what is wrong."""
    if bracketed or ":" in host:
        try:
            return str(ipaddress.IPv6Address(host))
        except ValueError:
            raise ValueError("the host is not a valid IPv6 address") from None
    name = host[:-1] if host.endswith(".") else host  # a final dot: the absolute form
    try:
        ascii_name = name.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise ValueError("the host is not a valid domain name (empty or too long label)") from None
    labels = ascii_name.split(".")
    if not ascii_name or len(ascii_name) > MAX_HOST_LENGTH:
        raise ValueError(f"the host name is empty or longer than {MAX_HOST_LENGTH} characters")
    if not all(0 < len(label) <= MAX_LABEL_LENGTH for label in labels):
        raise ValueError(f"the host name has an empty label or one longer than {MAX_LABEL_LENGTH}")
    if NUMERIC_LABEL.fullmatch(labels[-1]):
        return check_ipv4(ascii_name)
    if not all(HOST_LABEL.fullmatch(label) for label in labels):
        raise ValueError("the host name may contain only letters, digits, - and _")
    try:  # an `xn--` label must be real punycode, or browsers and resolvers disagree on it
        ascii_name.encode("ascii").decode("idna")
    except UnicodeError:
        raise ValueError("the host name has an invalid xn-- (punycode) label") from None
    return ascii_name


def check_ipv4(host: str) -> str:
    """Only the plain dotted form: `127.1`, `2130706433` or `0x7f.0.0.1` mean different
    things to different programs, so they are refused rather than guessed."""
    labels = host.split(".")
    canonical = len(labels) == 4 and all(
        label.isdigit() and len(label) <= 3 and int(label) <= 255 and str(int(label)) == label
        for label in labels
    )
    if not canonical:
        raise ValueError("a numeric host must be an IPv4 address a.b.c.d with numbers 0 to 255")
    return host


# --- header values, regexes, tags ----------------------------------------------------------


def requests_per_second(text: str) -> float:
    """A host rate as typed (CLI, admin): a plain decimal number such as 2 or 0.5; its range
    is the config's to judge."""
    if not RATE.fullmatch(text.strip()):
        raise ValueError(f"{shown(text)} is not a number of requests per second such as 2 or 0.5")
    return float(text)


def check_header_value(value: str, *, name: str = "the value") -> str:
    """An HTTP header value: not empty, no control characters (CR/LF), length-capped."""
    if not value.strip():
        raise ValueError(f"{name} is empty")
    if len(value) > MAX_HEADER_LENGTH:
        raise ValueError(f"{name} is longer than {MAX_HEADER_LENGTH} characters")
    if not printable(value):
        raise ValueError(f"{name} contains control characters (such as a line break)")
    return value


def check_regex(pattern: str) -> str:
    """A URL regex: not empty, printable, at most MAX_REGEX_LENGTH characters, compiles."""
    if not isinstance(pattern, str) or not pattern:
        raise ValueError("an empty regular expression would match every URL")
    if len(pattern) > MAX_REGEX_LENGTH:
        raise ValueError(f"a regular expression is at most {MAX_REGEX_LENGTH} characters")
    if not printable(pattern):
        raise ValueError(f"{shown(pattern)} contains control characters")
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise ValueError(f"{shown(pattern)} is not a valid regular expression: {exc}") from None
    return pattern


def clean_tags(tags: list[str]) -> list[str]:
    """Tags trimmed and without repeats; each 1 to MAX_TAG_LENGTH printable characters."""
    cleaned = []
    for tag in tags:
        tag = tag.strip()
        if not tag or len(tag) > MAX_TAG_LENGTH or not printable(tag):
            raise ValueError(
                f"tag {shown(tag)}: a tag is 1 to {MAX_TAG_LENGTH} characters, without control characters"
            )
        cleaned.append(tag)
    return list(dict.fromkeys(cleaned))


# A JSON list of short strings: [1, null], {"a": 1}, "a" and null are all refused.
Tags = Annotated[list[StrictStr], Field(max_length=MAX_TAGS), AfterValidator(clean_tags)]
_TAGS = TypeAdapter(Tags)


def parse_tags(value) -> list[str]:
    """Tags as the admin or an API receives them; ConfigError with one line if not valid."""
    try:
        return _TAGS.validate_python(value)
    except ValidationError as exc:
        raise ConfigError(tags_error(exc)) from None


def tags_error(exc: ValidationError) -> str:
    if exc.errors()[0]["type"] in ("list_type", "string_type"):
        return 'tags must be a list of strings, such as ["weekly", "news"]'
    return "tags: " + first_error(exc, with_field=False)


Regexes = Annotated[list[StrictStr], Field(max_length=MAX_REGEXES)]


def first_error(exc: ValidationError, *, with_field: bool = True,
                model: type[BaseModel] | None = None) -> str:
    """The first problem pydantic found, as one line: `field: why` (never the input itself,
    which may be a secret or a megabyte long)."""
    error = exc.errors()[0]
    loc = [str(part) for part in error["loc"]] if with_field else []
    where = ".".join(loc)
    message = range_message(model, error) or error["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def range_message(model: type[BaseModel] | None, error: dict) -> str | None:
    """`must be from 1 to 16` for a number outside a field's bounds (pydantic names one)."""
    if model is None or not error["loc"] or error["type"] not in ("greater_than_equal", "less_than_equal"):
        return None
    field = model.model_fields.get(str(error["loc"][0]))
    if field is None:
        return None
    if str(error["loc"][0]) in RANGE_TEXT:
        return f"must be from {RANGE_TEXT[str(error['loc'][0])]}"
    low = next((m.ge for m in field.metadata if hasattr(m, "ge")), None)
    high = next((m.le for m in field.metadata if hasattr(m, "le")), None)
    return f"must be from {low} to {high}" if low is not None and high is not None else None

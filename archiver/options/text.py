"""Settings written as text that more than one concern (and the crawl options) read:
durations, Swarm constraints, web origins."""

from __future__ import annotations

import re
from fractions import Fraction
from urllib.parse import urlsplit

# A Swarm placement constraint: `node.labels.zone==eu`, `node.role!=manager` ...
CONSTRAINT = re.compile(r"[A-Za-z0-9_.-]+ *(==|!=) *[^\s,]+")


def shown(value: str | None) -> str | None:
    """A setting's value as a message may quote it: a URL's credentials masked (database and
    Redis URLs carry passwords)."""
    if value is None or "@" not in value:
        return value
    # Up to the netloc's last "@": a password may hold an unescaped "@" ("pa@ss" would show
    # "ss" if cut at the first).
    return re.sub(r"^([^:/]*:?//)[^/]*@", r"\1***@", value)


def origin_of(value: str) -> str:
    """scheme://host[:port] of an http(s) URL that names nothing more (no path, query or
    credentials); ValueError otherwise."""
    parts = urlsplit(value.strip())
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok \
            or parts.path.strip("/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("must be http(s)://host[:port], with no path, query or credentials")
    return f"{parts.scheme}://{parts.netloc.lower()}"


def constraints(value) -> tuple[str, ...]:
    """Swarm placement constraints from a comma-separated string or a list; ValueError names
    the first that is not `<attribute>==<value>` or `<attribute>!=<value>`."""
    parts = value.split(",") if isinstance(value, str) else value
    if not isinstance(parts, (list, tuple)):
        raise ValueError("must be a list of constraints such as node.labels.zone==eu")
    found = tuple(str(part).strip() for part in parts if str(part).strip())
    for rule in found:
        if not CONSTRAINT.fullmatch(rule):
            raise ValueError(f"{quoted(rule)} is not a constraint (try node.labels.zone==eu or node.role!=manager)")
    return found


def duration_in_seconds(text: str) -> int:
    """`90s`, `30m`, `2h`, `7d` or plain seconds, as whole seconds; ValueError if it is not
    a duration (the range is the caller's: see parse_duration)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    value = text.strip().lower()
    factor = units.get(value[-1:])
    number = value[:-1] if factor else value
    # Decimal numbers only (float() would also take `1_000`, `inf` and `nan`), up to 100
    # digits or with an exponent (1e30): a number read is refused by its range, with the range
    # (exit 1). Fraction reads it exactly; three exponent digits bound its size.
    if not re.fullmatch(r"[+-]?[0-9]{1,100}(?:\.[0-9]{1,15})?(?:e[+-]?[0-9]{1,3})?", number):
        raise ValueError(f"{quoted(text)} is not a duration (try 90s, 30m, 2h or 7d)")
    return int(Fraction(number) * (factor or 1))


def quoted(text: str) -> str:
    return repr(text[:30] + "…") if len(text) > 30 else repr(text)


def parse_duration(text: str) -> int:
    """A duration (see duration_in_seconds) over zero and under ten years."""
    seconds = duration_in_seconds(text)
    if not 0 < seconds < 10 * 365 * 86400:
        raise ValueError(f"{quoted(text)} is out of range")
    return seconds

"""Which network addresses archiver may send requests to: one set of rules, two users.

The crawler applies them to every address it connects to (`AddressPolicy`), and archiver's
webhook dispatcher (`crawls.ssrf`) applies the same address classes to webhook receivers.
Pure Python, no Django and no I/O except `own_addresses()`, which reads this host's
interface addresses from /proc once.

The rules judge an *address*, never a name: a host name means nothing until it is
resolved, and then every address it resolved to is judged (see fetch.PolicyResolver for
how the crawler connects only to the addresses it judged).

- `address_problem(ip)`: why an address is not globally routable unicast (loopback,
  link-local incl. 169.254.169.254 and fe80::/10, private, CGNAT, multicast, reserved...),
  or None. IPv6 forms that carry an IPv4 address (`::ffff:169.254.169.254`, NAT64, 6to4)
  are judged by the IPv4 address they reach.
- `parse_ipv4(host)`: the address a host written as a number means in any spelling the C
  library accepts (`2130706433`, `0x7f.1`, `0177.0.0.1`), so that no resolver reads it
  differently from the check.
- `mapped_host(host)`: the host as URL parsers map it before reading it (UTS 46: the
  ideographic, full-width and half-width full stops, full-width digits, case), so that
  `127。0。0。5` is judged as the 127.0.0.5 that aiohttp and Chromium connect to.
- `AddressPolicy`: the crawl's rules: deny those classes and this host's own addresses,
  except networks an operator opened (`allow`, CIDRs).
"""

from __future__ import annotations

import ipaddress
import logging
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import idna

logger = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

# Ordered: a narrower block comes before the wider one that contains it.
BLOCKED_IPV4 = (
    (_V4("0.0.0.0/8"), "an unspecified ('this network') address"),
    (_V4("10.0.0.0/8"), "a private address"),
    (_V4("100.64.0.0/10"), "a shared (carrier-grade NAT) address"),
    (_V4("127.0.0.0/8"), "a loopback address"),
    (_V4("169.254.0.0/16"), "a link-local address"),
    (_V4("172.16.0.0/12"), "a private address"),
    (_V4("192.0.0.0/24"), "an IETF protocol assignment"),
    (_V4("192.0.2.0/24"), "a documentation address"),
    (_V4("192.88.99.0/24"), "a 6to4 relay anycast address"),
    (_V4("192.168.0.0/16"), "a private address"),
    (_V4("198.18.0.0/15"), "a benchmarking address"),
    (_V4("198.51.100.0/24"), "a documentation address"),
    (_V4("203.0.113.0/24"), "a documentation address"),
    (_V4("224.0.0.0/4"), "a multicast address"),
    (_V4("255.255.255.255/32"), "the broadcast address"),
    (_V4("240.0.0.0/4"), "a reserved address"),
)

BLOCKED_IPV6 = (
    (_V6("::/128"), "an unspecified address"),
    (_V6("::1/128"), "a loopback address"),
    (_V6("::/96"), "an IPv4-compatible address (deprecated)"),
    (_V6("64:ff9b:1::/48"), "a local-use NAT64 address"),
    (_V6("100::/64"), "a discard-only address"),
    (_V6("2001::/32"), "a Teredo tunnel address"),
    (_V6("2001:2::/48"), "a benchmarking address"),
    (_V6("2001:10::/28"), "an ORCHID address"),
    (_V6("2001:20::/28"), "an ORCHID address"),
    (_V6("2001:db8::/32"), "a documentation address"),
    (_V6("3fff::/20"), "a documentation address"),
    (_V6("5f00::/16"), "a segment-routing address"),
    (_V6("fc00::/7"), "a unique-local (private) address"),  # incl. fd00:ec2::254 (AWS metadata)
    (_V6("fe80::/10"), "a link-local address"),
    (_V6("fec0::/10"), "a site-local address (deprecated)"),
    (_V6("ff00::/8"), "a multicast address"),
)
GLOBAL_UNICAST_V6 = _V6("2000::/3")
NAT64_WELL_KNOWN = _V6("64:ff9b::/96")

OWN_ADDRESS = "one of this host's own addresses"
# What opens a network: archiver reads it and hands it to the crawler as allowNetworks.
ALLOW_VARIABLE = "ARCHIVER_CRAWL_ALLOW_NETWORKS"


class NotAnAddress(ValueError):
    """A host that ends in a number (so it is an IPv4 address by the URL standard) but is
    no valid one; refused rather than handed to a resolver that might read it otherwise."""


# --- the text of a host -------------------------------------------------------------------


def parse_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """An IPv4 address in any form inet_aton() accepts, or None if `host` is a name.

    Follows the URL standard: a host whose last label is a number is an address
    (`2130706433`, `0x7f.1`, `017700000001`, `127.1`), and one that is not a valid
    address raises NotAnAddress.
    """
    labels = host.split(".")
    if len(labels) > 1 and labels[-1] == "":
        labels.pop()
    if not (labels[-1].isdigit() or _number(labels[-1]) is not None):
        return None
    numbers = [_number(label) for label in labels]
    if len(labels) > 4 or None in numbers:
        raise NotAnAddress(f"{host!r} is not a valid IPv4 address")
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        raise NotAnAddress(f"{host!r} is not a valid IPv4 address")
    value = last
    for index, number in enumerate(head):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def _number(label: str) -> int | None:
    if label[:2].lower() == "0x":
        digits, base = label[2:], 16
        if digits == "":
            return 0
    elif len(label) > 1 and label.startswith("0"):
        digits, base = label[1:], 8
    else:
        digits, base = label, 10
    if not digits or not all(c in "0123456789abcdef"[:base] for c in digits.lower()):
        return None
    return int(digits, base)


# What NFKC leaves alone but UTS 46 (and so the URL standard) maps to a full stop.
_FULL_STOPS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})


def mapped_host(host: str) -> str:
    """`host` as the URL standard maps it before it decides whether it is an address
    (UTS 46, non-transitional, no STD3 rules): `127。0。0。5` and `１２７.０.０.５` are
    127.0.0.5 to aiohttp (yarl) and Chromium alike. A host UTS 46 refuses is mapped as
    Python's IDNA 2003 codec would (NFKC), which is yarl's own fallback."""
    if host.isascii():
        return host.lower()
    try:
        return idna.uts46_remap(host, std3_rules=False, transitional=False).lower()
    except idna.IDNAError:
        return unicodedata.normalize("NFKC", host).translate(_FULL_STOPS).casefold()


def literal_address(host: str) -> IPAddress | None:
    """The address a URL's host names without any resolution (an IPv6 literal, with or
    without brackets, or IPv4 in any spelling, mapped by `mapped_host`), or None for a
    name. NotAnAddress for a host that looks like an address and is not one."""
    host = mapped_host(host).strip("[]")
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            raise NotAnAddress(f"{host!r} is not a valid IPv6 address") from None
    return parse_ipv4(host) if host else None


# --- address classes ----------------------------------------------------------------------


def address_problem(ip: IPAddress) -> str | None:
    """Why `ip` is not a globally routable unicast address, or None if it is one."""
    if isinstance(ip, ipaddress.IPv6Address):
        return _ipv6_problem(ip)
    for network, reason in BLOCKED_IPV4:
        if ip in network:
            return reason
    return None if ip.is_global else "not a globally routable address"


def _ipv6_problem(ip: ipaddress.IPv6Address) -> str | None:
    if ip.scope_id:
        return "a scoped (link-local) address"
    embedded = embedded_ipv4(ip)
    if embedded is not None:
        # Traffic to these ends at the embedded IPv4 address, so that is what is judged.
        problem = address_problem(embedded)
        return f"an address that embeds {embedded}, {problem}" if problem else None
    for network, reason in BLOCKED_IPV6:
        if ip in network:
            return reason
    if ip not in GLOBAL_UNICAST_V6:
        return "a reserved address (outside 2000::/3)"
    return None if ip.is_global else "not a globally routable address"


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv4-mapped, NAT64 (64:ff9b::/96) or 6to4 address stands for."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in NAT64_WELL_KNOWN:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.sixtofour


def reached(ip: IPAddress) -> IPAddress:
    """The address traffic to `ip` really ends at: the embedded IPv4 one, if any, and
    without an IPv6 scope (fe80::1%eth0 is fe80::1 on that link)."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = embedded_ipv4(ip)
        if embedded is not None:
            return embedded
        if ip.scope_id:
            return ipaddress.IPv6Address(str(ip).split("%", 1)[0])
    return ip


# --- allow-lists --------------------------------------------------------------------------


def parse_networks(entries: Iterable[str]) -> tuple[IPNetwork, ...]:
    """CIDRs (`10.0.0.0/8`, `fd00::/8`, or a single address) as networks; ValueError says
    which entry is wrong and why."""
    networks = []
    for entry in entries:
        text = str(entry).strip()
        if not text:
            continue
        try:
            networks.append(ipaddress.ip_network(text, strict=True))
        except ValueError as exc:
            hint = ""
            if "has host bits set" in str(exc):
                loose = ipaddress.ip_network(text, strict=False)
                hint = f"; did you mean {loose}?"
            raise ValueError(f"{text!r} is not a network in CIDR form (e.g. 10.0.0.0/8){hint}"
                             ) from None
    return tuple(dict.fromkeys(networks))


def split_networks(value: str | Iterable[str]) -> list[str]:
    """A comma-separated string (the environment variable's form) or a list, as entries."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return [str(part).strip() for part in value if str(part).strip()]


# --- this host ----------------------------------------------------------------------------


def own_addresses(proc_net: Path = Path("/proc/net")) -> frozenset[IPAddress]:
    """This host's (or network namespace's) interface addresses, read from /proc.

    A crawler sharing the host's network reaches every service bound to 0.0.0.0 through
    the host's public address too, which no address class catches. Linux only; where
    /proc does not say, the set is empty and the address classes still apply.
    """
    addresses: set[IPAddress] = set()
    try:
        addresses |= _local_ipv4(proc_net / "fib_trie")
    except OSError as exc:
        logger.warning("cannot read this host's IPv4 addresses (%s)", exc)
    try:
        addresses |= _local_ipv6(proc_net / "if_inet6")
    except FileNotFoundError:
        pass  # IPv6 is off: no address of that family to protect
    except OSError as exc:
        logger.warning("cannot read this host's IPv6 addresses (%s)", exc)
    return frozenset(addresses)


def _local_ipv4(path: Path) -> set[IPAddress]:
    """The `/32 host LOCAL` entries of the FIB (what `ip -4 addr` lists)."""
    found: set[IPAddress] = set()
    last = None
    for line in path.read_text().splitlines():
        text = line.strip()
        if text.startswith("|-- "):
            last = text[4:]
        elif text == "/32 host LOCAL" and last is not None:
            found.add(ipaddress.IPv4Address(last))
    return found


def _local_ipv6(path: Path) -> set[IPAddress]:
    found: set[IPAddress] = set()
    for line in path.read_text().splitlines():
        fields = line.split()
        if fields and len(fields[0]) == 32:
            found.add(ipaddress.IPv6Address(int(fields[0], 16)))
    return found


# --- the crawl's policy -------------------------------------------------------------------


class AddressRefused(OSError):
    """The crawl address policy refuses every connection to this address. An OSError so
    that a resolver raising it fails the connection attempt like a DNS error would; the
    message is the reason recorded on the failed page."""


@dataclass(frozen=True)
class AddressPolicy:
    """Deny what `address_problem` finds and this host's own addresses, except in `allow`.

    An allowed network wins over both (an operator who opens 10.0.0.0/8 means it, even if
    this host has an address there): that is how tests and local sites open 127.0.0.0/8.
    """

    allow: tuple[IPNetwork, ...] = ()
    own: frozenset[IPAddress] = field(default_factory=frozenset)

    @classmethod
    def for_this_host(cls, allow: Iterable[IPNetwork] = ()) -> AddressPolicy:
        return cls(tuple(allow), own_addresses())

    def allows(self, ip: IPAddress) -> bool:
        target = reached(ip)
        return any(target.version == net.version and target in net for net in self.allow)

    def problem(self, ip: IPAddress) -> str | None:
        """Why the crawl may not connect to `ip`, or None when it may."""
        if self.allows(ip):
            return None
        problem = address_problem(ip)  # the class says most ("a loopback address")
        if problem is None and reached(ip) in self.own:
            return OWN_ADDRESS
        return problem

    def check(self, host: str, address: str) -> IPAddress:
        """`address` (what `host` resolved to) as an IPAddress, or AddressRefused."""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            raise AddressRefused(refusal(host, None, f"not an address ({address!r})")) from None
        problem = self.problem(ip)
        if problem:
            raise AddressRefused(refusal(host, ip, problem))
        return ip


def refusal(host: str, ip: IPAddress | None, problem: str) -> str:
    """The reason a refused request is recorded with; for an address, how to open it."""
    prefix = "refused by the crawl address policy: "
    if ip is None:
        return f"{prefix}{host} resolves to {problem}"
    if host.strip("[]") == str(ip):
        return f"{prefix}{ip} is {problem}{how_to_open(ip)}"
    return f"{prefix}{host} resolves to {ip}, which is {problem}{how_to_open(ip)}"


def how_to_open(ip: IPAddress) -> str:
    """The setting that opens `ip`'s network: archiver's variable, the crawler's option."""
    target = reached(ip)
    network = f"{target}/{target.max_prefixlen}"
    return f" (open it with {ALLOW_VARIABLE}={network}, the crawler's --allowNetworks)"

"""What the fuzz tests of the CLI and of the admin's forms share: hypothesis's settings,
hostile values, a fingerprint of the database, and a resolver that never reaches DNS."""

from __future__ import annotations

import hashlib
import os
import string

from django.apps import apps
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from crawls import ssrf
from crawls.rules import crawlable

PASSWORD = "pw-7f3a9c"  # put in hostile URLs; must never appear in any output
# Deterministic by default, so a CI run cannot fail at random; ARCHIVER_FUZZ_EXAMPLES=2000
# ARCHIVER_FUZZ_RANDOM=1 explores further (the whole file stays under a minute at 40).
FUZZ = settings(
    max_examples=int(os.environ.get("ARCHIVER_FUZZ_EXAMPLES", "40")), deadline=None, database=None,
    derandomize=os.environ.get("ARCHIVER_FUZZ_RANDOM") != "1",
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def fingerprint() -> tuple[dict[str, int], str]:
    """Row counts and a hash of every row of the crawls and auth tables."""
    digest = hashlib.sha256()
    counts = {}
    for model in [*apps.get_app_config("crawls").get_models(), *apps.get_app_config("auth").get_models()]:
        rows = list(model.objects.order_by("pk").values_list())
        counts[model.__name__] = len(rows)
        digest.update(repr(rows).encode())
    return counts, digest.hexdigest()


def refuse_to_resolve(host: str, port: int) -> list[str]:
    raise ssrf.ResolutionFailed(f"cannot resolve {ssrf.where(host, port)}: the fuzz test has no DNS")


# --- hostile values ---------------------------------------------------------------------------

CONTROL = st.sampled_from(["\r\n", "\n", "\r", "\x00", "\x1b[31m", "\t", "\x7f", "\u2028", "\x85"])
JUNK_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(min_size=2000, max_size=3000, alphabet=string.printable),
    st.builds(lambda a, c, b: a + c + b, st.text(max_size=10), CONTROL, st.text(max_size=10)),
    st.sampled_from(["", " ", "null", "[1, null]", '{"a": 1}', "'; DROP TABLE crawls_crawl; --", "é" * 300]),
)
BAD_HOSTS = st.one_of(
    st.sampled_from([
        ".com", "a..b", ".", "..", "999.1.1.1", "1.2.3", "0x7f.1", "2130706433", "256.0.0.1",
        "1.2.3.4.5", "01.2.3.4", "ex<script>.com", "a b.com", "a%41.com", "[::1", "[zz::1]",
        "a" * 64 + ".com", ("a" * 60 + ".") * 5 + "com", "exa\x00mple.com", "xn--.com", "-" * 64,
    ]),
    st.text(min_size=1, max_size=30).map(lambda t: t + ".."),
)
BAD_URLS = st.one_of(
    st.builds(lambda host: f"http://{host}/", BAD_HOSTS),
    st.builds(lambda user, host: f"https://{user}:{PASSWORD}@{host}/",
              st.text(alphabet=string.ascii_letters, max_size=8), st.sampled_from(["example.com", "a..b", "1.2.3"])),
    st.builds(lambda port: f"https://example.com:{port}/",
              st.sampled_from(["0", "65536", "99999999999999999999", "-1", "abc", ""]).filter(bool)),
    st.builds(lambda scheme: f"{scheme}example.com/", st.sampled_from(["ftp://", "file://", "javascript:", "data:", "//", "htp://"])),
    st.builds(lambda c: f"https://exa{c}mple.com/", CONTROL),
    st.just("https://example.com/" + "a" * 3000),
    st.just(""),
    JUNK_TEXT.filter(lambda text: not crawlable(text) and not text.startswith("-")),
)

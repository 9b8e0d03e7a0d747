"""Every CLI command, fed generated hostile values, refuses them the same way.

The property, for each generated command line: exit status 1 (a refusal) or 2 (a command
line that cannot be parsed), nothing on stdout, exactly one readable line on stderr, no
traceback, no secret echoed, and the database unchanged (row counts and a hash of every
row of every table).

Commands run in-process through ManagementUtility, the same path as `archiver ...` at a
shell, so SystemExit carries the real exit status. `--skip-checks` keeps the start-up
system checks (tested in test_private_dir.py), whose warnings depend on the machine's
data dir, out of stderr. Host names never reach DNS: the webhook resolver is replaced.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management import ManagementUtility
from django.db import connections
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from crawls import ssrf
from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlStatus, Org, Schedule, Snapshot, Webhook, WebhookDelivery
from crawls.validation import check_cron_text, check_slug
from tests.fuzzing import (
    BAD_URLS,
    CONTROL,
    FUZZ,
    JUNK_TEXT,
    PASSWORD,
    fingerprint,
    refuse_to_resolve,
)

S = CrawlStatus


# --- running a command as a shell would ---------------------------------------------------


def run_cli(*args: str) -> tuple[int, str, str]:
    """`archiver <args>` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    command, *rest = args
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            ManagementUtility(["archiver", command, "--skip-checks", *rest]).execute()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def assert_refused(world, *args: str) -> None:
    code, out, err = run_cli(*args)
    shown = f"archiver {' '.join(map(repr, args))[:300]} -> {code}: {err[:500]!r}"
    assert code in (1, 2), shown
    assert out == "", shown
    assert len(err.splitlines()) == 1 and err.endswith("\n"), shown
    assert "Traceback" not in err and len(err) < 1000, shown
    assert PASSWORD not in err, shown
    assert fingerprint() == world["fingerprint"], shown


# --- a database with something of everything ---------------------------------------------


@pytest.fixture
def world(db, monkeypatch):
    # run_from_argv closes every connection when a command ends; the test's transaction
    # must survive it, so closing is a no-op here.
    monkeypatch.setattr(connections, "close_all", lambda: None)
    monkeypatch.setattr(ssrf, "system_resolver", refuse_to_resolve)
    monkeypatch.setattr("crawls.wake.nudge", lambda: False)
    org = Org.objects.get(slug="default")
    Org.objects.create(slug="acme", name="Acme", max_concurrent_crawls=2)
    Webhook.objects.create(url="https://hooks.example.com/in", secret="s3cret", events=[])
    crawls = {status: make_crawl(org, status) for status in (S.QUEUED, S.RUNNING, S.PAUSED, S.COMPLETE, S.FAILED)}
    Snapshot.objects.create(crawl=crawls[S.COMPLETE], url="https://example.com/ok")
    Schedule.objects.create(org=org, cron="0 3 * * *", config=CrawlConfig(seeds=["https://example.com/"]).model_dump(),
                            retry_at=timezone.now())
    get_user_model().objects.create_superuser(username="root", email="", password="x" * 12)
    assert WebhookDelivery.objects.exists()  # every crawl event went to the webhook
    return {"crawls": {s: c.id for s, c in crawls.items()}, "fingerprint": fingerprint(),
            "delivery": WebhookDelivery.objects.first().pk}


def make_crawl(org: Org, status: str) -> Crawl:
    crawl = Crawl.create(org, CrawlConfig(seeds=["https://example.com/"]))
    started = timezone.now() if status in (S.RUNNING, S.PAUSED, S.COMPLETE, S.FAILED) else None
    Crawl.objects.filter(pk=crawl.pk).update(status=status, started_at=started)
    return crawl


# --- hostile values ---------------------------------------------------------------------------


def integers_outside(low: int, high: int):
    return st.one_of(
        st.integers(max_value=low - 1), st.integers(min_value=high + 1),
        st.sampled_from([2**63, 2**64, 10**20, -(2**63) - 1, 10**400]),
    ).map(str)


def not_a_number():
    return st.one_of(JUNK_TEXT, st.sampled_from(["1e3", "0x10", "٣", "²", "1_000", "NaN", "inf", "--1"])).filter(
        lambda text: not text.strip().lstrip("+-").isdigit()
    )


def not_a_quantity():
    """Not a number, as sizes and durations read them: those take an exponent (1e3 is 1000)."""
    return not_a_number().filter(lambda text: not EXPONENT.fullmatch(text.strip()))


EXPONENT = re.compile(r"[+-]?[0-9]+(\.[0-9]+)?[eE][+-]?[0-9]{1,3}\s*[a-zA-Z]{0,3}")  # with a unit


def bad_int(low: int, high: int):
    return st.one_of(integers_outside(low, high), not_a_number())


BAD_REGEXES = st.one_of(
    st.sampled_from(["", "(", "[a-", "*", "a{2,1}", "(?P<x>a)(?P<x>b)", "\\", "a" * 1001]),
    st.builds(lambda c: f"ab{c}cd", CONTROL),
)
BAD_SLUGS = st.one_of(
    st.sampled_from(["", "a b", "a" * 51, "a" * 200, "ü", "a/b", "a.b", "nope-such-org"]),
    JUNK_TEXT.filter(lambda text: text not in ("default", "acme")),
)
HEX = set("0123456789abcdefABCDEF")
BAD_IDS = st.one_of(
    st.text(max_size=40).filter(lambda text: not text.strip() or not set(text.strip()) <= HEX),
    st.text(alphabet="0123456789abcdef", min_size=33, max_size=80),
    st.just("f" * 32),  # well formed, no such crawl
)


def option(name: str, values):
    """`--name=value`, so a value starting with `-` still reaches the command."""
    return values.map(lambda value: [f"{name}={value}"])


# --- the properties -----------------------------------------------------------------------------

ADD_OPTIONS = st.one_of(
    option("--depth", bad_int(-1, 1000)),
    option("--limit", bad_int(1, 100_000_000)),
    option("--workers", bad_int(1, 16)),
    option("--scale", bad_int(1, 8)),
    option("--extra-hops", bad_int(0, 10)),
    option("--size-limit", st.one_of(st.sampled_from(["0", "5000PB", "-1GB", "2PiB", "9" * 40, "1.5.5GB"]), not_a_quantity())),
    option("--time-limit", st.one_of(st.sampled_from(["0", "0.5s", "-5m", "5000d", "1e400", "inf", "nan"]), not_a_quantity())),
    option("--include", BAD_REGEXES),
    option("--exclude", BAD_REGEXES),
    option("--user-agent", st.one_of(st.sampled_from(["", " ", "a" * 513]),
                                     st.builds(lambda c: f"a{c}X-Injected: 1", CONTROL))),
    option("--org", BAD_SLUGS),
    option("--tag", st.sampled_from(["", " ", "t" * 101, "a\nb", "\x00"])),
    option("--scope", JUNK_TEXT.filter(lambda text: text not in ("page", "page-spa", "prefix", "host", "domain", "any", "custom"))),
    st.just(["--no-such-option"]),
)


@FUZZ
@given(url=BAD_URLS)
def test_add_refuses_bad_urls(world, url):
    assert_refused(world, "add", url)


@FUZZ
@given(hostile=ADD_OPTIONS)
def test_add_refuses_bad_options(world, hostile):
    assert_refused(world, "add", "https://example.com/", *hostile)


@FUZZ
@given(args=st.one_of(
    BAD_IDS.map(lambda crawl_id: [crawl_id]),
    option("--limit", bad_int(1, 100_000)),
    option("--state", JUNK_TEXT),
    st.tuples(BAD_IDS, JUNK_TEXT).map(list),
))
def test_status_refuses_bad_ids_and_options(world, args):
    assert_refused(world, "status", *args)


# Each transition, with the states that refuse it.
REFUSING = {
    "pause": [S.PAUSED, S.COMPLETE, S.FAILED],
    "resume": [S.QUEUED, S.RUNNING, S.COMPLETE, S.FAILED],
    "stop": [S.COMPLETE, S.FAILED],
    "cancel": [S.COMPLETE, S.FAILED],
    "retry": [S.QUEUED, S.RUNNING, S.PAUSED, S.COMPLETE],
}


@FUZZ
@given(data=st.data(), command=st.sampled_from(sorted(REFUSING)))
def test_transitions_refuse_bad_ids_and_states(world, data, command):
    args = data.draw(st.one_of(
        BAD_IDS.map(lambda crawl_id: [crawl_id]),
        st.sampled_from(REFUSING[command]).map(lambda status: [world["crawls"][status]]),
        st.just([world["crawls"][S.QUEUED], "--no-such-option"]),
        st.just([]),
    ))
    assert_refused(world, command, *args)


def test_retry_of_failed_pages_where_none_failed_is_refused(world):
    assert_refused(world, "retry", world["crawls"][S.COMPLETE], "--failed-pages")


@FUZZ
@given(data=st.data())
def test_scale_and_exclude_refuse_bad_values(world, data):
    running = world["crawls"][S.RUNNING]
    args = data.draw(st.one_of(
        st.tuples(st.just("scale"), BAD_IDS, st.just("2")),
        st.tuples(st.just("scale"), st.just(running), bad_int(1, 8).filter(lambda v: not v.startswith("-"))),
        st.tuples(st.just("exclude"), BAD_IDS, st.just("x")),
        st.tuples(st.just("exclude"), st.just(running), BAD_REGEXES.filter(lambda v: not v.startswith("-"))),
        st.tuples(st.just("exclude"), st.just(world["crawls"][S.COMPLETE]), st.just("\\.pdf$")),
        st.tuples(st.just("exclude"), st.just(running), st.just("never-added"), st.just("--remove")),
    ))
    assert_refused(world, *args)


@FUZZ
@given(args=st.one_of(
    BAD_SLUGS.filter(lambda slug: not valid_slug(slug) and not slug.startswith("-")).map(lambda slug: ["set", slug]),
    st.sampled_from([("--max-concurrent-crawls", 10_000), ("--exec-minutes", 10**9), ("--max-pages", 10**8)]).flatmap(
        lambda quota: option(quota[0], st.one_of(st.just("0"), bad_int(1, quota[1])))).map(lambda o: ["set", "acme", *o]),
    option("--storage-quota", st.sampled_from(["0", "-5GB", "lots", "2PiB", "9" * 40])).map(lambda o: ["set", "acme", *o]),
    option("--name", st.one_of(st.just("n" * 201), st.builds(lambda c: f"Acme{c}", CONTROL))).map(lambda o: ["set", "acme", *o]),
    st.just(["list", "--no-such-option"]),
    st.just([]),
    JUNK_TEXT.filter(lambda text: text not in ("set", "list") and not text.startswith("-")).map(lambda a: [a]),
))
def test_org_refuses_bad_slugs_names_and_quotas(world, args):
    assert_refused(world, "org", *args)


def valid_slug(text: str) -> bool:
    try:
        check_slug(text)
    except ValueError:
        return False
    return True


VALID_CRON = "0 3 * * *"


@FUZZ
@given(args=st.one_of(
    JUNK_TEXT.filter(lambda cron: not cron.startswith("-") and not valid_cron(cron)).map(
        lambda cron: ["add", cron, "https://example.com/"]),
    BAD_URLS.filter(lambda url: not url.startswith("-")).map(lambda url: ["add", VALID_CRON, url]),
    ADD_OPTIONS.filter(lambda o: not o[0].startswith(("--user-agent", "--extra-hops"))).map(
        lambda o: ["add", VALID_CRON, "https://example.com/", *o]),
    st.tuples(st.sampled_from(["enable", "disable"]), st.one_of(
        bad_int(1, 2**63 - 1).filter(lambda v: not v.startswith("-")), st.just("999999"))).map(list),
    st.just(["list", "--no-such-option"]),
))
def test_schedule_refuses_bad_cron_urls_options_and_ids(world, args):
    assert_refused(world, "schedule", *args)


def valid_cron(text: str) -> bool:
    try:
        check_cron_text(text)
    except ValueError:
        return False
    return True


BAD_SECRETS = st.one_of(st.sampled_from(["", " ", " padded ", "s" * 501]), st.builds(lambda c: f"se{c}cret", CONTROL))
SECRET_FILE = "{secret-file}"  # replaced by a file holding the example's secret (see with_secret_file)
GOOD_HOOK = ["https://hooks.example.com/in", f"--secret-file={SECRET_FILE}"]


def with_secret_file(args, folder: Path, secret: str = "s3cret") -> list[str]:
    """ARGS with SECRET_FILE naming a file that holds `secret` (secrets never come in argv)."""
    path = folder / "secret"
    path.write_text(secret)
    return [arg.replace(SECRET_FILE, str(path)) for arg in args]


@FUZZ
@given(args=st.one_of(
    BAD_URLS.filter(lambda url: not url.startswith("-")).map(lambda url: ["add", url, f"--secret-file={SECRET_FILE}"]),
    st.sampled_from(["http://hooks.example.com/", "https://127.0.0.1/", "https://[::1]/", "https://10.0.0.1/",
                     "https://169.254.169.254/latest", "https://unresolvable.example/"]).map(
        lambda url: ["add", url, f"--secret-file={SECRET_FILE}"]),
    st.just(["add", "https://hooks.example.com/in", "--secret=s3cret"]),  # never from argv
    st.just(["add", "https://hooks.example.com/in", f"--secret-file={SECRET_FILE}.missing"]),
    option("--events", JUNK_TEXT.filter(lambda t: t.strip(", ") != "")).map(lambda o: ["add", *GOOD_HOOK, *o]),
    option("--org", BAD_SLUGS).map(lambda o: ["add", *GOOD_HOOK, *o]),
    st.tuples(st.sampled_from(["remove", "replay"]), bad_int(1, 2**63 - 1).filter(lambda v: not v.startswith("-"))).map(list),
    st.just(["remove", "999999"]),
    option("--limit", bad_int(1, 100_000)).map(lambda o: ["deliveries", *o]),
    option("--webhook", bad_int(1, 2**63 - 1)).map(lambda o: ["deliveries", *o]),
    st.just(["add", "https://hooks.example.com/in"]),  # no secret
    st.just(["list", "--no-such-option"]),
))
def test_webhook_refuses_bad_urls_secrets_events_and_ids(world, tmp_path, args):
    assert_refused(world, "webhook", *with_secret_file(args, tmp_path))


@FUZZ
@given(secret=BAD_SECRETS)
def test_webhook_refuses_bad_secrets_from_a_file(world, tmp_path, secret):
    assert_refused(world, "webhook", *with_secret_file(["add", *GOOD_HOOK], tmp_path, secret))


def test_replaying_a_delivery_that_did_not_fail_is_refused(world):
    assert_refused(world, "webhook", "replay", str(world["delivery"]))


@FUZZ
@given(username=st.one_of(st.sampled_from(["", " ", "a b", "u" * 151, "root!", "é\x00"]),
                          st.builds(lambda c: f"ad{c}min", CONTROL)))
def test_ensureadmin_refuses_bad_user_names(world, username):
    assert_refused(world, "ensureadmin", f"--username={username}")


@FUZZ
@given(label=JUNK_TEXT.filter(lambda text: not text.startswith("-") and not installed_label(text)))
def test_migrate_refuses_unknown_apps(world, label):
    assert_refused(world, "migrate", label)


def installed_label(text: str) -> bool:
    return any(config.label == text for config in apps.get_app_configs())

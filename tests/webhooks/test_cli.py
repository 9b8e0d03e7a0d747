"""`archiver webhook ...`: bad input is one clear line and nothing written; secrets never shown."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from django.core.management import CommandError, call_command

from crawls.models import DeliveryStatus, Webhook, WebhookDelivery
from tests.webhooks.receivers import SECRET, T0, Reply

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def webhook(*args) -> str:
    """`archiver webhook ARGS`; a `--secret S` among ARGS is sent as the command reads a
    secret: `--secret-file -` with S on stdin."""
    args, secret = list(args), None
    if "--secret" in args:
        at = args.index("--secret")
        secret = args[at + 1]
        args[at:at + 2] = ["--secret-file", "-"]
    out = io.StringIO()
    with mock.patch("sys.stdin", io.StringIO(secret or "")):
        call_command("webhook", *args, stdout=out)
    return out.getvalue()


def test_adding_a_local_receiver_that_is_allowed_writes_one_webhook(allowed, org):
    out = webhook("add", allowed.url("/in?token=abc"), "--secret", SECRET,
                  "--events", "crawl.completed, crawl.failed", "--org", "acme")
    hook = Webhook.objects.get()
    assert out.strip() == f"added webhook {hook.pk} → {allowed.where}"
    assert (hook.secret, hook.events, hook.org) == (SECRET, ["crawl.completed", "crawl.failed"], org)


def test_add_prints_json_without_the_secret_or_the_query(allowed):
    summary = json.loads(webhook("add", allowed.url("/in?token=abc"), "--secret", SECRET, "--json"))
    assert summary["url"] == f"http://{allowed.where}/in?…"
    assert summary["events"] == [] and summary["org"] is None
    assert SECRET not in json.dumps(summary)


@pytest.mark.parametrize(("args", "message"), [
    (["not a url", "--secret", "x"], "spaces"),
    (["ftp://hooks.example.com/", "--secret", "x"], "must start with https://"),
    (["https://hooks.example.com/", "--secret", ""], "secret is empty"),
    (["https://hooks.example.com/", "--secret", "   "], "secret is empty"),
    (["https://hooks.example.com/", "--secret", "x", "--events", "crawl.exploded"],
     "unknown event 'crawl.exploded'"),
    (["https://hooks.example.com/", "--secret", "x", "--org", "nope"], "no org 'nope'"),
    (["http://127.0.0.1:8765/hook", "--secret", "x"], "ARCHIVER_WEBHOOK_ALLOW_HOSTS"),
    (["https://169.254.169.254/latest", "--secret", "x"], "link-local"),
    (["https://0x7f.1/", "--secret", "x"], "loopback"),
    (["https://user:pw@hooks.example.com/", "--secret", "x"], "credentials"),
])
def test_bad_input_is_refused_and_nothing_is_written(args, message):
    with pytest.raises(CommandError, match=message):
        webhook("add", *args)
    assert Webhook.objects.count() == 0


def test_a_secret_on_the_command_line_is_refused_with_the_way_to_give_it(allowed):
    with pytest.raises(CommandError, match=r"every local user sees it \(ps\); give it with --secret-file PATH"):
        call_command("webhook", "add", allowed.url(), "--secret", SECRET)
    assert not Webhook.objects.exists()


def test_the_secret_is_read_from_a_file_without_its_trailing_newline(allowed, tmp_path):
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    call_command("webhook", "add", allowed.url(), "--secret-file", str(path), stdout=io.StringIO())
    assert Webhook.objects.get().secret == SECRET


@pytest.mark.parametrize(("source", "message"), [
    ("missing", "No such file or directory"), ("folder", "not a regular file"), ("binary", "not UTF-8"),
])
def test_a_secret_file_that_cannot_be_read_is_one_line(allowed, tmp_path, source, message):
    (tmp_path / "folder").mkdir()
    (tmp_path / "binary").write_bytes(b"\xff\xfe")
    with pytest.raises(CommandError, match=message):
        call_command("webhook", "add", allowed.url(), "--secret-file", str(tmp_path / source))
    assert not Webhook.objects.exists()


def test_without_a_secret_file_or_a_terminal_add_says_how_to_give_it(allowed):
    with mock.patch("sys.stdin", io.StringIO("")), pytest.raises(CommandError, match="--secret-file PATH"):
        call_command("webhook", "add", allowed.url())
    assert not Webhook.objects.exists()


def test_on_a_terminal_add_asks_for_the_secret_without_echo(allowed, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    asked = []
    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr("getpass.getpass", lambda prompt: asked.append(prompt) or SECRET)
    call_command("webhook", "add", allowed.url(), stdout=io.StringIO())
    assert asked == ["webhook secret: "] and Webhook.objects.get().secret == SECRET


def test_a_name_that_resolves_privately_is_refused_at_add(monkeypatch):
    from crawls import ssrf

    monkeypatch.setattr(ssrf, "system_resolver", lambda host, port: ["10.1.1.1"])
    with pytest.raises(CommandError, match="resolves to 10.1.1.1, which is a private address"):
        webhook("add", "https://intranet.example.com/hook", "--secret", "x")
    assert Webhook.objects.count() == 0


def test_list_never_shows_a_secret(allowed, make_hook):
    make_hook(allowed.url("/in?token=abc"), events=["crawl.failed"])
    table = webhook("list")
    listed = json.loads(webhook("list", "--json"))
    assert SECRET not in table and SECRET not in json.dumps(listed)
    assert "token" not in table and "crawl.failed" in table
    assert listed[0]["deliveries"]["total"] == 0


def test_remove_deletes_the_webhook_and_an_unknown_id_is_an_error(make_hook):
    hook = make_hook("https://hooks.example.com/x")
    assert webhook("remove", str(hook.pk)).strip() == f"removed webhook {hook.pk}"
    with pytest.raises(CommandError, match=f"no webhook {hook.pk}"):
        webhook("remove", str(hook.pk))


def test_deliveries_lists_failed_ones_and_replay_makes_them_pending(allowed, make_hook, make_crawl):
    from tests.webhooks.delivering import drain

    make_hook(allowed.url())
    make_crawl()
    make_crawl()
    allowed.then(Reply(200), Reply(404))
    drain(T0)

    listed = json.loads(webhook("deliveries", "--json"))
    assert listed["counts"] == {"pending": 0, "delivering": 0, "succeeded": 1, "failed": 1, "total": 2}
    (failed,) = json.loads(webhook("deliveries", "--failed", "--json"))["deliveries"]
    assert failed["last_status_code"] == 404
    assert "2 deliveries: 0 pending, 0 delivering, 1 succeeded, 1 failed" in webhook("deliveries")

    assert webhook("replay", str(failed["id"])).strip() == f"delivery {failed['id']} is pending again"
    replayed = WebhookDelivery.objects.get(pk=failed["id"])
    assert (replayed.status, replayed.attempts) == (DeliveryStatus.PENDING, 0)
    with pytest.raises(CommandError, match="not failed"):
        webhook("replay", str(failed["id"]))
    with pytest.raises(CommandError, match="no delivery 9999"):
        webhook("replay", "9999")


def ping(*args) -> str:
    out = io.StringIO()
    call_command("pingwebhook", *args, stdout=out)
    return out.getvalue()


def test_pingwebhook_sends_a_signed_ping(allowed, make_hook):
    hook = make_hook(allowed.url())
    assert ping(str(hook.pk)).strip() == f"ping to webhook {hook.pk}: HTTP 200"
    (request,) = allowed.received
    assert request.signed and request.payload["event"] == "ping"
    allowed.then(Reply(401))
    with pytest.raises(CommandError, match=f"HTTP 401 from {allowed.where}"):
        ping(str(hook.pk))


def test_from_the_shell_a_refusal_is_one_line_on_stderr_and_a_non_zero_exit(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "ARCHIVER_DATA_DIR": str(tmp_path),
           "DJANGO_SETTINGS_MODULE": "archiver.settings"}
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    result = subprocess.run([*manage, "webhook", "add", "http://10.0.0.1/x", "--secret-file", "-"],
                            cwd=ROOT, env=env, capture_output=True, text=True, input="s\n")
    assert result.returncode != 0
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert "10.0.0.1:80 is a private address" in line
    listed = subprocess.run([*manage, "webhook", "list", "--json"], cwd=ROOT, env=env,
                            capture_output=True, text=True, check=True)
    assert json.loads(listed.stdout) == []

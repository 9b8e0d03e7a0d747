"""SSRF rules: which URLs and addresses may receive webhooks, and the pinned connection.

No test here sends anything to a non-loopback address: names resolve through a
dict-backed resolver, public destinations go to a transport that only records, and
the real connections go to servers on 127.0.0.1 reached under made-up names.
"""

from __future__ import annotations

import datetime as dt
import http.server
import ipaddress
import ssl
import subprocess
import threading

import pytest

from archiver import conf
from archiver.errors import ConfigError, WebhookRefused
from crawls import ssrf
from crawls.models import DeliveryStatus, WebhookDelivery
from runner.webhooks import Deliverer, deliver_due_webhooks
from tests.webhooks.receivers import T0, RecordingTransport, Resolver, allow

PUBLIC_V4 = "93.184.215.14"
PUBLIC_V6 = "2606:2800:21f:cb07:6820:80da:af6b:8b2c"


def settings(**changes) -> conf.Settings:
    return conf.get().model_copy(update={"webhook_allow_hosts": (), "webhook_allow_domains": (),
                                         **changes})


def refused(url: str, resolver=None, **changes) -> str:
    with pytest.raises(WebhookRefused) as info:
        ssrf.check_url(url, settings(**changes), resolver or Resolver({}))
    return str(info.value)


BLOCKED_V4 = [
    ("0.0.0.0", "unspecified"), ("0.1.2.3", "unspecified"), ("10.1.2.3", "private"),
    ("100.64.0.1", "shared"), ("100.127.255.254", "shared"), ("127.0.0.1", "loopback"),
    ("127.255.0.9", "loopback"), ("169.254.169.254", "link-local"), ("172.16.0.1", "private"),
    ("172.31.255.255", "private"), ("192.0.0.9", "IETF"), ("192.0.2.10", "documentation"),
    ("192.88.99.1", "6to4 relay"), ("192.168.1.1", "private"), ("198.18.0.1", "benchmarking"),
    ("198.19.255.1", "benchmarking"), ("198.51.100.7", "documentation"),
    ("203.0.113.9", "documentation"), ("224.0.0.251", "multicast"), ("239.255.255.250", "multicast"),
    ("240.0.0.1", "reserved"), ("255.255.255.255", "broadcast"),
]
BLOCKED_V6 = [
    ("::", "unspecified"), ("::1", "loopback"), ("::7f00:1", "IPv4-compatible"),
    ("::ffff:127.0.0.1", "embeds 127.0.0.1, a loopback"), ("::ffff:10.0.0.1", "embeds 10.0.0.1"),
    ("::ffff:169.254.169.254", "embeds 169.254.169.254, a link-local"),
    ("64:ff9b::a00:1", "embeds 10.0.0.1, a private"), ("64:ff9b::7f00:1", "embeds 127.0.0.1"),
    ("64:ff9b:1::1", "local-use NAT64"), ("2002:a00:1::1", "embeds 10.0.0.1"),
    ("2002:7f00:1::", "embeds 127.0.0.1"), ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
    ("2001:2::1", "benchmarking"), ("2001:db8::1", "documentation"), ("3fff::1", "documentation"),
    ("100::1", "discard"), ("fc00::1", "unique-local"), ("fd12:3456::1", "unique-local"),
    ("fe80::1", "link-local"), ("fec0::1", "site-local"), ("ff02::1", "multicast"),
    ("4000::1", "reserved"), ("5f00::1", "segment-routing"),
]


@pytest.mark.parametrize(("address", "reason"), BLOCKED_V4 + BLOCKED_V6)
def test_every_non_global_address_class_is_refused_as_a_literal(address, reason):
    host = f"[{address}]" if ":" in address else address
    assert reason in refused(f"https://{host}/hook")


@pytest.mark.parametrize(("address", "reason"), BLOCKED_V4 + BLOCKED_V6)
def test_every_non_global_address_class_is_refused_when_a_name_resolves_to_it(address, reason):
    message = refused("https://hooks.example.com/hook", Resolver({"hooks.example.com": [address]}))
    assert f"hooks.example.com:443 resolves to {ipaddress.ip_address(address)}" in message
    assert reason in message


@pytest.mark.parametrize("url", [
    "http://2130706433/", "https://2130706433/", "https://0x7f.1/", "https://017700000001/",
    "https://0x7f000001/", "https://127.1/", "https://0177.0.0.1/", "https://0x7F.0.0.0x1/",
    "https://127.0.0.1./", "https://[::ffff:7f00:1]/",
])
def test_numeric_spellings_of_loopback_are_read_as_loopback(url):
    message = refused(url)
    assert "127.0.0.1" in message and "loopback" in message


@pytest.mark.parametrize(("url", "address"), [
    ("https://167772161/", "10.0.0.1"), ("https://0xa9.0xfe.0xa9.0xfe/", "169.254.169.254"),
    ("https://0300.0250.1.1/", "192.168.1.1"), ("https://0/", "0.0.0.0"),
])
def test_numeric_spellings_of_other_blocked_addresses_are_read_as_such(url, address):
    assert address in refused(url)


@pytest.mark.parametrize("url", [
    "https://1.2.3.256/", "https://1.2.3.08/", "https://1.2.3.4.5/", "https://0x100.1.1.1/",
    "https://4294967296/", "https://example.123/",
])
def test_a_host_that_ends_in_a_number_but_is_no_valid_address_is_refused(url):
    assert "not a valid IPv4 address" in refused(url)


def test_a_name_resolving_to_a_public_and_a_private_address_is_refused():
    resolver = Resolver({"mixed.example.com": [PUBLIC_V4, "10.0.0.5"]})
    message = refused("https://mixed.example.com/", resolver)
    assert "resolves to 10.0.0.5" in message and "private" in message


def test_a_name_resolving_only_to_public_addresses_is_pinned_to_them():
    resolver = Resolver({"hooks.example.com": [PUBLIC_V4, PUBLIC_V6]})
    destination = ssrf.check_url("https://hooks.example.com/a/b?c=d", settings(), resolver)
    assert destination.addresses == (PUBLIC_V4, PUBLIC_V6)
    assert destination.url.target == "/a/b?c=d"
    assert destination.where == "hooks.example.com:443"
    assert resolver.asked == ["hooks.example.com"]


@pytest.mark.parametrize("address", ["::ffff:93.184.215.14", "64:ff9b::5db8:d70e", PUBLIC_V6, "8.8.8.8"])
def test_global_addresses_are_allowed_including_ipv4_embedded_in_ipv6(address):
    host = f"[{address}]" if ":" in address else address
    destination = ssrf.check_url(f"https://{host}/", settings(), Resolver({}))
    assert destination.addresses == (str(ipaddress.ip_address(address)),)


def test_plain_http_is_refused_without_the_allow_setting():
    message = refused("http://hooks.example.com/x", Resolver({"hooks.example.com": [PUBLIC_V4]}))
    assert "only https://" in message and "ARCHIVER_WEBHOOK_ALLOW_HOSTS" in message


def test_a_local_receiver_is_refused_with_a_hint_to_the_allow_setting():
    message = refused("http://127.0.0.1:8765/hook?token=x")
    assert "ARCHIVER_WEBHOOK_ALLOW_HOSTS" in message and "127.0.0.1:8765" in message
    assert "token" not in message and "/hook" not in message


def test_the_allow_setting_admits_exactly_its_host_and_port_over_http():
    allowed = settings(webhook_allow_hosts=("127.0.0.1:8765", "receiver.test:9000"))
    resolver = Resolver({"receiver.test": ["127.0.0.1"]})
    assert ssrf.check_url("http://127.0.0.1:8765/x", allowed, resolver).allowed_host
    assert ssrf.check_url("http://receiver.test:9000/", allowed, resolver).addresses == ("127.0.0.1",)
    with pytest.raises(WebhookRefused):
        ssrf.check_url("http://127.0.0.1:8766/x", allowed, resolver)
    with pytest.raises(WebhookRefused):
        ssrf.check_url("http://2130706433:8765/x", settings(), resolver)
    assert ssrf.check_url("http://2130706433:8765/x", allowed, resolver).allowed_host


@pytest.mark.parametrize("entry", ["127.0.0.1", "localhost:http", ":8080", "bad host:1", "h:0"])
def test_a_malformed_allow_entry_is_a_configuration_error(entry):
    with pytest.raises(ConfigError, match="ARCHIVER_WEBHOOK_ALLOW_HOSTS"):
        ssrf.check_url("https://hooks.example.com/", settings(webhook_allow_hosts=(entry,)),
                       Resolver({"hooks.example.com": [PUBLIC_V4]}))


def test_the_domain_allow_list_admits_its_domains_and_their_subdomains_only():
    domains = settings(webhook_allow_domains=("example.com",))
    resolver = Resolver({"example.com": [PUBLIC_V4], "hooks.example.com": [PUBLIC_V4],
                         "evilexample.com": [PUBLIC_V4]})
    assert ssrf.check_url("https://example.com/", domains, resolver)
    assert ssrf.check_url("https://Hooks.Example.com./", domains, resolver)
    for url in ("https://evilexample.com/", f"https://{PUBLIC_V4}/"):
        with pytest.raises(WebhookRefused, match="ARCHIVER_WEBHOOK_ALLOW_DOMAINS"):
            ssrf.check_url(url, domains, resolver)
    assert resolver.asked == ["example.com", "hooks.example.com"]


@pytest.mark.parametrize(("url", "problem"), [
    ("https://user:pa55word@hooks.example.com/", "credentials"),
    ("https://token@hooks.example.com/", "credentials"),
    ("ftp://hooks.example.com/", "must start with https://"),
    ("file:///etc/passwd", "must start with https://"),
    ("hooks.example.com/x", "must start with https://"),
    ("https:///x", "no host"),
    ("https://hooks.example.com:99999/", "not a valid URL"),
    ("https://hooks.example.com:0/", "port 0"),
    ("https://hooks..example.com/", "not a valid domain"),
    ("https://hooks example.com/", "spaces"),
    ("https://[fe80::1%25eth0]/", "scoped"),
    ("https://[2001:db8::zz]/", "not a valid"),
    ("", "empty"),
])
def test_malformed_urls_are_refused_before_any_resolution(url, problem):
    resolver = Resolver({})
    message = refused(url, resolver)
    assert problem in message
    assert "pa55word" not in message
    assert resolver.asked == []


def test_a_name_that_does_not_resolve_is_a_temporary_failure_not_a_refusal():
    with pytest.raises(ssrf.ResolutionFailed, match="nowhere.example.com:443"):
        ssrf.check_url("https://nowhere.example.com/", settings(), Resolver({}))


# --- at delivery ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_at_delivery_a_name_that_now_resolves_privately_is_refused_before_connecting(make_hook, make_crawl):
    make_hook("https://rebind.example.com/hook")
    make_crawl()
    transport = RecordingTransport()
    deliverer = Deliverer(transport=transport, resolver=Resolver({"rebind.example.com": [PUBLIC_V4, "127.0.0.1"]}))
    deliver_due_webhooks("test-runner", T0, deliverer)

    (delivery,) = WebhookDelivery.objects.all()
    assert delivery.status == DeliveryStatus.FAILED
    assert "resolves to 127.0.0.1" in delivery.last_error
    assert transport.sent == []


@pytest.mark.django_db
def test_each_attempt_resolves_once_and_sends_to_the_addresses_it_checked(make_hook, make_crawl):
    make_hook("https://hooks.example.com/hook")
    make_crawl()
    answers = [[PUBLIC_V4], ["10.0.0.1"]]  # a DNS rebinding: public first, private after

    def resolver(host, port):
        asked.append(host)
        return answers.pop(0)

    asked = []
    transport = RecordingTransport()
    deliver_due_webhooks("test-runner", T0, Deliverer(transport=transport, resolver=resolver))

    ((destination, _, headers),) = transport.sent
    assert destination.addresses == (PUBLIC_V4,)
    assert destination.url.host == "hooks.example.com"
    assert asked == ["hooks.example.com"]


@pytest.mark.django_db
def test_a_public_destination_is_sent_to_its_checked_address_only(make_hook, make_crawl):
    make_hook("https://hooks.example.com/hook")
    make_crawl()
    transport = RecordingTransport()
    deliverer = Deliverer(transport=transport, resolver=Resolver({"hooks.example.com": [PUBLIC_V4]}))
    deliver_due_webhooks("test-runner", T0, deliverer)

    ((destination, _, _),) = transport.sent
    assert destination.addresses == (PUBLIC_V4,)
    assert WebhookDelivery.objects.get().status == DeliveryStatus.SUCCEEDED


# --- the pinned connection, against servers on 127.0.0.1 ----------------------------------


class Seen:
    def __init__(self):
        self.requests: list[dict] = []


def serve(handler_seen: Seen, tls_context: ssl.SSLContext | None = None):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            handler_seen.requests.append({"host": self.headers["Host"], "path": self.path,
                                          "sni": getattr(self.connection, "sni", None)})
            self.send_response(204)
            self.end_headers()

        def log_message(self, format, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls_context is not None:
        def remember_sni(sock, name, context):
            sock.sni = name

        tls_context.sni_callback = remember_sni
        server.socket = tls_context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    return server


@pytest.fixture
def certificate(tmp_path):
    """A self-signed certificate for the made-up name hooks.test."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=hooks.test", "-addext", "subjectAltName=DNS:hooks.test",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return key, cert


@pytest.fixture
def tls_server(certificate):
    key, cert = certificate
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    seen = Seen()
    server = serve(seen, context)
    try:
        yield server.server_address[1], seen, cert
    finally:
        server.shutdown()
        server.server_close()


def client_context(cert) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(cert))
    return context


def test_tls_goes_to_the_pinned_address_with_the_names_sni_host_and_certificate(tls_server):
    port, seen, cert = tls_server
    allowed = settings(webhook_allow_hosts=(f"hooks.test:{port}",))
    destination = ssrf.check_url(f"https://hooks.test:{port}/in?x=1", allowed,
                                 Resolver({"hooks.test": ["127.0.0.1"]}))
    response = ssrf.PinnedTransport(client_context(cert)).post(destination, b"{}", {}, timeout=5)

    assert response.status == 204
    assert seen.requests == [{"host": f"hooks.test:{port}", "path": "/in?x=1", "sni": "hooks.test"}]


def test_tls_to_a_certificate_for_another_name_fails(tls_server):
    port, seen, cert = tls_server
    allowed = settings(webhook_allow_hosts=(f"other.test:{port}",))
    destination = ssrf.check_url(f"https://other.test:{port}/", allowed,
                                 Resolver({"other.test": ["127.0.0.1"]}))
    with pytest.raises(ssl.SSLCertVerificationError):
        ssrf.PinnedTransport(client_context(cert)).post(destination, b"{}", {}, timeout=5)
    assert seen.requests == []


def test_plain_http_goes_to_the_pinned_address_with_the_original_host_header():
    seen = Seen()
    server = serve(seen)
    try:
        port = server.server_address[1]
        allowed = settings(webhook_allow_hosts=(f"receiver.test:{port}",))
        destination = ssrf.check_url(f"http://receiver.test:{port}/hook", allowed,
                                     Resolver({"receiver.test": ["127.0.0.1"]}))
        response = ssrf.PinnedTransport().post(destination, b"{}", {}, timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    assert response.status == 204
    assert seen.requests[0]["host"] == f"receiver.test:{port}"


@pytest.mark.django_db
def test_a_redirect_to_a_private_address_is_never_followed(monkeypatch, make_hook, make_crawl):
    """The receiver answers 302 to a second local server: that server must see nothing."""
    target_seen = Seen()
    target = serve(target_seen)

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(307)
            self.send_header("Location", f"http://127.0.0.1:{target.server_address[1]}/")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format, *args):
            pass

    redirector = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=redirector.serve_forever, args=(0.05,), daemon=True).start()
    try:
        port = redirector.server_address[1]
        allow(monkeypatch, f"127.0.0.1:{port}", f"127.0.0.1:{target.server_address[1]}")
        make_hook(f"http://127.0.0.1:{port}/hook")
        make_crawl()
        deliver_due_webhooks("test-runner", T0 + dt.timedelta(seconds=1))
    finally:
        redirector.shutdown()
        redirector.server_close()
        target.shutdown()
        target.server_close()
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == DeliveryStatus.FAILED
    assert delivery.last_status_code == 307
    assert target_seen.requests == []

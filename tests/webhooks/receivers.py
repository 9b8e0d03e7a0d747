"""A webhook receiver on 127.0.0.1 that verifies every signature, the answers it is told to
give, and stand-ins for the SSRF guard's resolver and the deliverer's transport.

Signatures are checked here with the recipe docs/webhooks.md gives receivers, written
independently of runner.webhooks so a wrong signer cannot pass."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import http.server
import json
import threading
from collections import deque
from dataclasses import dataclass, field

from archiver import conf
from crawls import ssrf

SECRET = "s3cret-for-tests"
T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def verify(secret: str, headers, body: bytes) -> bool:
    """What a receiver does (docs/webhooks.md): recompute, compare in constant time."""
    timestamp = headers["X-Archiver-Timestamp"]
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["X-Archiver-Signature"], f"sha256={expected}")


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False  # hold the request open until the test ends or release()


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    signed: bool

    @property
    def payload(self) -> dict:
        return json.loads(self.body)


class Receiver:
    def __init__(self, secret: str = SECRET):
        self.secret = secret
        self.script: deque[Reply] = deque()
        self.received: list[Received] = []
        self.released = threading.Event()
        self.got_request = threading.Event()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {k: v for k, v in self.headers.items()}
                receiver.received.append(Received(self.path, headers, body,
                                                  verify(receiver.secret, headers, body)))
                receiver.got_request.set()
                reply = receiver.script.popleft() if receiver.script else Reply()
                if reply.hang:
                    receiver.released.wait(30)
                    return
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def where(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, path: str = "/hook?token=abc") -> str:
        return f"http://{self.where}{path}"

    def then(self, *replies: Reply) -> Receiver:
        self.script.extend(replies)
        return self

    def events(self) -> list[str]:
        return [r.payload["event"] for r in self.received]

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


def allow(monkeypatch, *entries: str, domains: tuple[str, ...] = ()) -> conf.Settings:
    """Make archiver.conf.get() return settings that allow these host:port receivers."""
    settings = conf.get().model_copy(update={"webhook_allow_hosts": tuple(entries),
                                             "webhook_allow_domains": domains})
    monkeypatch.setattr(conf, "get", lambda: settings)
    return settings


class Resolver:
    """A DNS that answers from a dict and counts questions; no network at all."""

    def __init__(self, answers: dict[str, list[str]]):
        self.answers = answers
        self.asked: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        if host not in self.answers:
            raise ssrf.ResolutionFailed(f"cannot resolve {ssrf.where(host, port)}")
        return list(self.answers[host])


class RecordingTransport:
    """Records what would be sent and answers `status` without connecting anywhere."""

    def __init__(self, status: int = 200, headers: dict[str, str] | None = None):
        self.status = status
        self.headers = headers or {}
        self.sent: list[tuple[ssrf.Destination, bytes, dict]] = []

    def post(self, destination, body, headers, timeout, deadline=None):
        self.sent.append((destination, body, headers))
        return ssrf.Response(self.status, self.headers)

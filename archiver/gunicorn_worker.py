"""The gunicorn worker scripts/start.sh serves the admin and the API with: gunicorn's threaded
worker, whose answer to a request line or header too long for its limits is JSON in archiver's
error shape (`{"code": ..., "message": ...}`), as the API's own refusals are, not its HTML page.

start.sh raises the limits to gunicorn's largest bounded ones (--limit-request-line 8190,
--limit-request-field_size 16380), so every query within archiver's own limits (a search of
500 characters, escaped) reaches Django and is judged there; only a longer request line, which
no archiver endpoint would accept, is answered here. gunicorn's "0 = unlimited" would read a
request line without bound.
"""

from __future__ import annotations

import json

from gunicorn import util
from gunicorn.http.errors import LimitRequestHeaders, LimitRequestLine
from gunicorn.workers.gthread import ThreadWorker

ANSWERS = {
    LimitRequestLine: (414, "URI Too Long", "request_too_long",
                       "the request line is longer than this server takes ({limit} bytes); a search "
                       "query is at most 500 characters"),
    LimitRequestHeaders: (431, "Request Header Fields Too Large", "headers_too_large",
                          "the request's headers are larger than this server takes"),
}


def json_error(status: int, reason: str, code: str, message: str) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, its body archiver's error JSON."""
    body = json.dumps({"code": code, "message": message}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode("latin-1") + body


class JsonErrorWorker(ThreadWorker):
    """gunicorn's gthread worker (what --threads selects), answering its limits in JSON."""

    def handle_error(self, req, client, addr, exc):
        answer = next((value for kind, value in ANSWERS.items() if isinstance(exc, kind)), None)
        if answer is None:
            return super().handle_error(req, client, addr, exc)
        status, reason, code, message = answer
        self.log.warning("Invalid request from ip=%s: %s", (addr or ("",))[0], exc)
        try:
            util.write_nonblock(client, json_error(status, reason, code,
                                                   message.format(limit=self.cfg.limit_request_line)))
        except OSError:
            self.log.debug("Failed to send error message.")
        return None

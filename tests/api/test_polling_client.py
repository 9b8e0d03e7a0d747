"""The tests' API client against a server that drops a kept-alive connection as a request arrives.

gunicorn closes a connection idle for its keep-alive time (2 s); a poll sent at that moment
finds the connection closed before any answer. The server here does that on purpose, on
127.0.0.1: it answers the first request of each connection and drops the connection when
the second one arrives, either closing it (the client reads "Server disconnected") or
resetting it.
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
from contextlib import contextmanager

import httpx
import pytest

from tests.api.servers import http_client


class DroppingHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.server.connections += 1
        stream = self.request.makefile("rb")
        answered = False
        while request_line := stream.readline():
            method = request_line.split(b" ", 1)[0].decode()
            length = 0
            while (line := stream.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            stream.read(length)
            self.server.received.append(method)
            if answered:
                self.drop()
                return
            self.server.answered.append(method)  # before the client can read the answer
            self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok")
            answered = True

    def drop(self) -> None:
        if self.server.reset:
            self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.request.close()


@contextmanager
def dropping_server(reset: bool):
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), DroppingHandler)
    server.daemon_threads = True
    server.reset, server.connections, server.received, server.answered = reset, 0, [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


@pytest.fixture(params=["closed", "reset"])
def server(request):
    with dropping_server(reset=request.param == "reset") as server:
        yield server


def url_of(server) -> str:
    host, port = server.server_address
    return f"http://{host}:{port}"


def test_a_poll_survives_the_server_dropping_its_kept_alive_connection(server):
    with http_client(url_of(server)) as http:
        answers = [http.get("/api/v1/crawls/x") for _ in range(3)]
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert server.answered == ["GET"] * 3
    assert server.connections == 3  # each dropped poll went out again on a new connection


def test_a_post_without_an_idempotency_key_is_not_sent_twice(server):
    with http_client(url_of(server)) as http:
        assert http.get("/api/v1/crawls").status_code == 200
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            http.post("/api/v1/crawls", json={"seeds": ["http://127.0.0.1:9/"]})
    assert server.received == ["GET", "POST"] and server.connections == 1


def test_a_post_with_an_idempotency_key_is_sent_again(server):
    with http_client(url_of(server)) as http:
        assert http.get("/api/v1/crawls").status_code == 200
        created = http.post("/api/v1/crawls", json={"seeds": ["http://127.0.0.1:9/"]},
                            headers={"Idempotency-Key": "k-1"})
    assert created.status_code == 200
    assert server.received == ["GET", "POST", "POST"] and server.answered == ["GET", "POST"]

"""Unix sockets that stand in for the Docker engine's: one that never answers, one that
forwards to the real engine and can be turned off."""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path


class HungEngine:
    """A Unix socket that accepts every connection and never answers."""

    def __init__(self, path: Path):
        self.path = path
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen(64)
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # closed by close()
            while True:
                self.conns.append(self.server.accept()[0])

    def close(self) -> None:
        self.server.close()
        for conn in self.conns:
            conn.close()
        self.thread.join(timeout=5)


class UnixForwarder:
    """A Unix socket that forwards to the real Docker socket, and that can be turned off."""

    def __init__(self, path: Path, target: str):
        self.path, self.target = path, target
        self.server: socket.socket | None = None
        self.conns: list[socket.socket] = []

    def on(self) -> None:
        self.path.unlink(missing_ok=True)
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(self.path))
        self.server.listen(16)
        threading.Thread(target=self._accept, args=(self.server,), daemon=True).start()

    def off(self) -> None:
        if self.server:
            self.server.close()
            self.server = None
        for conn in self.conns:
            conn.close()
        self.conns.clear()
        self.path.unlink(missing_ok=True)

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.target)
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        # Either side may be closed under us when the forwarder is turned off: that ends the pipe.
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

"""A TCP proxy on 127.0.0.1 that a trial can cut and restore, as a network cut to a server
(the bucket) would: while cut, new connections are refused and those open are closed.

    with CuttableProxy(target_port) as proxy:
        endpoint = proxy.url          # give this to the daemon instead of the server's
        proxy.cut()                   # refused from now on; open connections closed
        proxy.restore()               # the same port accepts again
"""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.ports import free_port

CHUNK = 65536


class CuttableProxy:
    """Forwards every connection on its own port to 127.0.0.1:`target_port`."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = free_port()
        self.cuts = 0
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self.restore()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def is_cut(self) -> bool:
        return self._listener is None

    def __enter__(self) -> CuttableProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def restore(self) -> None:
        if self._listener is not None:
            return
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        self._acceptor = threading.Thread(target=self._accept, args=(listener,),
                                          name="chaos-proxy", daemon=True)
        self._acceptor.start()

    def cut(self) -> None:
        """Stop listening (connections refused) and close every connection open."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        self.cuts += 1
        # shutdown() wakes the thread blocked in accept(); close() alone may not.
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        if self._acceptor is not None:
            self._acceptor.join(timeout=5)
        with self._lock:
            open_now, self._open = self._open, set()
        for sock in open_now:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    client.close()
                    upstream.close()
                    return
                self._open |= {client, upstream}
            pair = [client, upstream]  # both closed by the second pump to end
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink, pair), daemon=True,
                                 name="chaos-proxy-pump").start()

    def _pump(self, source: socket.socket, sink: socket.socket, pair: list) -> None:
        try:
            while data := source.recv(CHUNK):
                sink.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
        with self._lock:
            pair.append(None)
            last = len(pair) == 4
            if last:
                self._open -= {source, sink}
        if last:
            source.close()
            sink.close()

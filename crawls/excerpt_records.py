"""What an excerpt copies of a record (crawls/excerpts.py): the payload, and only the headers
a replay needs to serve it.

A response record carries the HTTP headers its crawl got with the payload: a private crawl's
`Set-Cookie` (a session), or a token a site sends in a header of its own. An excerpt is
served through a public link to people the private crawl was never meant for, so each record
is written again with the WARC fields a replay reads and the HTTP headers that say how to
read the payload (type, encoding, length, dates, validators), nothing else. The payload is
copied as it is, so its digest (the one the revisit names) still holds; the block changed,
so the record has no WARC-Block-Digest. Request records are never copied.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator

HEAD_LIMIT = 64 << 10  # a record's WARC head, or its HTTP head: more is not a record we copy
PIECE = 1 << 20
WARC_FIELDS = ("WARC-Type", "WARC-Record-ID", "WARC-Date", "WARC-Target-URI", "WARC-Payload-Digest",
               "Content-Type")
HTTP_HEADERS = frozenset({
    "content-type", "content-length", "content-encoding", "transfer-encoding", "content-range",
    "content-disposition", "content-language", "date", "last-modified", "etag", "expires",
    "cache-control", "accept-ranges", "vary", "access-control-allow-origin"})
INDEX_FIELDS = ("url", "mime", "status", "digest")  # then where the record is, set by the excerpt


class Unreadable(Exception):
    """Not one whole response record: it is left out of the excerpt."""


class Inflated:
    """The bytes of one gzip member, given as compressed pieces, read back in bounded pieces."""

    def __init__(self, pieces: Iterable[bytes]):
        self.pieces: Iterator[bytes] = iter(pieces)
        self.unzip = zlib.decompressobj(31)
        self.buffer = b""

    def _more(self) -> bool:
        data = self.unzip.unconsumed_tail
        if not data:
            data = next(self.pieces, b"")
            if not data or self.unzip.eof:
                return False
        try:
            self.buffer += self.unzip.decompress(data, PIECE)
        except zlib.error as exc:
            raise Unreadable(f"not gzip: {exc}") from None
        return True

    def head(self) -> bytes:
        """Up to and including the next blank line."""
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            if len(self.buffer) > HEAD_LIMIT or not self._more():
                raise Unreadable("no end of headers")
        head, self.buffer = self.buffer[:end + 4], self.buffer[end + 4:]
        return head

    def read(self, size: int) -> bytes:
        while not self.buffer and size and self._more():
            pass
        piece, self.buffer = self.buffer[:size], self.buffer[size:]
        return piece


def fields(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    pairs = [tuple(part.strip() for part in line.split(":", 1)) for line in lines[1:] if ":" in line]
    return lines[0], pairs


def cleaned(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """The record (one gzip member, in compressed pieces) as a new gzip member with only the
    fields above. Unreadable before anything is yielded when it is not a response record, and
    after when its payload ends short (what was written is then left unindexed)."""
    source = Inflated(pieces)
    version, warc = fields(source.head())
    named = {name.lower(): value for name, value in warc}
    if not version.startswith("WARC/") or named.get("warc-type") != "response":
        raise Unreadable("not a response record")
    http_head = source.head()
    try:
        payload = int(named["content-length"]) - len(http_head)
    except (KeyError, ValueError):
        raise Unreadable("no length") from None
    status, headers = fields(http_head)
    kept = [(k, v) for k, v in headers if k.lower().removeprefix("x-archive-orig-") in HTTP_HEADERS]
    block_head = "\r\n".join([status, *(f"{k}: {v}" for k, v in kept), "", ""]).encode("latin-1")
    warc_head = "".join(f"{name}: {named[name.lower()]}\r\n" for name in WARC_FIELDS if name.lower() in named)
    pack = zlib.compressobj(6, zlib.DEFLATED, 31)
    yield pack.compress(f"{version}\r\n{warc_head}Content-Length: {len(block_head) + max(payload, 0)}"
                        f"\r\n\r\n".encode("latin-1") + block_head)
    left = max(payload, 0)
    while left:
        piece = source.read(min(left, PIECE))
        if not piece:
            raise Unreadable("shorter than its length")
        left -= len(piece)
        yield pack.compress(piece)
    yield pack.compress(b"\r\n\r\n") + pack.flush()


def index_fields(line: dict) -> dict:
    """The index line's fields a replay reads (a crawler may add others, such as a request's
    cookie)."""
    return {name: line[name] for name in INDEX_FIELDS if name in line}

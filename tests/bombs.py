"""Archives that cost far more to read than they weigh, built the way an attacker would."""

from __future__ import annotations

import functools
import struct
import zlib

HEAD = b'{"format":"json-pages-1.0","id":"pages"}\n{"url":"http://site.test/0","loadState":4}\n'


@functools.cache
def newline_wacz(gib: int = 1, head: bytes = HEAD) -> bytes:
    """A WACZ whose deflated pages/pages.jsonl is `head` then `gib` GiB of newlines (~1 MB).

    One 1 MiB block of newlines is deflated once, ended by a full flush (byte-aligned, with no
    reference before it), and repeated: exactly what zlib would write for the whole list."""
    block, count = b"\n" * (1 << 20), gib << 10
    squeeze = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = squeeze.compress(head) + squeeze.flush(zlib.Z_FULL_FLUSH)
    repeat = squeeze.compress(block) + squeeze.flush(zlib.Z_FULL_FLUSH)
    data = first + repeat * count + squeeze.flush()
    crc = zlib.crc32(head)
    for _ in range(count):
        crc = zlib.crc32(block, crc)
    return zip_of("pages/pages.jsonl", data, crc, len(head) + len(block) * count)


def zip_of(name: str, deflated: bytes, crc: int, size: int) -> bytes:
    """A zip of one deflated member (no zip64: `size` under 4 GiB)."""
    raw = name.encode()
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, crc, len(deflated), size,
                        len(raw), 0) + raw
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, crc,
                          len(deflated), size, len(raw), 0, 0, 0, 0, 0, 0) + raw
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central),
                      len(local) + len(deflated), 0)
    return local + deflated + central + end


def counted_page_list_reads(monkeypatch) -> list:
    """Every runner/wacz_members.py PagesCost made from now on, to count what each read of page
    lists cost (decompressed bytes, lines): a bomb's refusal is judged by the work done."""
    from runner import wacz_members

    made = []

    class Counted(wacz_members.PagesCost):
        def __init__(self, limits):
            super().__init__(limits)
            made.append(self)

    monkeypatch.setattr(wacz_members, "PagesCost", Counted)
    return made


def at_most_the_line_limit(costs: list) -> bool:
    """Each read ended at the default line limit (a chunk past it at most): a few MB of a GiB."""
    from runner import archive

    return bool(costs) and all(cost.bytes <= archive.Limits().pages_lines + archive.CHUNK for cost in costs)

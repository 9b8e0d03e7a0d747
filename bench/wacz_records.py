"""Whether two WACZ files hold the same records: same types, URLs and payloads.

    .venv/bin/python bench/wacz_records.py A.wacz B.wacz

Two crawls of one site differ in record IDs, dates, order and compressed bytes; what must not
differ is what a replay can show. Each WARC record inside a WACZ is reduced to (WARC-Type,
WARC-Target-URI, SHA-256 of the payload as stored (HTTP headers and body, not decoded)),
and pages/pages.jsonl to its set of URLs; the two multisets are compared. Prints the
counts and up to 20 differences; exit status 1 if they differ.
"""

from __future__ import annotations

import collections
import hashlib
import io
import json
import sys
import zipfile

from warcio.archiveiterator import ArchiveIterator


def records(path: str) -> tuple[collections.Counter, set[str]]:
    found: collections.Counter = collections.Counter()
    pages: set[str] = set()
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            if name.startswith("archive/") and ".warc" in name:
                with zf.open(name) as raw:
                    for record in ArchiveIterator(io.BufferedReader(raw)):
                        kind = record.rec_type
                        if kind in ("warcinfo",):
                            continue
                        uri = record.rec_headers.get_header("WARC-Target-URI")
                        body = record.raw_stream.read()
                        head = record.http_headers.to_str() if record.http_headers else ""
                        # Date and Server headers change per fetch in any crawl, ours or not.
                        head = "\n".join(line for line in head.splitlines()
                                         if not line.lower().startswith(("date:", "server:")))
                        found[(kind, uri, hashlib.sha256(head.encode() + body).hexdigest())] += 1
            elif name == "pages/pages.jsonl":
                for line in zf.read(name).decode().splitlines()[1:]:
                    pages.add(json.loads(line)["url"])
    return found, pages


def main() -> int:
    a, b = sys.argv[1:3]
    (ra, pa), (rb, pb) = records(a), records(b)
    print(f"{a}: {sum(ra.values())} records, {len(pa)} pages")
    print(f"{b}: {sum(rb.values())} records, {len(pb)} pages")
    only_a, only_b = ra - rb, rb - ra
    for label, diff in ((a, only_a), (b, only_b)):
        for key in list(diff)[:20]:
            print(f"only in {label}: {key[0]} {key[1]} {key[2][:12]}")
    for label, diff in ((a, pa - pb), (b, pb - pa)):
        for url in sorted(diff)[:20]:
            print(f"page only in {label}: {url}")
    same = not only_a and not only_b and pa == pb
    print("same records" if same else "DIFFERENT")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

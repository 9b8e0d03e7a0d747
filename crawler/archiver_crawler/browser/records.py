"""A captured page as WARC records: its exchanges, then the records browsertrix-crawler adds.

- request/response records for the page, each redirect hop and every resource it loaded
  (the exchanges as archiver made them: headers as received, body as sent), except those
  `seen` says the crawl already holds (requisites are archived once per crawl); a
  response whose payload the org kept already is a revisit (a deduplicating crawl);
- `urn:text:<url>`: the page's text (document.body.innerText), text/plain;
- `urn:view:<url>`, `urn:thumbnail:<url>`, `urn:fullPage:<url>`, `urn:fullPageFinal:<url>`:
  the screenshots taken (shots.py), each of its image type;
- `urn:pageinfo:<url>`: status, load state, every URL loaded with its status, MIME type
  and resource type, and counts (resources, fetched, refused, failed, JavaScript errors).
Each resource record carries the page's id as WARC-Page-ID.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from archiver_crawler.browser.capture import PageCapture
from archiver_crawler.dedup import KnownPayloads
from archiver_crawler.warc import WarcFile, warc_date


def write_capture(warc: WarcFile, capture: PageCapture, page_id: str,
                  seen: Callable[[str], bool] = lambda url: False, text: bool = True,
                  known: KnownPayloads | None = None) -> int:
    """Write `capture`'s records; the number of exchanges written. `seen(url)` is asked for
    each GET of a resource other than the page's own documents (True: the crawl has it
    already); other methods are always written (their bodies differ). `text`: write the
    `urn:text:` record. `known`: the org's kept payloads (a deduplicating crawl), written
    as revisits."""
    documents = {id(r) for r in capture.documents()}
    written = 0
    for resource in capture.resources:
        if resource.exchange is None:
            continue
        if (id(resource) not in documents and resource.exchange.method == "GET"
                and seen(resource.url)):
            continue
        warc.write(resource.exchange, known)
        written += 1
    ts = warc_date(capture.ts)
    page = [("WARC-Page-ID", page_id)]
    if text and capture.load_state >= 3:
        warc.write_resource(f"urn:text:{capture.url}", "text/plain; charset=utf-8",
                            capture.text.encode("utf-8"), capture.ts, page)
    for shot in capture.screenshots:
        warc.write_resource(f"urn:{shot.kind}:{capture.url}", shot.mime, shot.data, capture.ts, page)
    warc.write_resource(f"urn:pageinfo:{capture.url}", "application/json",
                        json.dumps(capture.page_info(page_id, ts)).encode("utf-8"),
                        capture.ts, [*page, ("WARC-Resource-Type", "pageinfo")])
    return written

"""A scripted crawler that behaves as the real browsertrix-crawler does where it differs from
archiver's own (docs/crawlers.md, "Protocol differences archiver handles"). Tests only: the
local launcher runs it through ARCHIVER_LOCAL_CRAWLER_COMMAND, against the real Redis.

    python fake_crawler.py --config <cwd>/crawler.json ... --crawlId ID --cwd DIR

It fetches its seeds (no links) over HTTP, one page at a time, and on the way:

- a page that cannot be fetched goes to `<id>:f` AND to `<id>:pages` with no `status` and
  `loadState` 0, each page record's `filename` is its upload name (`<ts>-<id>.wacz`);
- its error lines go to `<id>:e` as JSON, and to its log;
- while it shuts down it sets `pending-wait` (for `pending_wait` seconds), then
  `generate-wacz`, writes the WACZ, sets `done` and exits 0;
- no page succeeded: status `failed`, exit 9, no WACZ;
- SIGTERM: it finishes the page in hand, sets `interrupted` and exits 11 with NO WACZ (its
  WARC stays in archive/, and the next session's WACZ holds it);
- `"fatal": "<message>"` in the script: a fatal error under --restartsOnError, i.e. a fatal
  line in `:e` and the log, status `failed`, exit 0;
- SIGKILL (the test kills it as `docker kill` would): 137, and no OOM flag;
- deduplication as 1.12 and later do it against the crawl's own Redis (no option): a payload
  whose sha256 `alldupes` and `h:<crawl id>` know becomes a revisit record, and the WACZ's
  datapackage.json requires the `c:<crawl id>:wacz` entries its revisits point into; a new
  payload goes into `h:<own id>`. Its CDXJ index carries every record's digest.

The script is `<data_dir>/conformance.json` (the instance folder is
<data_dir>/crawls/<crawl>/<instance>): {"delay": seconds per page, "pending_wait": seconds,
"fatal": message}, all optional.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
import uuid
import zipfile
from pathlib import Path

import redis

STOP = {"signal": False}


def option(name: str) -> str:
    return sys.argv[sys.argv.index(name) + 1]


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")


def log(level: str, message: str, context: str = "general", **details) -> dict:
    entry = {"timestamp": now_iso(), "logLevel": level, "context": context, "message": message,
             "details": details}
    print(json.dumps(entry), flush=True)
    return entry


class Fake:
    def __init__(self) -> None:
        self.cwd, self.id = Path(option("--cwd")), option("--crawlId")
        config = json.loads(Path(option("--config")).read_text())
        self.seeds = [s if isinstance(s, str) else s["url"] for s in config["seeds"]]
        self.script = json.loads((self.cwd.parent.parent.parent / "conformance.json").read_text())
        self.r = redis.Redis.from_url(config["redisStoreUrl"], decode_responses=True)
        self.host = os.environ["CRAWLER_HOSTNAME"]
        self.collection = self.cwd / "collections" / self.id
        self.upload_name = f"{dt.datetime.now(dt.UTC):%Y%m%d%H%M%S}-{self.id}.wacz"
        self.session = len(list((self.collection / "archive").glob("*.warc.gz")))
        self.warc = self.collection / "archive" / f"rec-{self.host}-{self.session}.warc.gz"

    def status(self, value: str) -> None:
        self.r.hset(f"{self.id}:status", self.host, value)

    def error(self, level: str, message: str, context: str = "general", **details) -> None:
        self.r.lpush(f"{self.id}:e", json.dumps(log(level, message, context, **details)))

    def run(self) -> int:
        if self.r.hget(f"{self.id}:status", self.host) == "done":
            return 0  # a relaunched instance that finished: exits at once, as the real one
        for sub in ("archive", "pages", "indexes"):
            (self.collection / sub).mkdir(parents=True, exist_ok=True)
        self.status("running")
        if self.script.get("fatal"):
            self.error("fatal", f"{self.script['fatal']}. Quitting")
            self.status("failed")
            return 0  # --restartsOnError turns a fatal error into exit 0
        for seed in self.seeds:
            if self.r.sadd(f"{self.id}:s", seed):
                self.r.zadd(f"{self.id}:q", {json.dumps({"url": seed, "depth": 0}): 0})
        while not STOP["signal"] and not self.r.get(f"{self.id}:stopping") and not \
                self.r.get(f"{self.id}:canceled") and (popped := self.r.zpopmin(f"{self.id}:q")):
            self.page(json.loads(popped[0][0])["url"])
            time.sleep(float(self.script.get("delay", 0)))
        return self.finish()

    def page(self, url: str) -> None:
        record = {"id": uuid.uuid4().hex, "url": url, "ts": now_iso(), "depth": 0, "seed": True}
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body, status, mime = response.read(), response.status, response.headers.get_content_type()
        except (urllib.error.URLError, OSError) as exc:
            # What the real crawler does when a page's retries ran out: both lists.
            self.r.lpush(f"{self.id}:f", json.dumps({"url": url, "depth": 0, "seedId": 0}))
            self.error("error", "Page Load Failed: retry limit reached", "pageStatus",
                       url=url, msg=str(exc))
            self.r.lpush(f"{self.id}:pages", json.dumps(
                {**record, "title": "", "loadState": 0, "filename": self.upload_name}))
            return
        self.record(url, body, status, mime)
        page = {**record, "title": url, "status": status, "mime": mime, "loadState": 4}
        with open(self.collection / "pages" / "pages.jsonl", "a") as pages:
            if pages.tell() == 0:
                pages.write(json.dumps({"format": "json-pages-1.0", "id": "pages"}) + "\n")
            pages.write(json.dumps(page) + "\n")
        self.r.lpush(f"{self.id}:pages", json.dumps({**page, "filename": self.upload_name}))
        self.r.incr(f"{self.id}:d")
        size = sum(p.stat().st_size for p in (self.collection / "archive").iterdir())
        self.r.hset(f"{self.id}:size", self.host, size)

    def record(self, url: str, body: bytes, status: int, mime: str) -> None:
        digest = hashlib.sha256(body).hexdigest()
        stamp = dt.datetime.now(dt.UTC)
        source = self.r.hget("alldupes", digest) or self.id
        known = self.r.hget(f"h:{source}", digest)
        headers = [f"WARC-Target-URI: {url}", f"WARC-Date: {stamp:%Y-%m-%dT%H:%M:%SZ}",
                   f"WARC-Record-ID: <urn:uuid:{uuid.uuid4()}>", f"WARC-Payload-Digest: sha256:{digest}"]
        if known:
            index, date, refers_to, _size = known.split(" ")
            kind, block = "revisit", b""
            headers += ["WARC-Profile: http://netpreserve.org/warc/1.1/revisit/identical-payload-digest",
                        f"WARC-Refers-To-Target-URI: {refers_to}",
                        f"WARC-Refers-To-Date: {dt.datetime.strptime(date[:14], '%Y%m%d%H%M%S'):%Y-%m-%dT%H:%M:%SZ}"]
            if source != self.id:
                self.r.sadd(f"{self.id}:duperef", f"{source} {index}")
        else:
            kind, block = "response", body
            self.r.hsetnx(f"h:{self.id}", digest, f"0 {stamp:%Y%m%d%H%M%S} {url} {len(body)}")
        head = "".join(f"{h}\r\n" for h in [f"WARC-Type: {kind}", *headers,
                                               f"Content-Length: {len(block)}"])
        with gzip.open(self.warc, "ab") as warc:
            warc.write(f"WARC/1.1\r\n{head}\r\n".encode() + block + b"\r\n\r\n")
        entry = {"url": url, "digest": f"sha256:{digest}", "status": str(status),
                 "mime": "warc/revisit" if known else mime, "filename": self.warc.name}
        with open(self.collection / "indexes" / "index.cdxj", "a") as index:
            index.write(f"{url} {stamp:%Y%m%d%H%M%S} {json.dumps(entry)}\n")

    def requires(self) -> list[dict]:
        """The WACZs of other crawls its revisits point into, as its datapackage.json names them."""
        found = []
        for ref in sorted(self.r.smembers(f"{self.id}:duperef")):
            source, index = ref.split(" ")
            entry = self.r.lindex(f"c:{source}:wacz", int(index))
            if entry:
                found.append({**json.loads(entry), "crawlId": source})
        return found

    def finish(self) -> int:
        if self.r.get(f"{self.id}:canceled"):
            self.status("canceled")
            return 0
        self.status("pending-wait")  # on every shutdown, one instance or many
        time.sleep(float(self.script.get("pending_wait", 0)))
        if STOP["signal"]:
            self.status("interrupted")
            log("info", "Exiting, Crawl status: interrupted")
            return 11  # and no WACZ
        if int(self.r.get(f"{self.id}:d") or 0) == 0:
            log("info", "Exiting, Crawl status: failed")
            self.status("failed")
            return 9
        self.status("generate-wacz")
        self.write_wacz()
        self.status("done")
        return 0

    def write_wacz(self) -> None:
        """Every WARC of archive/ and the pages list, as each session's WACZ holds them."""
        target = self.collection / f"{self.id}.wacz"
        with zipfile.ZipFile(target, "w") as wacz:
            for warc in sorted((self.collection / "archive").glob("*.warc.gz")):
                wacz.write(warc, f"archive/{warc.name}")
            pages = self.collection / "pages" / "pages.jsonl"
            if pages.exists():
                wacz.write(pages, "pages/pages.jsonl")
            index = self.collection / "indexes" / "index.cdxj"
            if index.exists():
                wacz.write(index, "indexes/index.cdxj")
            package = {"profile": "data-package", "resources": []}
            if requires := self.requires():
                package["relation"] = {"requires": requires}
            wacz.writestr("datapackage.json", json.dumps(package))


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: STOP.update(signal=True))
    return Fake().run()


if __name__ == "__main__":
    sys.exit(main())

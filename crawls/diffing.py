"""What changed between two kept crawls of an org: pages added, removed, changed, unchanged.

    result = diffing.compare(a, b)                    # DiffRefused if they cannot be compared
    result = diffing.compare(a, b, watch=schedule.watch)   # only what a schedule watches
    result.summary()                                  # counts and the changed pages, as JSON
    diffing.text_diff_html(a, b, url)                 # a page's text diff, an HTML table

A page is a URL of a WACZ's pages/pages.jsonl, normalised as the crawler normalises links.
It changed when the payload digest of its response record differs, read from the WACZ's
CDXJ index (a revisit record counts as the digest it names; where the index gives no
digest, its body differs). For HTML pages a similarity of their texts is given too: the
words they begin and end with alike, and difflib's SequenceMatcher over the rest (the quick
ratio on very long ones), 1.0 for equal texts. The text is pages.jsonl's `text` when the
crawler wrote one, else extracted from the HTML body in the WARC (scripts and styles dropped).

WACZ members are read through zipfile from wherever the archive is kept (the data dir, or
the bucket by ranged reads), never trusting a path a crawler wrote: members are looked up by
name in the zip, and every read is bounded.
"""

from __future__ import annotations

import contextlib
import difflib
import gzip
import html
import itertools
import json
import math
import re
import textwrap
import zipfile
import zlib
from collections import Counter
from dataclasses import dataclass, field

from archiver_crawler.scope import normalize_url
from django.http import Http404

from archiver import conf
from archiver.errors import ArchiverError
from crawls import storage
from crawls.downloads import open_archive
from crawls.models import PayloadDigest
from crawls.selectors import Selector, page_text

INDEX_MEMBERS = ("indexes/index.cdxj", "indexes/index.cdx", "indexes/index.cdx.gz")
PAGE_MEMBERS = ("pages/pages.jsonl", "pages/extraPages.jsonl")
MAX_INDEX = 256 << 20  # bytes of one WACZ's index or page list read
MAX_RECORD = 32 << 20  # bytes of one WARC record read for its body
MAX_BODY = 32 << 20  # bytes of one decompressed body
# Work units (word pairs difflib's matcher may look at) for one page's similarity: past
# them the texts' shared words are counted instead (linear). Two texts of repeated words
# cost the product of their lengths: 5,000 against 100,000 took 96 s, and froze the daemon.
PAGE_WORK = 2_000_000
# Lines of each text in a page's text diff, and characters a line: difflib's table costs
# the product of the lengths where changes are scattered (40,000 such lines took 138 s and
# made 15 MB of HTML), and of a changed line's characters (one of 56 kB took 26 s).
DIFF_LINES = 2_000
LINE_CHARS = 160
# Line pairs the side-by-side table may score (see pairings): about a second of HtmlDiff.
PAIR_WORK = 1_000
HTML_TYPES = ("text/html", "application/xhtml+xml")
REVISIT = "warc/revisit"


class DiffRefused(ArchiverError):
    """Two crawls cannot be compared (not kept yet, other orgs, the same crawl) or an archive
    cannot be read; the message says which. `kind` is "state" (not kept yet, an archive
    unreadable) or "invalid" (the same crawl, other orgs), as ActionRefused's."""

    def __init__(self, message: str, kind: str = "state"):
        super().__init__(message)
        self.kind = kind


@dataclass
class Capture:
    """One page of one crawl as its WACZ recorded it."""

    url: str
    digest: str = ""
    mime: str = ""
    status: str = ""
    revisit: bool = False
    file: object = None  # the CrawlFile holding the record
    warc: str = ""
    offset: int = 0
    length: int = 0
    text: str | None = None  # pages.jsonl's, when the crawler wrote it

    @property
    def is_html(self) -> bool:
        return self.mime.split(";")[0].strip().lower() in HTML_TYPES


@dataclass
class Change:
    url: str
    digest_a: str
    digest_b: str
    similarity: float | None  # None for pages that are not HTML, or whose text is unreadable

    def summary(self) -> dict:
        return {"url": self.url, "digest_a": self.digest_a, "digest_b": self.digest_b,
                "similarity": self.similarity}


def shown_score(value: float | None) -> str:
    """A score from 0 to 1 in two decimals, rounded down: short of 1 never reads 1.00."""
    if value is None:
        return "-"
    return f"{math.floor(round(value * 100, 6)) / 100:.2f}"  # 0.29 * 100 is below 29


@dataclass
class Diff:
    a: str
    b: str
    watch: dict | None
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[Change] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return {"added": len(self.added), "removed": len(self.removed),
                "changed": len(self.changed), "unchanged": len(self.unchanged)}

    @property
    def anything_changed(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def summary(self, unchanged: bool = True) -> dict:
        answer = {"a": self.a, "b": self.b, "watch": self.watch, "counts": self.counts,
                  "added": self.added, "removed": self.removed,
                  "changed": [change.summary() for change in self.changed]}
        if unchanged:
            answer["unchanged"] = self.unchanged
        return answer


# --- which crawls may be compared ------------------------------------------------------------


def check_pair(a, b) -> None:
    """DiffRefused unless a and b are two kept crawls of one org."""
    if a.pk == b.pk:
        raise DiffRefused(f"crawl {a.short_id} compared with itself: name two crawls", "invalid")
    if a.org_id != b.org_id:
        raise DiffRefused(f"crawls {a.short_id} and {b.short_id} belong to different orgs", "invalid")
    for crawl in (a, b):
        check_kept(crawl)


def check_kept(crawl) -> None:
    """DiffRefused unless the crawl ended and kept an archive."""
    if not crawl.is_final:
        raise DiffRefused(f"crawl {crawl.short_id} is {crawl.status}: not kept yet "
                          "(compare crawls that have ended)")
    if not crawl.files.exists():
        raise DiffRefused(f"crawl {crawl.short_id} kept no archive to compare")


def compare(a, b, watch: dict | None = None, settings=None) -> Diff:
    """The diff from a to b, restricted to `watch` (docs/cli.md#diff); DiffRefused if not."""
    check_pair(a, b)
    with Archives(settings) as archives:
        pages_a, pages_b = archives.captures(a), archives.captures(b)
        return Comparison(a.id, b.id, pages_a, pages_b, watch, archives).run()


class Comparison:
    def __init__(self, a: str, b: str, pages_a: dict, pages_b: dict, watch, archives):
        self.pages_a, self.pages_b, self.archives = pages_a, pages_b, archives
        self.diff = Diff(a, b, watch)
        self.selector = Selector.parse(watch["selector"]) if watch and watch.get("selector") else None
        urls = watched_urls(watch)
        self.urls = sorted((set(pages_a) | set(pages_b)) if urls is None else
                           urls & (set(pages_a) | set(pages_b)))

    def run(self) -> Diff:
        for url in self.urls:
            before, after = self.pages_a.get(url), self.pages_b.get(url)
            if self.selector:
                self.compare_selected(url, before, after)
            else:
                self.compare_pages(url, before, after)
        return self.diff

    def compare_pages(self, url: str, before: Capture | None, after: Capture | None) -> None:
        if before is None:
            self.diff.added.append(url)
        elif after is None:
            self.diff.removed.append(url)
        elif self.same(before, after):
            self.diff.unchanged.append(url)
        else:
            similarity = None
            if self.is_html(before) and self.is_html(after):
                similarity = text_similarity(self.archives.text(before), self.archives.text(after))
            self.diff.changed.append(Change(url, before.digest, after.digest, similarity))

    def compare_selected(self, url: str, before: Capture | None, after: Capture | None) -> None:
        """Only what the selector selects: a page it selects nothing in is not watched."""
        text_a = self.selected(before)
        text_b = self.selected(after)
        if text_a is None and text_b is None:
            return
        if text_a is None:
            self.diff.added.append(url)
        elif text_b is None:
            self.diff.removed.append(url)
        elif self.same(before, after) or text_a == text_b:
            self.diff.unchanged.append(url)
        else:
            self.diff.changed.append(Change(url, before.digest, after.digest,
                                            text_similarity(text_a, text_b)))

    def same(self, before: Capture, after: Capture) -> bool:
        if before.digest and after.digest:
            return before.digest == after.digest
        # A CDXJ line may leave the digest out (it is optional): two empty digests say
        # nothing, so the bodies decide, or the pages' texts when no record is indexed.
        body_a, body_b = self.archives.html(before), self.archives.html(after)
        if body_a is None and body_b is None:
            return before.text == after.text
        return body_a == body_b

    def is_html(self, capture: Capture) -> bool:
        """A revisit's CDXJ line says warc/revisit: the type is the original record's."""
        source = self.archives.original(capture) if capture.revisit else capture
        return source is not None and source.is_html

    def selected(self, capture: Capture | None) -> str | None:
        if capture is None or not self.is_html(capture):
            return None
        html = self.archives.html(capture)
        return None if html is None else self.selector.text(html)


def watched_urls(watch: dict | None) -> set[str] | None:
    """The normalised URLs a watch names; None for every page."""
    if not watch or not watch.get("urls"):
        return None
    return {normalize_url(url) or url for url in watch["urls"]}


def text_similarity(a: str | None, b: str | None, work: int = PAGE_WORK) -> float | None:
    """1.0 for the same words, less the more they differ; None if a text is missing. At most
    `work` units of matching: beyond, the middle's shared words (an upper estimate)."""
    if a is None or b is None:
        return None
    words_a, words_b = a.split(), b.split()
    if words_a == words_b:
        return 1.0
    # A page edited in one place keeps a long head and tail: matched here in one pass, so
    # the matcher, whose cost grows with the product of the lengths, gets the middle alone.
    shorter = min(len(words_a), len(words_b))
    head = next((n for n in range(shorter) if words_a[n] != words_b[n]), shorter)
    tail = next((n for n in range(shorter - head) if words_a[-1 - n] != words_b[-1 - n]),
                shorter - head)
    middle_a, middle_b = words_a[head:len(words_a) - tail], words_b[head:len(words_b) - tail]
    matched = matched_words(middle_a, middle_b, work)
    ratio = 2 * (head + tail + matched) / (len(words_a) + len(words_b))
    return min(round(ratio, 4), 0.9999)  # words differ: never shown as "the same"


class OverBudget(Exception):
    """The matcher would look at more pairs than its work allows."""


class BoundedMatcher(difflib.SequenceMatcher):
    """difflib's matcher, each search charged what it may look at (the positions in b of
    every word of a's range), OverBudget once `work` is spent: the same answer, or none."""

    def __init__(self, a: list[str], b: list[str], work: int):
        super().__init__(None, a, b, autojunk=False)
        self.left = work
        self.costs = list(itertools.accumulate((1 + len(self.b2j.get(w, ())) for w in a), initial=0))

    def find_longest_match(self, alo=0, ahi=None, blo=0, bhi=None):
        self.left -= self.costs[ahi] - self.costs[alo]
        if self.left < 0:
            raise OverBudget
        return super().find_longest_match(alo, ahi, blo, bhi)


def matched_words(a: list[str], b: list[str], work: int = PAGE_WORK) -> int:
    """Words of a matched in b in order (difflib's blocks) within `work` units; else the
    words they share however placed, counted in linear time."""
    count_a, count_b = Counter(a), Counter(b)
    first = len(a) + sum(n * count_b[w] for w, n in count_a.items())  # the first search alone
    if first <= work:
        try:
            return sum(block.size for block in BoundedMatcher(a, b, work).get_matching_blocks())
        except OverBudget:
            pass
    return sum((count_a & count_b).values())


def text_diff_html(a, b, url: str, settings=None) -> str | None:
    """The page's text in a and in b side by side (difflib.HtmlDiff, which escapes every
    line), the first DIFF_LINES lines of each, or None if either crawl has no such page."""
    check_pair(a, b)
    with Archives(settings) as archives:
        before, after = archives.captures(a).get(url), archives.captures(b).get(url)
        if before is None or after is None:
            return None
        lines_a = diff_lines(archives.text(before) or "")
        lines_b = diff_lines(archives.text(after) or "")
    cut = ""
    if max(len(lines_a), len(lines_b)) > DIFF_LINES:
        cut = (f'<p class="help">The first {DIFF_LINES:,} lines of each text are compared: '
               f"crawl {a.short_id}'s has {len(lines_a):,}, crawl {b.short_id}'s "
               f"{len(lines_b):,}.</p>")
    lines_a, lines_b = lines_a[:DIFF_LINES], lines_b[:DIFF_LINES]
    if pairings(lines_a, lines_b) > PAIR_WORK:
        return cut + unpaired_diff_html(lines_a, lines_b, a, b)
    return cut + difflib.HtmlDiff(wrapcolumn=80).make_table(
        lines_a, lines_b, fromdesc=f"crawl {a.short_id}",
        todesc=f"crawl {b.short_id}", context=True, numlines=2)


def pairings(lines_a: list[str], lines_b: list[str]) -> int:
    """The line pairs HtmlDiff would score to pair the changed lines of each replaced
    stretch: the product of its lengths, summed. Hostile texts (a few words rearranged on
    every line) make it quadratic: 200 such lines took 50 s."""
    matcher = difflib.SequenceMatcher(None, lines_a, lines_b)
    return sum((i2 - i1) * (j2 - j1) for tag, i1, i2, j1, j2 in matcher.get_opcodes()
               if tag == "replace")


def unpaired_diff_html(lines_a: list[str], lines_b: list[str], a, b) -> str:
    """The changed lines as a unified diff, unpaired: for texts whose side-by-side pairing
    would cost more than PAIR_WORK."""
    diff = difflib.unified_diff(lines_a, lines_b, f"crawl {a.short_id}", f"crawl {b.short_id}",
                                n=2, lineterm="")
    return ('<p class="help">Too many lines changed to pair them side by side: the changes '
            f'as a unified diff.</p><pre class="unified-diff">{html.escape(chr(10).join(diff))}</pre>')


def diff_lines(text: str) -> list[str]:
    """A text's lines for the diff table, a long one cut at its sentences' ends, and a long
    sentence at spaces: pieces an edit elsewhere in the paragraph leaves as they were."""
    lines: list[str] = []
    for line in text.splitlines():
        if len(line) <= LINE_CHARS:
            lines.append(line)
            continue
        for sentence in re.split(r"(?<=[.!?])\s+", line):
            lines.extend(textwrap.wrap(sentence, LINE_CHARS, break_on_hyphens=False))
    return lines


# --- reading kept WACZs ---------------------------------------------------------------------


class Archives(contextlib.ExitStack):
    """The open WACZs of the crawls being compared, and the captures read from them."""

    def __init__(self, settings=None):
        super().__init__()
        self.settings = settings or conf.get()
        self.zips: dict[int, zipfile.ZipFile] = {}
        self.by_digest: dict[str, Capture] = {}

    def open(self, crawl_file) -> zipfile.ZipFile:
        if crawl_file.pk not in self.zips:
            handle = self.enter_context(open_kept(crawl_file, self.settings))
            try:
                self.zips[crawl_file.pk] = self.enter_context(zipfile.ZipFile(handle))
            except (zipfile.BadZipFile, OSError) as exc:
                raise DiffRefused(f"{crawl_file.path} is not a readable WACZ ({exc})") from None
        return self.zips[crawl_file.pk]

    def captures(self, crawl) -> dict[str, Capture]:
        """Every page of the crawl by normalised URL, with its response record."""
        records: dict[str, Capture] = {}
        listed: list[tuple[str, str | None]] = []
        for crawl_file in crawl.files.order_by("created_at", "pk"):
            archive = self.open(crawl_file)
            for url, capture in read_index(archive).items():
                capture.file = crawl_file
                records[url] = capture
                if capture.digest and not capture.revisit:
                    self.by_digest.setdefault(capture.digest, capture)
            listed += read_pages(archive)
        pages: dict[str, Capture] = {}
        for url, text in listed:
            capture = pages.get(url) or records.get(url) or Capture(url)
            if text is not None:
                capture.text = text
            pages[url] = capture
        return pages

    def html(self, capture: Capture) -> str | None:
        """The HTML body of the page's response (a revisit's from the record it names)."""
        source = capture
        if capture.revisit:
            source = self.original(capture)
            if source is None:
                return None
        if source.file is None or not source.warc:
            return None
        try:
            record = read_member_range(self.open(source.file), "archive/" + source.warc,
                                       source.offset, source.length)
        except (KeyError, OSError, zipfile.BadZipFile, EOFError, zlib.error):
            return None
        return http_body_text(record)

    def record(self, capture: Capture) -> bytes | None:
        """The WARC record of a capture (a revisit's: the record it names), or None."""
        source = self.original(capture) if capture.revisit else capture
        if source is None or source.file is None or not source.warc:
            return None
        try:
            return read_member_range(self.open(source.file), "archive/" + source.warc,
                                     source.offset, source.length)
        except (KeyError, OSError, zipfile.BadZipFile, EOFError, zlib.error):
            return None

    def original(self, capture: Capture) -> Capture | None:
        """The record a revisit names: in the crawls compared, or in the archive of the org
        that holds its payload (PayloadDigest), as when both crawls revisit a third."""
        found = self.by_digest.get(capture.digest)
        if found is not None or capture.file is None:
            return found
        prefixed = capture.digest if ":" in capture.digest else "sha1:" + capture.digest
        holder = (PayloadDigest.objects.filter(org_id=capture.file.crawl.org_id,
                                               digest__in={capture.digest, prefixed})
                  .select_related("crawl_file").first())
        if holder is None or holder.crawl_file_id in self.zips:
            return None
        for held in read_index(self.open(holder.crawl_file)).values():
            held.file = holder.crawl_file
            if held.digest and not held.revisit:
                self.by_digest.setdefault(held.digest, held)
        return self.by_digest.get(capture.digest)

    def text(self, capture: Capture) -> str | None:
        if capture.text is not None:
            return capture.text
        html = self.html(capture)
        return None if html is None else page_text(html)


@contextlib.contextmanager
def open_kept(crawl_file, settings):
    """A kept archive as a seekable binary file, wherever it is kept; DiffRefused if gone."""
    if storage.is_object(crawl_file):
        store = storage.object_store(settings)
        if store is None or store.target.root != crawl_file.root:
            raise DiffRefused(f"{crawl_file.path} is in a bucket ARCHIVER_STORAGE_URL does not name")
        try:
            size = store.head(crawl_file.path)
        except storage.StorageError as exc:
            raise DiffRefused(str(exc)) from None
        if size is None:
            raise DiffRefused(f"{crawl_file.path} is not in its bucket")
        handle = store.open(crawl_file.path, size)
    else:
        try:
            handle, _size = open_archive(settings.data_dir, crawl_file.path)
        except Http404:
            raise DiffRefused(f"{crawl_file.path} is not on disk") from None
    with handle:
        yield handle


def read_member(archive: zipfile.ZipFile, name: str, limit: int = MAX_INDEX) -> bytes | None:
    try:
        info = archive.getinfo(name)
    except KeyError:
        return None
    if info.file_size > limit:
        raise DiffRefused(f"{name} in the WACZ is larger than {limit >> 20} MiB")
    with archive.open(info) as member:
        data = member.read(limit + 1)
    return gzip.decompress(data) if name.endswith(".gz") else data


def read_index(archive: zipfile.ZipFile) -> dict[str, Capture]:
    """The response (or revisit) record of every URL the CDXJ index lists; for a URL captured
    more than once, the last."""
    for name in INDEX_MEMBERS:
        data = read_member(archive, name)
        if data is not None:
            break
    else:
        return {}
    records: dict[str, Capture] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        fields = parse_cdxj(line)
        if fields is None:
            continue
        url = normalize_url(str(fields.get("url", "")))
        mime = str(fields.get("mime", ""))
        if url is None or str(fields.get("method", "GET")).upper() != "GET" or mime == "warc/request":
            continue
        records[url] = Capture(
            url, digest=str(fields.get("digest", "")), mime=mime, status=str(fields.get("status", "")),
            revisit=mime == REVISIT, warc=str(fields.get("filename", "")),
            offset=number(fields.get("offset")), length=number(fields.get("length")))
    return records


def screenshots(archive: zipfile.ZipFile) -> dict[str, Capture]:
    """The captures' screenshots (urn:view: resource records) by page URL."""
    found = {}
    for name in INDEX_MEMBERS:
        data = read_member(archive, name)
        if data is None:
            continue
        for line in data.decode("utf-8", "replace").splitlines():
            fields = parse_cdxj(line)
            url = str(fields.get("url", "")) if fields else ""
            if url.startswith("urn:view:"):
                page = normalize_url(url.removeprefix("urn:view:"))
                if page:
                    found[page] = Capture(
                        page, mime="image/png", warc=str(fields.get("filename", "")),
                        offset=number(fields.get("offset")), length=number(fields.get("length")))
        break
    return found


def warc_block(record: bytes) -> bytes | None:
    """The block of a WARC record (its Content-Length bytes after the headers), or None."""
    head, _, block = record.partition(b"\r\n\r\n")
    if not head.startswith(b"WARC/"):
        return None
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-length" and value.strip().isdigit():
            return block[:int(value)]
    return None


def parse_cdxj(line: str) -> dict | None:
    parts = line.split(" ", 2)
    if len(parts) < 3 or not parts[2].startswith("{"):
        return None
    try:
        fields = json.loads(parts[2])
    except ValueError:
        return None
    return fields if isinstance(fields, dict) else None


def number(value) -> int:
    try:
        return max(int(value), 0)
    except (TypeError, ValueError):
        return 0


def read_pages(archive: zipfile.ZipFile):
    """(normalised URL, text or None) of every page the WACZ's page lists name."""
    for name in PAGE_MEMBERS:
        data = read_member(archive, name)
        for line in (data or b"").decode("utf-8", "replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if not isinstance(entry, dict) or "url" not in entry:
                continue  # the header line, or damage
            url = normalize_url(str(entry["url"]))
            if url:
                text = entry.get("text")
                yield url, text if isinstance(text, str) else None


def read_member_range(archive: zipfile.ZipFile, name: str, offset: int, length: int) -> bytes:
    """One WARC record (a gzip member, or plain) at offset..offset+length of a WARC in the zip."""
    if length <= 0 or length > MAX_RECORD:
        raise OSError(f"record length {length} out of bounds")
    with archive.open(name) as member:
        member.seek(offset)
        raw = member.read(length)
    if raw[:2] == b"\x1f\x8b":
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        raw = inflater.decompress(raw, MAX_RECORD)
    return raw


def http_response(record: bytes) -> tuple[int, str, list[tuple[str, str]], bytes] | None:
    """(status, reason, headers, body) of a WARC response record, the body as the server sent
    it (still content-encoded, de-chunked); None when it is not one we can read."""
    block = warc_block(record)
    if block is None:
        return None
    http_head, _, body = block.partition(b"\r\n\r\n")
    lines = http_head.split(b"\r\n")
    status_line = lines[0].decode("latin-1").split(" ", 2)
    if len(status_line) < 2 or not status_line[1].isdigit():
        return None
    headers = []
    for line in lines[1:]:
        key, _, value = line.partition(b":")
        if key.strip():
            headers.append((key.strip().decode("latin-1"), value.strip().decode("latin-1")))
    if any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in headers):
        body = dechunk(body)
        headers = [(k, v) for k, v in headers if k.lower() != "transfer-encoding"]
    return int(status_line[1]), status_line[2] if len(status_line) > 2 else "", headers, body


def http_body_text(record: bytes) -> str | None:
    """The decoded body of a WARC response record, or None when it is not one we can read."""
    warc_head, _, block = record.partition(b"\r\n\r\n")
    if not warc_head.startswith(b"WARC/"):
        return None
    http_head, _, body = block.partition(b"\r\n\r\n")
    headers = {}
    for line in http_head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        headers[key.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = dechunk(body)
    encoding = headers.get("content-encoding", "").lower()
    if encoding in ("gzip", "x-gzip", "deflate"):
        try:
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS if "gzip" in encoding else zlib.MAX_WBITS)
            body = inflater.decompress(body, MAX_BODY)
        except zlib.error:
            pass  # already decoded by the crawler, as archiver's own does
    elif encoding not in ("", "identity"):
        return None
    charset = "utf-8"
    for part in headers.get("content-type", "").split(";")[1:]:
        key, _, value = part.strip().partition("=")
        if key.lower() == "charset" and value:
            charset = value.strip('"\' ')
    try:
        return body.decode(charset, "replace")
    except LookupError:
        return body.decode("utf-8", "replace")


def dechunk(body: bytes) -> bytes:
    out, position = bytearray(), 0
    while position < len(body):
        end = body.find(b"\r\n", position)
        if end < 0:
            break
        try:
            size = int(body[position:end].split(b";")[0], 16)
        except ValueError:
            return body  # not chunked after all
        if size == 0:
            break
        out += body[end + 2:end + 2 + size]
        position = end + 2 + size + 2
    return bytes(out)

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

WACZ members are read through crawls/kept_wacz.py, wherever the archive is kept, every read
bounded.
"""

from __future__ import annotations

import difflib
import html
import itertools
import math
import re
import textwrap
from collections import Counter
from dataclasses import dataclass, field

from archiver_crawler.scope import normalize_url

from crawls.kept_wacz import Archives, Capture, DiffRefused
from crawls.models.statuses import said
from crawls.selectors import Selector

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
        raise DiffRefused(f"crawl {crawl.short_id}: {said(crawl.status)}, not kept yet "
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

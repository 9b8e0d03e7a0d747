"""crawls/diffing.py on WACZs whose CDXJ gives no payload digest (the field is optional, and
other tools leave it out): the bodies decide whether a page changed, not two empty digests."""

from __future__ import annotations

import pytest

from crawls import diffing
from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlFile, CrawlStatus, Org
from tests.admin.browsing import stored_wacz

pytestmark = pytest.mark.django_db

URL = "http://localhost:9/news.html"


def kept(data_dir, org, pages: dict[str, str]) -> Crawl:
    crawl = Crawl.create(org, CrawlConfig(seeds=[URL]))
    Crawl.objects.filter(pk=crawl.pk).update(status=CrawlStatus.COMPLETE)
    crawl.refresh_from_db()
    for n, (url, body) in enumerate(pages.items()):
        path = f"archives/{crawl.id}/session-{n}.wacz"
        (data_dir / path).parent.mkdir(parents=True, exist_ok=True)
        size, sha256 = stored_wacz(data_dir / path, url, "News", body)
        CrawlFile.objects.create(crawl=crawl, path=path, size=size, sha256=sha256)
    return crawl


def html(text: str) -> str:
    return f"<html><head><title>News</title></head><body><p>{text}</p></body></html>"


def test_without_digests_a_changed_body_is_changed_and_an_equal_one_unchanged(conf_data_dir):
    org = Org.objects.create(slug="acme", name="Acme")
    same = "http://localhost:9/same.html"
    a = kept(conf_data_dir, org, {URL: html("the old story"), same: html("the same")})
    b = kept(conf_data_dir, org, {URL: html("the new story"), same: html("the same")})
    diff = diffing.compare(a, b)
    assert [change.url for change in diff.changed] == [URL]
    assert diff.unchanged == [same]
    assert 0 < diff.changed[0].similarity < 1


def test_a_score_short_of_1_is_shown_rounded_down_so_a_changed_page_never_reads_the_same():
    shown = [diffing.shown_score(v) for v in (0.9961, 0.9999, 1.0, 0.29, 0.5, None)]
    assert shown == ["0.99", "0.99", "1.00", "0.29", "0.50", "-"]


def test_a_long_pages_text_diff_compares_its_first_lines_and_says_so(conf_data_dir):
    org = Org.objects.create(slug="acme", name="Acme")
    lines = [f"L{n}x" for n in range(diffing.DIFF_LINES + 500)]
    body = "<html><body>{}</body></html>"
    a = kept(conf_data_dir, org, {URL: body.format("".join(f"<p>{t}</p>" for t in lines))})
    b = kept(conf_data_dir, org, {URL: body.format("".join(
        f"<p>{t}{' edited' if n % 2 else ''}</p>" for n, t in enumerate(lines)))})
    table = diffing.text_diff_html(a, b, URL)
    last, beyond = diffing.DIFF_LINES - 1, diffing.DIFF_LINES + 1
    assert f"L{last}x" in table and f"L{beyond}x" not in table
    assert (f"The first {diffing.DIFF_LINES:,} lines of each text are compared: crawl "
            f"{a.short_id}'s has {len(lines):,}, crawl {b.short_id}'s {len(lines):,}.") in table


def test_a_long_paragraph_is_diffed_by_its_sentences_and_a_long_sentence_in_pieces(conf_data_dir):
    sentences = [f"Sentence {n} says something about the archive." for n in range(300)]
    assert diffing.diff_lines(" ".join(sentences)) == sentences
    assert all(0 < len(piece) <= diffing.LINE_CHARS for piece in diffing.diff_lines("word " * 10_000))

    org = Org.objects.create(slug="acme", name="Acme")
    a = kept(conf_data_dir, org, {URL: html(" ".join(sentences))})
    b = kept(conf_data_dir, org, {URL: html(" ".join(sentences).replace("150 says", "150 now says"))})
    table = diffing.text_diff_html(a, b, URL).replace("&nbsp;", " ")
    # The edited sentence and its context, not the whole paragraph it is in.
    assert "Sentence 150" in table and "Sentence 140 " not in table and "Sentence 160 " not in table


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("a b c d", "a X c d", 0.75), ("a b c d", "X b c d", 0.75), ("a b c d", "a b c X", 0.75),
    ("a b c d", "a b c d e f", 0.8), ("a b", "c d", 0.0), ("a b c", "a b c", 1.0),
    (" ".join(f"w{n}" for n in range(100_000)), " ".join(f"w{n}" for n in range(100_000)) + " new",
     0.9999)])
def test_text_similarity_counts_the_words_in_place(a, b, expected):
    assert diffing.text_similarity(a, b) == expected


A_TEXT = "p " + "x " * 5_000 + "q"  # issue 36: 96 s in the API's diff, 97 s in the admin's
B_TEXT = "r " + "x " * 100_000 + "s"


@pytest.mark.parametrize("scale", [1, 5])  # 5: B is about 1 MiB of text
def test_two_texts_of_one_repeated_word_are_compared_within_the_work_budget(monkeypatch, scale):
    looked = []
    search = diffing.difflib.SequenceMatcher.find_longest_match
    monkeypatch.setattr(diffing.difflib.SequenceMatcher, "find_longest_match",
                        lambda self, *args: looked.append(args) or search(self, *args))
    a, b = A_TEXT, "r " + "x " * (100_000 * scale) + "s"
    similarity = diffing.text_similarity(a, b)
    # Their shared words counted instead (5,000 x), not the product of the lengths searched.
    assert looked == []
    assert similarity == round(2 * 5_000 / (5_002 + 100_000 * scale + 2), 4)


def test_the_matcher_stops_at_its_work_and_small_texts_keep_its_exact_answer():
    words = ["a", "b", "c", "d", "e", "f", "g", "h"]
    assert diffing.matched_words(words, words[::-1], work=10**6) == 1  # in order: one word
    assert diffing.matched_words(words, words[::-1], work=8) == 8  # over budget: shared words
    with pytest.raises(diffing.OverBudget):
        diffing.BoundedMatcher(["x"] * 100, ["x"] * 1000, work=50_000).get_matching_blocks()


def test_the_api_and_the_admin_compare_a_page_of_repeated_words_within_the_budget(
        conf_data_dir, admin_settings, client, monkeypatch):
    from django.contrib.auth.models import User
    org = Org.objects.create(slug="acme", name="Acme")
    a = kept(conf_data_dir, org, {URL: html(A_TEXT)})
    b = kept(conf_data_dir, org, {URL: html("r " + "x " * 500_000 + "s")})
    spent = []
    search = diffing.BoundedMatcher.find_longest_match
    monkeypatch.setattr(diffing.BoundedMatcher, "find_longest_match",
                        lambda self, *args: spent.append(args) or search(self, *args))
    diff = diffing.compare(a, b)
    assert spent == [] and 0 < diff.changed[0].similarity < 0.02
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    shown = client.get(f"/admin/crawls/crawl/{b.pk}/diff/", {"with": a.pk})
    assert shown.status_code == 200 and "1 changed" in " ".join(shown.content.decode().split())
    assert spent == []


def test_a_side_by_side_that_would_pair_every_line_with_every_other_is_shown_unpaired(
        conf_data_dir, monkeypatch):
    # Issue 36: 200 lines of five words rearranged took HtmlDiff 50 s (every changed line
    # scored against every other), 400 lines over 120 s.
    import random

    rng = random.Random(36)
    words = ["alpha", "beta", "gamma", "delta", "eps"]
    text = lambda: "\n".join(" ".join(rng.choices(words, k=12)) + "." for _ in range(400))  # noqa: E731
    org = Org.objects.create(slug="acme", name="Acme")
    a = kept(conf_data_dir, org, {URL: "<html><body><pre>" + text() + "</pre></body></html>"})
    b = kept(conf_data_dir, org, {URL: "<html><body><pre>" + text() + "</pre></body></html>"})
    scored = []
    monkeypatch.setattr(diffing.difflib.Differ, "_fancy_replace",
                        lambda self, *args: scored.append(args) or iter(()))
    table = diffing.text_diff_html(a, b, URL)
    assert scored == []  # no line pairing at all
    assert "Too many lines changed to pair them side by side" in table
    assert '<pre class="unified-diff">' in table and "\n+" in table and "\n-" in table

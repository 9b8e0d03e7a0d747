"""The admin as a person uses it, in a real headless Chromium (Debian's chromium and
chromium-driver, through Selenium), against the admin and the replay origin served by
gunicorn exactly as scripts/start.sh serves them (tests/admin/conftest.py), with a real daemon (local launcher) crawling a site on
127.0.0.1.

One journey: log in; a bad seed is refused with the CLI's words; a crawl is added with the
form; the list's progress changes without a reload; pause and resume from the crawl's
buttons; the list shows it complete, still without a reload; the crawl's page; each WACZ
downloaded in the browser matches its recorded sha256 (and answers a Range request); Replay
frames the replay origin, whose player shows the archived seed page (and a page below it)
and reads every WACZ there in ranges; delete removes the crawl and its files.
A second test replays a crawl of two WACZ files (the multi-WACZ package) built here with
warcio, and finds each archived page's text inside ReplayWeb.page's frame. Screenshots of
each step go to test-artifacts/admin-browser/<test>/ (or $ARCHIVER_TEST_ARTIFACTS).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from archiver.replay_logging import SIGNATURE
from tests.admin.conftest import ROOT, log_in, wait_until
from tests.runner.helpers import slow_site

pytestmark = pytest.mark.slow

# Finds text in the archived page ReplayWeb.page shows: the frame it loads from its service
# worker's replay URL (.../w/<collection>/<timestamp>mp_/<url>), nested in same-origin
# iframes inside its components' shadow DOM. The player's own chrome (its URL bar, page
# titles) is not searched, and its "Archived Page Not Found" page never has the text.
FIND_TEXT_JS = """
const wanted = arguments[0];
function search(root, depth) {
  if (!root || depth > 10) return false;
  for (const el of root.querySelectorAll("*")) {
    if (el.shadowRoot && search(el.shadowRoot, depth + 1)) return true;
    if (el.tagName !== "IFRAME") continue;
    let doc = null;
    try { doc = el.contentDocument; } catch (e) { doc = null; }
    if (!doc) continue;
    if (/mp_\\//.test(doc.location.href) && doc.body && doc.body.innerText.includes(wanted)) return true;
    if (search(doc, depth + 1)) return true;
  }
  return false;
}
return search(document, 0);
"""

# Downloads a URL in the browser (with its session) and returns status, type and sha256.
FETCH_SHA256_JS = """
const [url, range, done] = [arguments[0], arguments[1], arguments[arguments.length - 1]];
const headers = range ? {Range: range} : {};
fetch(url, {credentials: "same-origin", headers})
  .then(async (response) => {
    const body = await response.arrayBuffer();
    const digest = await crypto.subtle.digest("SHA-256", body);
    const hex = Array.from(new Uint8Array(digest)).map((b) => b.toString(16).padStart(2, "0")).join("");
    done({status: response.status, type: response.headers.get("Content-Type"),
          range: response.headers.get("Content-Range"), length: body.byteLength, sha256: hex});
  })
  .catch((error) => done({error: String(error)}));
"""


def cli_refusal(installation, *args: str) -> str:
    result = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=installation.env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    return result.stderr.strip().removeprefix("CommandError: ")


def text_of(driver, css: str) -> str:
    """The element's text; "" while it is missing or the page is reloading under us."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        elements = driver.find_elements(By.CSS_SELECTOR, css)
        return elements[0].text if elements else ""
    except StaleElementReferenceException:
        return ""


def replayed_text_found(driver, text: str) -> bool:
    """Whether `text` is in the archived page of the admin's Replay frame (the replay
    origin's page: WebDriver enters a cross-origin frame, a script of the admin could not)."""
    from selenium.webdriver.common.by import By

    frames = driver.find_elements(By.CSS_SELECTOR, "iframe#replay")
    if frames:  # (before issue 21 the player was in the admin's page itself)
        driver.switch_to.frame(frames[0])
    try:
        return driver.execute_script(FIND_TEXT_JS, text)
    finally:
        driver.switch_to.default_content()


def wait_for_replayed_text(driver, shots, text: str, name: str) -> None:
    """Wait for `text` in the archived page ReplayWeb.page shows. A person reloads a player
    whose first load raced its service worker's start (seen on a loaded machine): so does
    this, once."""
    for attempt in range(2):
        try:
            wait_until(lambda: replayed_text_found(driver, text), 60,
                       f"{text!r} inside the replay frame", interval=1)
            break
        except AssertionError:
            shots.take(f"{name}-failed-{attempt}")
            if attempt:
                console = "\n".join(str(entry) for entry in driver.get_log("browser")[-30:])
                raise AssertionError(f"no {text!r} in the replay; browser console:\n{console}") from None
            driver.refresh()
    shots.take(name)


def press(driver, button: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, f".crawl-button-{button}").click()


def test_a_person_adds_watches_pauses_downloads_and_deletes_a_crawl_in_the_browser(
    installation, admin_url, browser, shots
):
    from selenium.webdriver.common.by import By

    driver = browser
    password = (installation.data_dir / "admin-password").read_text().strip()

    # Log in.
    driver.get(f"{admin_url}/admin/login/")
    driver.find_element(By.ID, "id_username").send_keys("admin")
    driver.find_element(By.ID, "id_password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait_until(lambda: "/admin/login/" not in driver.current_url, 60, "the log-in")
    shots.take("logged-in")

    with slow_site(pages=40, delay=0.5) as site:
        # A paused crawl with a 1,900-character seed shares the list: it must not widen it.
        long_seed = site.url.replace("127.0.0.1", "localhost") + "?q=" + "x" * 1900
        long_id = installation.manage("add", long_seed).strip()
        installation.manage("pause", long_id)
        installation.start_daemon()

        # A bad seed is refused with the CLI's message; nothing is queued.
        message = cli_refusal(installation, "add", "ftp://example.com/")
        driver.get(f"{admin_url}/admin/crawls/crawl/add/")
        driver.find_element(By.ID, "id_seeds").send_keys("ftp://example.com/")
        driver.find_element(By.CSS_SELECTOR, "input[name=_save]").click()
        wait_until(lambda: text_of(driver, ".errorlist") == message, 60,
                   f"the form's refusal {message!r}")
        shots.take("bad-seed-refused")
        assert installation.query("SELECT COUNT(*) FROM crawls_crawl") == [(1,)]  # the paused one

        # Add the crawl through the form, with a tag typed into the tag widget.
        seeds = driver.find_element(By.ID, "id_seeds")
        seeds.clear()
        seeds.send_keys(site.url)  # http://127.0.0.1:<port>/gen/: an IP host, a trailing slash
        tag_box = driver.find_element(By.CSS_SELECTOR, ".tags-typing")
        tag_box.send_keys("browser\n")
        assert "browser" in text_of(driver, ".tag-chip")
        shots.take("add-form")
        driver.find_element(By.CSS_SELECTOR, "input[name=_save]").click()
        wait_until(lambda: driver.current_url.endswith("/change/"), 60, "the new crawl's page")
        crawl_id = driver.current_url.rstrip("/").split("/")[-2]
        assert installation.query("SELECT tags FROM crawls_crawl WHERE id = ?", crawl_id) == [('["browser"]',)]

        # The list's progress changes without a reload.
        driver.get(f"{admin_url}/admin/crawls/crawl/")
        driver.execute_script("window.__sameList = true;")
        progress = f'[data-crawl="{crawl_id}"][data-field="progress"] .counts'
        first = text_of(driver, progress)
        wait_until(lambda: text_of(driver, progress) not in (first, "0/0", "0/1"), 60,
                   "the list's progress to change")
        assert driver.execute_script("return window.__sameList === true;")
        seed_cell = driver.find_element(By.CSS_SELECTOR, f'[title="{long_seed}"]')
        assert seed_cell.size["width"] < 300  # cut short, the whole URL on hover
        assert driver.execute_script(
            "const t = document.querySelector('#changelist .results');"
            "return t.scrollWidth <= t.clientWidth;"), "the list is wider than a 1,400 px window"
        shots.take("list-progress")

        # The crawl's page refreshes its newest pages in place; pause and resume from its buttons.
        driver.get(f"{admin_url}/admin/crawls/crawl/{crawl_id}/change/")
        driver.execute_script("window.__samePage = true;")
        newest = '[data-live-table="pages"] tbody tr:first-child'
        before = text_of(driver, newest)
        wait_until(lambda: text_of(driver, newest) not in (before, ""), 60, "the newest pages to refresh")
        assert driver.execute_script("return window.__samePage === true;")
        shots.take("detail-live")
        site.hold()  # the crawl cannot end before the pause reaches it, on however slow a machine
        press(driver, "pause")
        wait_until(lambda: installation.flag_raised(crawl_id, "paused"), 60, "the daemon asking to pause")
        site.release()
        state = f'[data-crawl="{crawl_id}"][data-field="state"]'
        wait_until(lambda: text_of(driver, state) == "paused", 60, "the crawl to be paused")
        shots.take("paused")
        press(driver, "resume")
        wait_until(lambda: text_of(driver, state) not in ("", "paused"), 60, "the crawl to resume")
        shots.take("resumed")

        # Back on the list, it completes without a reload.
        driver.get(f"{admin_url}/admin/crawls/crawl/")
        driver.execute_script("window.__sameList = true;")
        wait_until(lambda: text_of(driver, state) == "complete", 300, "the crawl to complete")
        assert driver.execute_script("return window.__sameList === true;")
        shots.take("list-complete")

    # The crawl's page, and each WACZ downloaded in the browser matches its record.
    driver.get(f"{admin_url}/admin/crawls/crawl/{crawl_id}/change/")
    shots.take("detail")
    links = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "a.download")]
    records = installation.query("SELECT sha256, size, path FROM crawls_crawlfile WHERE crawl_id = ? "
                                 "ORDER BY created_at", crawl_id)
    assert links and len(links) == len(records)
    for link, (sha256, size, _) in zip(links, records, strict=True):
        got = driver.execute_async_script(FETCH_SHA256_JS, link, None)
        assert got == {"status": 200, "type": "application/wacz", "range": None, "length": size,
                       "sha256": sha256}
        part = driver.execute_async_script(FETCH_SHA256_JS, link, "bytes=0-99")
        assert (part["status"], part["range"], part["length"]) == (206, f"bytes 0-99/{size}", 100)

    # Replay: the player reads the crawl's WACZ files (archiver's own crawler wrote them)
    # through their download URLs, in ranges, and shows the seed's archived page in its
    # frame; then a page below it, opened by URL.
    press(driver, "replay")
    access_log = installation.data_dir / "run" / "replay-access.log"
    paths = [link.split(f"/crawl/{crawl_id}", 1)[1] for link in links]  # /files/<pk>/<name>
    wait_for_replayed_text(driver, shots, "Page 0", "replay-seed")
    wait_until(lambda: all(f"{path} HTTP/1.1\" 206" in access_log.read_text() for path in paths),
               60, "the player's range requests (on the replay origin) for every WACZ", interval=1)
    replay_url = driver.current_url.split("?")[0]
    driver.get(f"{replay_url}?url={quote(site.url + 'p1.html')}")
    wait_for_replayed_text(driver, shots, "Page 1", "replay-p1")

    # Delete: the crawl and its files are gone.
    driver.get(f"{admin_url}/admin/crawls/crawl/{crawl_id}/change/")
    press(driver, "delete")
    driver.switch_to.alert.accept()
    wait_until(lambda: driver.current_url.endswith("/admin/crawls/crawl/"), 60, "the list after delete")
    shots.take("deleted")
    assert "Deleted crawl" in text_of(driver, ".messagelist")
    assert installation.query("SELECT COUNT(*) FROM crawls_crawl WHERE id = ?", crawl_id) == [(0,)]
    for _, _, path in records:
        assert not (installation.data_dir / path).exists()


# --- replay of several WACZ files ----------------------------------------------------------


def stored_wacz(path: Path, url: str, text: str, body: str | None = None) -> tuple[int, str]:
    """A one-page WACZ with every entry STORED (as ReplayWeb.page reads them by range),
    its page titled `text` (and, unless `body` is given, saying it); returns its size and
    sha256."""
    import datetime as dt
    import hashlib
    import io
    import json
    import zipfile

    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    warc = io.BytesIO()
    body = body or f"<!doctype html><html><head><title>{text}</title></head><body><h1>{text}</h1></body></html>"
    headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1")
    writer = WARCWriter(warc, gzip=True)
    payload = body.encode()  # with its length given, warcio needs no temporary file
    writer.write_record(writer.create_warc_record(url, "response", payload=io.BytesIO(payload),
                                                  length=len(payload), http_headers=headers))
    now = dt.datetime.now(dt.UTC)
    host_path = url.split("://", 1)[1]
    host, _, rest = host_path.partition("/")
    index = (f"{host}){'/' + rest} {now:%Y%m%d%H%M%S} " + json.dumps({
        "url": url, "mime": "text/html", "status": "200", "offset": "0",
        "length": str(len(warc.getvalue())), "filename": "data.warc.gz"}) + "\n")
    pages = (json.dumps({"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}) + "\n"
             + json.dumps({"url": url, "ts": now.isoformat().replace("+00:00", "Z"), "title": text}) + "\n")
    entries = {"archive/data.warc.gz": warc.getvalue(), "indexes/index.cdxj": index.encode(),
               "pages/pages.jsonl": pages.encode()}
    resources = [{"name": name.rsplit("/", 1)[1], "path": name, "bytes": len(data),
                  "hash": "sha256:" + hashlib.sha256(data).hexdigest()} for name, data in entries.items()]
    package = json.dumps({"profile": "data-package", "wacz_version": "1.1.1", "resources": resources,
                          "created": f"{now:%Y-%m-%dT%H:%M:%SZ}"}).encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as wacz:
        for name, data in {**entries, "datapackage.json": package}.items():
            wacz.writestr(name, data)
    data = path.read_bytes()
    return len(data), hashlib.sha256(data).hexdigest()


CREATE_CRAWL = """
from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlFile, Org
crawl = Crawl.create(Org.objects.get(slug="default"), CrawlConfig(seeds=[{seed!r}]))
Crawl.objects.filter(pk=crawl.pk).update(status="complete")
for path, size, sha256 in {files!r}:
    CrawlFile.objects.create(crawl=crawl, path=path.format(id=crawl.id), size=size, sha256=sha256)
print(crawl.id)
"""


def archived_crawl(installation, pages: list[tuple[str, str, str | None]]) -> str:
    """A complete crawl of one WACZ per page (url, title, HTML body or None), its files in
    the data dir's archives/; returns its id."""
    staging = installation.data_dir / "staging"
    staging.mkdir(exist_ok=True)
    files = []
    for n, (url, text, body) in enumerate(pages):
        size, sha256 = stored_wacz(staging / f"{n}.wacz", url, text, body)
        files.append((f"archives/{{id}}/session-{n}.wacz", size, sha256))
    crawl_id = installation.manage("shell", "--no-imports", "-c", CREATE_CRAWL.format(
        seed=pages[0][0], files=files)).strip().splitlines()[-1]
    (installation.data_dir / "archives" / crawl_id).mkdir(parents=True)
    for n in range(len(pages)):
        (staging / f"{n}.wacz").rename(installation.data_dir / "archives" / crawl_id / f"session-{n}.wacz")
    return crawl_id


def test_replay_shows_archived_pages_from_several_wacz_files(installation, admin_url, browser, shots):
    """Two WACZ files of one crawl replay together (the multi-WACZ package), each page's text
    found inside ReplayWeb.page's frame, loaded in ranges from the replay origin (never the admin's)."""
    driver = browser
    urls = {"http://localhost:9/one.html": "Archived page one", "http://localhost:9/two.html": "Archived page two"}
    crawl_id = archived_crawl(installation, [(url, text, None) for url, text in urls.items()])

    log_in(driver, admin_url, installation)
    for url, text in urls.items():
        driver.get(f"{admin_url}/admin/crawls/crawl/{crawl_id}/replay/?url={quote(url)}")
        wait_for_replayed_text(driver, shots, text, f"replay-{url.rsplit('/', 1)[1]}")
    replay_log = (installation.data_dir / "run" / "replay-access.log").read_text()
    assert "/replay.json HTTP/1.1\" 200" in replay_log
    assert '.wacz HTTP/1.1" 206' in replay_log
    assert not SIGNATURE.search(replay_log), "a capability in the replay's access log"
    admin_log = (installation.data_dir / "run" / "admin-access.log").read_text()
    assert ".wacz" not in admin_log and "sw.js" not in admin_log


def list_overflow(driver) -> dict:
    """How much wider than its box the crawl list is, and than the window the page is."""
    return driver.execute_script(
        "const t = document.querySelector('#changelist .results');"
        "return {list: t.scrollWidth - t.clientWidth,"
        "        page: document.documentElement.scrollWidth - window.innerWidth,"
        "        sidebar: document.querySelector('#main').classList.contains('shifted')};")


def crawl_list_with_sidebar(driver, admin_url: str, open_: bool) -> dict:
    driver.execute_script("localStorage.setItem('django.admin.navSidebarIsOpen', arguments[0]);",
                          "true" if open_ else "false")
    driver.get(f"{admin_url}/admin/crawls/crawl/")
    wait_until(lambda: driver.execute_script("return document.querySelectorAll('#result_list tbody tr').length") == 4,
               20, "the list of 4 crawls")
    return list_overflow(driver)


def test_the_widest_crawl_list_fits_1400_px_with_the_sidebar_closed_and_scrolls_in_its_box_with_it_open(
        installation, admin_url, browser, shots):
    long_seed = "http://localhost:9/?q=" + "x" * 1900
    installation.manage("pause", installation.manage("add", long_seed).strip())
    for status, intent in (("running", "pause"), ("stopped_quota_reached", ""), ("failed", "")):
        crawl_id = installation.manage("add", long_seed.replace("?q=", "a/")).strip()
        installation.query(  # the widest a row gets: long states and reasons, big numbers
            "UPDATE crawls_crawl SET status = ?, intent = ?, pages_done = 123456, pages_found = 234567,"
            " pages_failed = 12345, size_bytes = 987654321098, elapsed_seconds = 987654,"
            " error = ?, stop_reason = ? WHERE id = ?", status, intent,
            "every crawler instance failed (no page succeeded): " + "y" * 400,
            "storage_quota" if status.startswith("stopped") else "", crawl_id)
    log_in(browser, admin_url, installation)

    closed = crawl_list_with_sidebar(browser, admin_url, open_=False)
    shots.take("list-sidebar-closed")
    assert not closed["sidebar"] and closed["list"] <= 0 and closed["page"] <= 0, closed

    opened = crawl_list_with_sidebar(browser, admin_url, open_=True)
    shots.take("list-sidebar-open")
    assert opened["sidebar"] and opened["page"] <= 0, opened  # the list scrolls, not the page

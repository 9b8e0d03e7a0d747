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
A second test replays a crawl of two WACZ files (the multi-WACZ package) built with warcio
(tests/admin/browsing.py), and finds each archived page's text inside ReplayWeb.page's frame.
Screenshots of each step go to test-artifacts/admin-browser/<test>/ (or $ARCHIVER_TEST_ARTIFACTS).
"""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import quote

import pytest

from archiver.replay_logging import SIGNATURE
from tests.admin.browsing import archived_crawl, log_in, wait_for_replayed_text, wait_until
from tests.installation import ROOT
from tests.runner.helpers import slow_site

pytestmark = pytest.mark.slow


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
        wait_until(lambda: text_of(driver, state) == "done", 300, "the crawl to complete")
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

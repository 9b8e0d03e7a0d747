"""What the admin's browser tests share: waiting, logging in, and crawls of WACZ files built
here whose pages are then looked for inside ReplayWeb.page's frame."""

from __future__ import annotations

from pathlib import Path

from tests.waiting import wait_for


def wait_until(condition, timeout: float, what: str, interval: float = 0.25):
    return wait_for(condition, timeout, interval, what)


def log_in(driver, admin_url: str, installation) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{admin_url}/admin/login/")
    driver.find_element(By.ID, "id_username").send_keys("admin")
    driver.find_element(By.ID, "id_password").send_keys(
        (installation.data_dir / "admin-password").read_text().strip())
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait_until(lambda: "/admin/login/" not in driver.current_url, 60, "the log-in")


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
    """Wait for `text` in the archived page ReplayWeb.page shows, on its first load: no
    reload (the player starts once its service worker is active, crawls/static/crawls/
    replay-start.js)."""
    try:
        wait_until(lambda: replayed_text_found(driver, text), 60, f"{text!r} inside the replay frame", interval=1)
    except AssertionError:
        shots.take(f"{name}-failed")
        console = "\n".join(str(entry) for entry in driver.get_log("browser")[-30:])
        raise AssertionError(f"no {text!r} in the replay on its first load; browser console:\n{console}") from None
    shots.take(name)


def stored_wacz(path: Path, url: str, text: str, body: str | None = None, page_text: str = "") -> tuple[int, str]:
    """A one-page WACZ with every entry STORED (as ReplayWeb.page reads them by range),
    its page titled `text` (and, unless `body` is given, saying it), `page_text` its text in
    the page list (what search indexes); returns its size and sha256."""
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
             + json.dumps({"url": url, "ts": now.isoformat().replace("+00:00", "Z"), "title": text,
                           **({"text": page_text} if page_text else {})}) + "\n")
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


def archived_crawl(installation, pages: list[tuple]) -> str:
    """A complete crawl of one WACZ per page (url, title, HTML body or None, and optionally
    the page's text for search), its files in the data dir's archives/; returns its id."""
    staging = installation.data_dir / "staging"
    staging.mkdir(exist_ok=True)
    files = []
    for n, (url, text, body, *page_text) in enumerate(pages):
        size, sha256 = stored_wacz(staging / f"{n}.wacz", url, text, body, *page_text)
        files.append((f"archives/{{id}}/session-{n}.wacz", size, sha256))
    crawl_id = installation.manage("shell", "--no-imports", "-c", CREATE_CRAWL.format(
        seed=pages[0][0], files=files)).strip().splitlines()[-1]
    (installation.data_dir / "archives" / crawl_id).mkdir(parents=True)
    for n in range(len(pages)):
        (staging / f"{n}.wacz").rename(installation.data_dir / "archives" / crawl_id / f"session-{n}.wacz")
    return crawl_id

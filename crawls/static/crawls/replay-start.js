// Starts ReplayWeb.page only once its service worker is active. The player's frame
// (/replay/index.html) is served by that worker; ReplayWeb.page goes on as soon as the
// worker is *registered*, so on a first load its frame could be fetched before the worker
// ran, from the server, uncontrolled, and stayed blank. A frame created after activation
// is controlled from its first request. If the player still has not come up within 5 s,
// the page says why and offers to retry, instead of staying blank.
"use strict";
(function () {
  const WATCHDOG_MS = 5000;
  const holder = document.getElementById("player");
  const worker = "/replay/sw.js?serveIndex=1";  // the very URL ReplayWeb.page registers

  function fail(why) {
    const box = document.getElementById("replay-problem");
    box.querySelector(".why").textContent = why;
    box.hidden = false;
  }

  function activated(registration) {
    const current = registration.active || registration.waiting || registration.installing;
    if (registration.active && registration.active.state === "activated") {
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      current.addEventListener("statechange", () => {
        if (current.state === "activated") {
          resolve();
        }
      });
    });
  }

  function playerShown() {
    const player = holder.querySelector("replay-web-page");
    const frame = player && player.shadowRoot && player.shadowRoot.querySelector("iframe");
    try {
      return Boolean(frame && frame.contentWindow.navigator.serviceWorker.controller);
    } catch (error) {
      return false;
    }
  }

  function start() {
    const player = document.createElement("replay-web-page");
    for (const [name, value] of Object.entries(holder.dataset)) {
      player.setAttribute(name === "replaybase" ? "replayBase" : name, value);
    }
    player.style.display = "block";
    player.style.height = "100vh";
    holder.replaceChildren(player);
  }

  document.getElementById("replay-retry").addEventListener("click", () => window.location.reload());
  const timer = window.setTimeout(() => {
    if (!playerShown()) {
      fail("The replay did not start within 5 seconds (its service worker is not running yet).");
    }
  }, WATCHDOG_MS);
  if (!("serviceWorker" in navigator)) {
    window.clearTimeout(timer);
    fail("This browser cannot replay here: service workers need https:// or localhost, "
         + "and are off in private windows of some browsers.");
    return;
  }
  navigator.serviceWorker.register(worker, {scope: "/replay/"})
    .then(activated)
    .then(start)
    .catch((error) => {
      window.clearTimeout(timer);
      fail("The replay's service worker could not start: " + error);
    });
})();

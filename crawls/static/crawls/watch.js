// The watch page: each tab's newest frame from watch.json, every two seconds while open.
// Every value is set as text or as an image's data: URL the server checked to be a JPEG.
"use strict";
(function () {
  const PERIOD_MS = 2000;

  function figure(frame) {
    const fig = document.createElement("figure");
    const img = document.createElement("img");
    img.src = frame.src;
    img.alt = "what " + frame.tab + " shows";
    img.width = 640;
    img.height = 360;
    const caption = document.createElement("figcaption");
    const url = document.createElement("span");
    url.className = "cut";
    url.textContent = frame.url;
    url.title = frame.url;
    caption.append(frame.tab + ", " + frame.age + " s ago", url);
    fig.append(img, caption);
    return fig;
  }

  async function refresh(box, why) {
    let data;
    try {
      const response = await fetch(box.dataset.watchUrl, {credentials: "same-origin"});
      data = await response.json();
    } catch (error) {
      why.textContent = "The admin did not answer; trying again.";
      return true;
    }
    box.replaceChildren(...data.frames.map(figure));
    why.textContent = data.why;
    return !data.final;
  }

  document.addEventListener("DOMContentLoaded", () => {
    const box = document.querySelector(".crawl-watch");
    const why = document.querySelector(".crawl-watch-why");
    if (!box) {
      return;
    }
    const tick = async () => {
      if (await refresh(box, why)) {
        setTimeout(tick, PERIOD_MS);
      }
    };
    tick();
  });
})();

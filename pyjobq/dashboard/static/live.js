// Keeps the element with id "live" current: fetches its data-src every data-every seconds
// (while the page is visible) and swaps the answer in. Nothing else runs on the page.
"use strict";
(function () {
  const live = document.getElementById("live");
  if (!live) return;
  const every = Math.max(0.5, parseFloat(live.dataset.every || "2")) * 1000;
  async function refresh() {
    if (document.visibilityState === "visible") {
      try {
        const answer = await fetch(live.dataset.src, { headers: { accept: "text/html" } });
        if (answer.ok) {
          live.innerHTML = await answer.text();
          live.dataset.updated = String(Date.now());
        }
      } catch (e) {
        // The server is away: keep what is shown and try again at the next turn.
      }
    }
    setTimeout(refresh, every);
  }
  setTimeout(refresh, every);
})();

// Starts Python's worker right after the page's first frame (issue 14). build_site.py inlines this
// file into the page's head, right after the engine's configuration, as a classic script whose
// sha256 is in the page's Content-Security-Policy: the worker, Pyodide's files and the downloads start
// once the pre-rendered result is painted (so their compiles do not compete with the first paint on
// a machine of few cores), before the charting library, the form and main.js have run. The page's
// Engine (web/js/engine.js) takes this worker over with take(): the messages heard meanwhile (each
// with the time it arrived) and the pending answer of `boot` (id 0); if the first frame has not come
// yet (a tab in the background), take() starts the worker then.
(() => {
  let started = null;
  let taken = false;
  function start() {
    if (started || taken) return;
    try {
      const config = JSON.parse(document.getElementById("engine-config").textContent);
      const worker = new Worker(new URL("js/worker.js", document.baseURI), { type: "module" });
      const heard = [];
      const keep = (event) => heard.push({ data: event.data, at: performance.now() });
      const failed = (event) => heard.push({ error: event.message || "the engine failed", at: performance.now() });
      worker.addEventListener("message", keep);
      worker.addEventListener("error", failed);
      worker.postMessage({ id: 0, type: "boot", wheels: config.wheels, modules: config.python_modules, python: config.python });
      started = {
        worker,
        heard,
        detach() {
          worker.removeEventListener("message", keep);
          worker.removeEventListener("error", failed);
        },
      };
    } catch {
      // No early worker (no Worker support, or no configuration): the page's Engine starts its own.
    }
  }
  window.trainmemEarlyWorker = {
    take() {
      start();
      taken = true;
      return started;
    },
  };
  requestAnimationFrame(() => setTimeout(start, 0)); // after the first frame is painted
})();

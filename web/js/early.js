// Starts Python's worker at navigation (issue 14). build_site.py inlines this file into the page's
// head, right after the engine's configuration, as a classic script whose sha256 is in the page's
// Content-Security-Policy, so the worker, Pyodide's files and the downloads start while the HTML is
// still parsing, before the charting library, the form and the rest of the page's modules load.
// The page's Engine (web/js/engine.js) attaches to this worker when main.js runs: it takes the
// messages heard meanwhile (each with the time it arrived) and the pending answer of `boot` (id 0).
(() => {
  try {
    const config = JSON.parse(document.getElementById("engine-config").textContent);
    const worker = new Worker(new URL("js/worker.js", document.baseURI), { type: "module" });
    const heard = [];
    const keep = (event) => heard.push({ data: event.data, at: performance.now() });
    const failed = (event) => heard.push({ error: event.message || "the engine failed", at: performance.now() });
    worker.addEventListener("message", keep);
    worker.addEventListener("error", failed);
    worker.postMessage({ id: 0, type: "boot", wheels: config.wheels, modules: config.python_modules, python: config.python });
    window.trainmemEarlyWorker = {
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
})();

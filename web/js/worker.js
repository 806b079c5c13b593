// Module Web Worker: loads Pyodide, the pinned wheels (trainmem, pydantic, ...) and the page's
// Python modules (py/trainmem_web.py, the bridge), then answers compute requests. Everything is fetched
// from this site: the wheels by explicit URL, so no package index is ever consulted.

import { loadPyodide } from "../pyodide/pyodide.mjs";

let bridge = null;

function progress(stage, fraction, label) {
  self.postMessage({ type: "progress", stage, fraction, label });
}

async function boot({ wheels, modules }) {
  const started = performance.now();
  progress("runtime", 0.05, "Loading Python (Pyodide)…");
  const base = new URL("../", import.meta.url);
  const sources = Promise.all(
    modules.map(async (path) => {
      const response = await fetch(new URL(path, base));
      if (!response.ok) throw new Error(`cannot load ${path}: HTTP ${response.status}`);
      return [path.split("/").pop(), await response.text()];
    }),
  );
  // PYDANTIC_DISABLE_PLUGINS: pydantic otherwise scans every installed distribution's entry points
  // (importlib.metadata) when it builds its first model; the page has no pydantic plugin.
  const pyodide = await loadPyodide({
    indexURL: new URL("pyodide/", base).href,
    env: { PYDANTIC_DISABLE_PLUGINS: "__all__" },
    stdout: () => {},
    stderr: () => {},
  });
  progress("packages", 0.6, "Loading trainmem and pydantic…");
  const failures = [];
  await pyodide.loadPackage(
    wheels.map((name) => new URL(`wheels/${name}`, base).href),
    { messageCallback: () => {}, errorCallback: (message) => failures.push(message) },
  );
  progress("import", 0.8, "Importing trainmem…");
  for (const [name, source] of await sources) pyodide.FS.writeFile(`/home/pyodide/${name}`, source);
  try {
    bridge = pyodide.pyimport("trainmem_web");
  } catch (error) {
    // loadPackage reports failures without throwing: the import is the real check.
    throw new Error(`cannot import trainmem in Pyodide: ${failures.join("; ") || error.message}`);
  }
  progress("ready", 1, "Ready");
  return { seconds: (performance.now() - started) / 1000, failures };
}

const handlers = {
  boot,
  compute: ({ setupJson, suggestions, reserveFraction }) => bridge.compute(setupJson, suggestions, reserveFraction ?? undefined), // undefined is None (null is jsnull)
  architecture: ({ modelJson }) => bridge.architecture(modelJson),
  modelInputs: ({ modelJson }) => bridge.model_inputs(modelJson),
  markdown: ({ reportJson, title }) => bridge.markdown(reportJson, title),
  compareMarkdown: ({ aJson, bJson, aLabel, bLabel }) => bridge.compare_markdown(aJson, bJson, aLabel, bLabel),
  readFiles: ({ filesJson, formJson }) => bridge.read_files(filesJson, formJson),
  writeFile: ({ setupJson, format }) => bridge.write_file(setupJson, format),
};

self.addEventListener("message", async (event) => {
  const { id, type, ...payload } = event.data;
  try {
    const result = await handlers[type](payload);
    self.postMessage({ id, result });
  } catch (error) {
    self.postMessage({ id, error: String(error && error.message ? error.message : error) });
  }
});

// Loaded as an async module at the top of index.html: starts Pyodide's worker while the rest
// of the page (the charting library, the form) is still loading. main.js takes the engine over.

import { Engine } from "./engine.js";

const config = JSON.parse(document.getElementById("engine-config").textContent);

export const engine = new Engine({
  workerUrl: new URL("./worker.js", import.meta.url),
  wheels: config.wheels,
  modules: config.python_modules,
  python: config.python,
});
engine.start();

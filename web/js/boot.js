// The page's engine, imported by main.js (and by tests). Its first start takes over the worker that
// the page's head started after the first frame (web/js/early.js, inlined by build_site.py).

import { Engine } from "./engine.js";

const config = JSON.parse(document.getElementById("engine-config").textContent);

export const engine = new Engine({
  workerUrl: new URL("./worker.js", import.meta.url),
  wheels: config.wheels,
  modules: config.python_modules,
  python: config.python,
});
engine.start();

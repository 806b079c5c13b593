// The compact embed (embed.html#<setup>): a result sized for an iframe in a blog post.
//
// It shows, without loading Python: the build-time result when the link holds the default
// setup, or the result snapshot the "Embed this" button put in the link (`_r=`). Pyodide
// loads only when the reader changes a value; then every number comes from the engine.

import { drawCapacity, followColorScheme } from "./charts.js";
import { Engine } from "./engine.js";
import { el } from "./dom.js";
import { renderSummary, summarize } from "./results.js";
import { decodeSnapshot } from "./share.js";
import { applyCouplings } from "./hints.js";
import { decodeHash, deepEqual, encodeHash, flatten, minimalSetup, overlay, setPath } from "./setup.js";
import { describeSetup, setProgress } from "./status.js";
import { CATEGORIES } from "./format.js";

const data = JSON.parse(document.getElementById("app-data").textContent);
const schema = data.schema;
const pageDefault = overlay(data.core_defaults, data.default_setup, schema);
const resultsNode = document.getElementById("results");
const controls = document.getElementById("embed-controls");
const formError = document.querySelector('[data-testid="form-error"]');

const { setup: partial, extra } = decodeHash(location.hash);
let setup = partial
  ? applyCouplings(overlay(data.core_defaults, partial, schema), flatten(partial, schema).map(([path]) => path))
  : pageDefault;
let summary = null;

function minimal(full) {
  return minimalSetup(full, data.core_defaults, schema);
}

/** A snapshot from a link is untrusted: accept it only with the exact shape of a summary. */
function validSummary(value) {
  const isCount = (n) => Number.isSafeInteger(n) && n >= 0;
  const fit = value && value.fit;
  return Boolean(
    value &&
      isCount(value.peak_total_bytes) &&
      isCount(value.peak_allocated_bytes) &&
      isCount(value.num_parameters) &&
      isCount(value.num_trainable_parameters) &&
      value.breakdown &&
      CATEGORIES.every((c) => isCount(value.breakdown[c])) &&
      fit &&
      ["fits", "tight", "does_not_fit"].includes(fit.status) &&
      typeof fit.message === "string" &&
      typeof fit.gpu_display_name === "string" &&
      isCount(fit.capacity_bytes) &&
      isCount(fit.usable_bytes) &&
      typeof fit.headroom_fraction === "number",
  );
}

function show(next, origin) {
  summary = next;
  renderSummary(resultsNode, next, describeSetup(setup, data.catalogs));
  resultsNode.dataset.origin = origin;
  resultsNode.classList.remove("stale");
  drawCapacity(resultsNode.querySelector('canvas[data-chart="capacity"]'), next, { legend: false });
}

function showPlaceholder() {
  const doc = document;
  resultsNode.replaceChildren(
    el(doc, "h1", { class: "embed-title", text: describeSetup(setup, data.catalogs) }),
    el(doc, "p", { class: "muted", text: "This setup has not been computed yet." }),
    el(doc, "button", { type: "button", class: "primary", "data-action": "compute", text: "Compute in the browser" }),
  );
}

// ---------------------------------------------------------------------------- first paint

if (deepEqual(minimal(setup), minimal(pageDefault))) {
  show(data.default_summary, "build");
} else {
  const snapshot = extra.r ? decodeSnapshot(extra.r) : null;
  if (validSummary(snapshot)) show(snapshot, "link");
  else showPlaceholder();
}

const gpuSelect = controls.querySelector('[name="gpu"]');
for (const gpu of data.catalogs.gpus) gpuSelect.append(el(document, "option", { value: gpu.name, text: gpu.display_name }));
if (typeof setup.gpu === "object") gpuSelect.prepend(el(document, "option", { value: "@custom", text: `${setup.gpu.memory_gib} GiB GPU` }));

function fillControls() {
  controls.elements.micro_batch_size.value = String(setup.micro_batch_size);
  controls.elements["parallelism.num_gpus"].value = String(setup.parallelism.num_gpus);
  gpuSelect.value = typeof setup.gpu === "object" ? "@custom" : setup.gpu;
}
fillControls();

function updateLinks() {
  document.getElementById("open-full").href = `index.html#${encodeHash(minimal(setup), schema)}`;
}
updateLinks();
followColorScheme(() => summary && drawCapacity(resultsNode.querySelector('canvas[data-chart="capacity"]'), summary, { legend: false }));

// ---------------------------------------------------------------------------- on interaction

const engine = new Engine({
  workerUrl: new URL("./worker.js", import.meta.url),
  wheels: data.wheels,
  modules: data.python_modules,
  python: data.python,
  onProgress: (message) => setProgress(message.fraction, message.label),
});

function readControls() {
  const next = JSON.parse(JSON.stringify(setup));
  const number = (input) => (input.value === "" ? "" : Number(input.value));
  next.micro_batch_size = number(controls.elements.micro_batch_size);
  setPath(next, "parallelism.num_gpus", number(controls.elements["parallelism.num_gpus"]));
  if (gpuSelect.value !== "@custom") next.gpu = gpuSelect.value;
  return next;
}

function showErrors(errors) {
  for (const node of document.querySelectorAll(".embed-controls .error")) {
    node.hidden = true;
    node.textContent = "";
  }
  const general = [];
  for (const { path, message } of errors) {
    const node = document.querySelector(`[data-testid="error-${CSS.escape(path)}"]`);
    if (node) {
      node.hidden = false;
      node.textContent = message;
    } else general.push(path ? `${path}: ${message}` : message);
  }
  formError.hidden = !general.length;
  formError.textContent = general.join(" ");
}

async function recompute() {
  resultsNode.classList.add("stale");
  const asked = minimal(setup);
  const answer = await engine.compute(asked, { suggestions: false }); // the embed shows none
  if (answer.superseded) return;
  document.documentElement.dataset.computedSetup = JSON.stringify(asked);
  document.documentElement.dataset.engine = "ready";
  if (answer.ok) {
    showErrors([]);
    show(summarize(answer.report), "engine");
  } else {
    showErrors(answer.errors);
  }
  setProgress(1, "Computed in your browser.");
}

function interact() {
  setup = readControls();
  updateLinks();
  if (!engine.started) document.documentElement.dataset.engine = "loading";
  recompute().catch((error) => {
    document.documentElement.dataset.engine = "failed";
    setProgress(null, `The Python engine could not start (${error.message}).`);
  });
}

controls.addEventListener("input", (event) => {
  if (event.target.tagName !== "SELECT") interact();
});
controls.addEventListener("change", (event) => {
  if (event.target.tagName === "SELECT") interact();
});
resultsNode.addEventListener("click", (event) => {
  if (event.target.closest('[data-action="compute"]')) interact();
});

// The calculator page: the form, the results, sharing. Pyodide starts loading at once in a
// Web Worker; until it is ready the build-time result of the default setup is on screen.

import { drawCapacity, drawTimeline, followColorScheme } from "./charts.js";
import { engine } from "./boot.js";
import { SetupForm, invalidJsonErrors } from "./form.js";
import { renderReport, summarize } from "./results.js";
import { cliCommand, copyText, embedSnippet, encodeSnapshot, pythonSnippet } from "./share.js";
import { applyCouplings } from "./hints.js";
import { decodeHash, deepEqual, encodeHash, flatten, minimalSetup, overlay } from "./setup.js";
import { setProgress, describeSetup } from "./status.js";

performance.mark("trainmem:main-start");
const data = JSON.parse(document.getElementById("app-data").textContent);
const schema = data.schema;
const pageDefault = overlay(data.core_defaults, data.default_setup, schema);

// ---------------------------------------------------------------------------- engine

// boot.js (an async module in the page's head) started the worker before this module ran.
engine.onProgress = (message) => setProgress(message.fraction, message.label);

const resultsNode = document.getElementById("results");
const setupJsonNode = document.querySelector('[data-testid="setup-json"]');
const notice = document.getElementById("results-notice");

let report = null; // the report whose numbers are on screen
let suggestions = []; // the suggestions on screen (the last report computed with them)
let engineReady = false;
const SUGGESTIONS_DELAY_MS = 150; // ask for suggestions once the reader pauses
let setup = setupFromHash() || pageDefault;

function setupFromHash() {
  const { setup: partial } = decodeHash(location.hash);
  if (!partial) return null;
  return applyCouplings(overlay(data.core_defaults, partial, schema), flatten(partial, schema).map(([path]) => path));
}

function minimal(full) {
  return minimalSetup(full, data.core_defaults, schema);
}

// ---------------------------------------------------------------------------- results

function showReport(next, { suggestionsPending = false } = {}) {
  report = next;
  if (!suggestionsPending) suggestions = next.suggestions;
  form.lastReport = next;
  renderReport(resultsNode, next, { catalogs: data.catalogs, suggestionsPending });
  drawCharts();
  setStale(null);
}

function drawCharts() {
  if (!report) return;
  drawCapacity(resultsNode.querySelector('canvas[data-chart="capacity"]'), summarize(report));
  drawTimeline(resultsNode.querySelector('canvas[data-chart="timeline"]'), report);
}

/** Mark the results as not (yet) those of the form's setup, with a reason; null clears. */
function setStale(reason) {
  resultsNode.classList.toggle("stale", Boolean(reason));
  resultsNode.setAttribute("aria-busy", reason === "computing" ? "true" : "false");
  notice.hidden = !reason;
  notice.textContent =
    reason === "computing"
      ? "Computing this setup in your browser…"
      : reason === "invalid"
        ? "The setup has an error (see the form): showing the last valid result."
        : reason || "";
}

let computeStarted = 0;
let suggestionsTimer = null;

async function addSuggestions(asked) {
  const current = () => deepEqual(asked, minimal(setup));
  if (!engine.idle || !current()) return; // a newer change is being computed
  const answer = await engine.compute(asked);
  if (answer.superseded || !answer.ok || !current()) return;
  showReport(answer.report);
  document.documentElement.dataset.suggestedSetup = JSON.stringify(asked);
}

async function recompute(asked = minimal(setup)) {
  const jsonErrors = invalidJsonErrors(setup);
  if (jsonErrors.length) {
    form.showErrors(jsonErrors);
    setStale("invalid");
    return;
  }
  if (!engineReady) {
    setStale("computing");
    return; // the first answer of the engine will compute the form's setup
  }
  clearTimeout(suggestionsTimer);
  computeStarted = performance.now();
  // The numbers first; the suggestions (each a re-run of the simulation) when the reader pauses.
  const answer = await engine.compute(asked, { suggestions: false });
  if (answer.superseded) return;
  const answered = performance.now();
  if (answer.ok) {
    form.clearErrors();
    showReport(answer.report, { suggestionsPending: true });
    suggestionsTimer = setTimeout(() => addSuggestions(asked), SUGGESTIONS_DELAY_MS);
    // Where a recompute's time goes (read by benchmarks/bench_site.py).
    const rendered = performance.now();
    document.documentElement.dataset.lastEngineMs = (answered - computeStarted).toFixed(1);
    document.documentElement.dataset.lastRenderMs = (rendered - answered).toFixed(1);
  } else {
    form.showErrors(answer.errors);
    setStale("invalid");
  }
  // Which setup the page now shows the engine's answer for (tests and benchmarks wait on it).
  document.documentElement.dataset.computedSetup = JSON.stringify(asked);
}

// ---------------------------------------------------------------------------- setup state

function setupChanged(next) {
  setup = next;
  const small = minimal(setup);
  setupJsonNode.textContent = JSON.stringify(small, null, 2);
  const hash = encodeHash(small, schema);
  if (location.hash.slice(1) !== hash) history.replaceState(null, "", `#${hash}`);
  document.title = `${describeSetup(setup, data.catalogs)} — trainmem`;
  recompute(small);
}

const form = new SetupForm(document.getElementById("setup-form"), {
  schema,
  catalogs: data.catalogs,
  defaults: setup,
  onChange: setupChanged,
  requestArchitecture: (model) => engine.architecture(model),
});
form.build();
form.setSetup(setup);
setupJsonNode.textContent = JSON.stringify(minimal(setup), null, 2);

if (deepEqual(minimal(setup), minimal(pageDefault))) {
  showReport(data.default_report); // the build-time result: same numbers, now with charts
} else {
  setStale("computing");
}

window.addEventListener("hashchange", () => {
  const next = setupFromHash();
  if (!next || deepEqual(minimal(next), minimal(setup))) return;
  form.setSetup(next);
  setupChanged(form.getSetup());
});

resultsNode.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-suggestion]");
  if (!button || !report) return;
  const suggestion = suggestions[Number(button.dataset.suggestion)];
  if (!suggestion) return;
  const next = overlay(setup, suggestion.setup_patch, schema);
  form.setSetup(next);
  setupChanged(form.getSetup());
});

// A config.json dropped anywhere on the page becomes the model.
document.addEventListener("dragover", (event) => {
  if ([...event.dataTransfer.types].includes("Files")) event.preventDefault();
});
document.addEventListener("drop", (event) => {
  const file = event.dataTransfer.files[0];
  if (!file) return;
  event.preventDefault();
  form.loadConfigFile(file);
});

followColorScheme(drawCharts);

// ---------------------------------------------------------------------------- sharing

const shareOutput = document.querySelector('[data-testid="share-output"]');
const shareStatus = document.getElementById("share-status");

function shareText(kind) {
  const small = minimal(setup);
  const hash = encodeHash(small, schema);
  switch (kind) {
    case "link":
      return new URL(`#${hash}`, location.href).href;
    case "command":
      return cliCommand(small, setup, schema);
    case "python":
      return pythonSnippet(small);
    case "json":
      return report ? JSON.stringify(report, null, 2) : "";
    case "embed": {
      const extra = report ? { r: encodeSnapshot(summarize(report)) } : {};
      const url = new URL(`embed.html#${encodeHash(small, schema, extra)}`, location.href).href;
      return embedSnippet(url, `trainmem: ${describeSetup(setup, data.catalogs)}`);
    }
    default:
      return "";
  }
}

const SHARE_LABELS = { link: "Link", command: "Command", python: "Python snippet", json: "JSON report", embed: "Embed snippet" };

document.querySelector(".share-buttons").addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-share]");
  if (!button) return;
  const kind = button.dataset.share;
  const text = shareText(kind);
  shareOutput.value = text;
  shareOutput.hidden = false;
  const copied = await copyText(text, shareOutput);
  shareStatus.textContent = copied ? `${SHARE_LABELS[kind]} copied to the clipboard.` : `Press Ctrl+C to copy the ${SHARE_LABELS[kind].toLowerCase()}.`;
});

// ---------------------------------------------------------------------------- start

engine
  .start()
  .then(() => {
    engineReady = true;
    return recompute();
  })
  .then(() => {
    document.documentElement.dataset.engine = "ready";
    performance.mark("trainmem:interactive");
    setProgress(1, "Python engine ready: every change recomputes in your browser.");
  })
  .catch((error) => {
    document.documentElement.dataset.engine = "failed";
    setProgress(null, `The Python engine could not start (${error.message}). The result shown was computed when this page was built.`);
  });

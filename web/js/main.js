// The calculator page: the form, the results, sharing. Pyodide starts loading at once in a
// Web Worker; until it is ready the build-time result of the default setup is on screen.

import { chartColors, chartPng, drawCapacity, drawCategoryPairs, drawTimeline, drawTimelineOverlay, followColorScheme } from "./charts.js";
import { capacitySvg, timelineSvg } from "./svg.js";
import { compareReports, renderComparison } from "./compare.js";
import { engine } from "./boot.js";
import { SetupForm, invalidJsonErrors } from "./form.js";
import { renderReport, summarize } from "./results.js";
import { cliCommand, copyText, embedSnippet, encodeSnapshot, pythonSnippet } from "./share.js";
import { applyCouplings } from "./hints.js";
import { decodeHash, deepEqual, encodeHash, flatten, minimalSetup, overlay } from "./setup.js";
import { setProgress, describeSetup } from "./status.js";
import { TrainerFiles } from "./files.js";
import { neighbourSetups } from "./prefetch.js";

performance.mark("trainmem:main-start");
const data = JSON.parse(document.getElementById("app-data").textContent);
const schema = data.schema;
const pageDefault = overlay(data.core_defaults, data.default_setup, schema);

// ---------------------------------------------------------------------------- engine

// The worker started with the page (web/js/early.js, inlined in the head); boot.js's engine took it over.
engine.onProgress = (message) => {
  const restarted = engine.restarts > 0; // only after a cancelled request, so after the first boot
  if (restarted && message.stage === "ready") setProgress(1, "Python engine restarted after a cancelled computation: ready.");
  else setProgress(message.fraction, restarted ? `Restarting the Python engine: ${message.label}` : message.label);
};

const resultsNode = document.getElementById("results");
const setupJsonNode = document.querySelector('[data-testid="setup-json"]');
const notice = document.getElementById("results-notice");

let report = null; // the report whose numbers are on screen
let lastReplayed = data.default_report; // the last report whose allocator was replayed (its reserve scales the fast answers)
let suggestions = []; // the suggestions on screen (the last report computed with them)
let engineReady = false;
const SUGGESTIONS_DELAY_MS = 150; // ask for suggestions once the reader pauses
let setup = setupFromHash() || pageDefault;
let shownSetup = null; // the minimal setup `report` was computed for
// Compare mode: the pinned setup A ({setup: minimal, report | null until computed}), or null.
let pinned = pinnedFromHash();

function fullSetup(partial) {
  return applyCouplings(overlay(data.core_defaults, partial, schema), flatten(partial, schema).map(([path]) => path));
}

function setupFromHash() {
  const { setup: partial } = decodeHash(location.hash);
  return partial ? fullSetup(partial) : null;
}

/** A pinned setup travels in the address as `_a=<A's own hash, encoded>`. */
function pinnedFromHash() {
  const { extra } = decodeHash(location.hash);
  if (!extra.a) return null;
  const { setup: partial } = decodeHash(extra.a);
  return partial ? { setup: minimal(fullSetup(partial)), report: null } : null;
}

function pageHash(small) {
  return encodeHash(small, schema, pinned ? { a: encodeHash(pinned.setup, schema) } : {});
}

function minimal(full) {
  return minimalSetup(full, data.core_defaults, schema);
}

// ---------------------------------------------------------------------------- results

/**
 * The fraction of the allocated peak that the caching allocator reserved on top in a replayed
 * report (what the suggestions scale their trial estimates by), or null when nothing was replayed.
 */
function reserveFraction(replayed) {
  const top = replayed?.ranks?.[replayed.heaviest_rank];
  if (!top?.cuda?.replayed || !(top.peak_allocated_bytes > 0)) return null;
  return Math.min(4, Math.max(0, (top.peak_reserved_bytes - top.peak_allocated_bytes) / top.peak_allocated_bytes));
}

/** True when no rank's numbers wait on a replay of the allocator (replayed, or not a CUDA setup). */
function isReplayed(answer) {
  return answer.ranks.every((rank) => !rank.cuda || rank.cuda.replayed);
}

function showReport(next, { suggestionsPending = false, computedFor = minimal(setup), cudaPending = false } = {}) {
  // Until the replay answers, the reserve (and so the total and the verdict) is scaled from the last one.
  resultsNode.dataset.cuda = cudaPending ? "pending" : "replayed";
  if (!cudaPending && reserveFraction(next) !== null) lastReplayed = next;
  report = next;
  shownSetup = computedFor;
  if (!suggestionsPending) suggestions = next.suggestions;
  form.lastReport = next;
  renderReport(resultsNode, next, { catalogs: data.catalogs, suggestionsPending });
  showComparison();
  scheduleCharts();
  setStale(null);
}

// The numbers go into the DOM at once; the charts follow in the next animation frame, drawn from
// whatever report is on screen then (a fast answer and its replayed one in the same frame: one draw).
let chartsFrame = 0;

function scheduleCharts() {
  if (chartsFrame) return;
  if (typeof requestAnimationFrame !== "function") return drawCharts();
  chartsFrame = requestAnimationFrame(() => {
    chartsFrame = 0;
    const started = performance.now();
    drawCharts();
    // The drawing work of the last frame that drew (read by benchmarks/bench_site.py).
    const drawn = performance.now();
    document.documentElement.dataset.lastChartsMs = (drawn - started).toFixed(1);
    document.documentElement.dataset.lastChartsAt = drawn.toFixed(1);
  });
}

/** Draw a pending frame's charts now (a picture is about to be taken of them). */
function flushCharts() {
  if (!chartsFrame) return;
  cancelAnimationFrame(chartsFrame);
  chartsFrame = 0;
  drawCharts();
}

function drawCharts() {
  if (!report) return;
  drawCapacity(resultsNode.querySelector('canvas[data-chart="capacity"]'), summarize(report));
  drawTimeline(resultsNode.querySelector('canvas[data-chart="timeline"]'), report);
  if (pinned?.report && !compareNode.hidden) {
    drawCategoryPairs(compareNode.querySelector('canvas[data-chart="compare-categories"]'), pinned.report, report);
    drawTimelineOverlay(compareNode.querySelector('canvas[data-chart="compare-timeline"]'), pinned.report, report);
  }
}

// ---------------------------------------------------------------------------- compare mode

const compareNode = document.getElementById("compare");
const pinButton = document.getElementById("compare-pin");
const unpinButton = document.getElementById("compare-unpin");
const compareMarkdownButton = document.querySelector('[data-testid="download-compare-markdown"]');

/** Render A against B when both reports are known (B: the report on screen). */
function showComparison() {
  pinButton.textContent = pinned ? "Pin this setup as A instead" : "Pin as A to compare";
  unpinButton.hidden = !pinned;
  compareMarkdownButton.hidden = !pinned;
  compareNode.hidden = !pinned;
  if (!pinned) return;
  if (!pinned.report || !report) {
    compareNode.replaceChildren(Object.assign(document.createElement("p"), { className: "muted", textContent: "Computing the pinned setup A…" }));
    return;
  }
  const cmp = compareReports(pinned.report, report);
  renderComparison(compareNode, cmp, {
    aTitle: describeSetup(overlay(data.core_defaults, pinned.setup, schema), data.catalogs),
    bTitle: describeSetup(overlay(data.core_defaults, shownSetup, schema), data.catalogs),
  });
  // Which two setups are compared on screen (tests wait on it).
  document.documentElement.dataset.comparedSetups = JSON.stringify([pinned.setup, shownSetup]);
}

/** The pinned setup's report: the build-time one, the one on screen, or computed by the engine. */
async function resolvePinned() {
  if (!pinned || pinned.report) return;
  const wanted = pinned;
  if (deepEqual(wanted.setup, minimal(pageDefault))) wanted.report = data.default_report;
  else if (report && deepEqual(wanted.setup, shownSetup)) wanted.report = report;
  else if (engineReady) {
    const answer = await engine.computeOnce(wanted.setup);
    if (answer.ok) wanted.report = answer.report;
    else {
      if (pinned === wanted) pinned = null;
      notice.hidden = false;
      notice.textContent = `The pinned setup A has an error (${answer.errors[0]?.message}): not comparing.`;
      writeHash();
    }
  }
  if (pinned === wanted) {
    showComparison();
    drawCharts();
  }
}

function writeHash() {
  const hash = pageHash(minimal(setup));
  if (location.hash.slice(1) !== hash) history.replaceState(null, "", `#${hash}`);
}

pinButton.addEventListener("click", () => {
  if (!report) return;
  pinned = { setup: shownSetup, report };
  writeHash();
  showComparison();
  drawCharts();
});

unpinButton.addEventListener("click", () => {
  pinned = null;
  delete document.documentElement.dataset.comparedSetups;
  writeHash();
  showComparison();
});

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
  if (answer.cancelled && current() && report) {
    // The numbers are on screen; only the suggestions (each a re-estimate) ran too long.
    renderReport(resultsNode, report, { catalogs: data.catalogs, suggestionsCancelled: answer.errors[0].message });
    drawCharts();
    return;
  }
  if (answer.superseded || !answer.ok || !current()) return;
  showReport(answer.report, { computedFor: asked });
  // The reader has paused: the setups one control step away (web/js/prefetch.js), computed while
  // nothing else waits (a reader who types on is never kept waiting by a prefetch).
  engine.prefetch(neighbourSetups(setup).map(minimal));
  document.documentElement.dataset.prefetchRemaining = String(engine.prefetchQueue.length + (engine.prefetching ? 1 : 0));
  document.documentElement.dataset.suggestedSetup = JSON.stringify(asked);
}

let lastAsk = 0; // each recompute's number: an answer to an older one is not shown
// How many neighbouring setups are still to prefetch (read by benchmarks/bench_site.py and the tests).
engine.onPrefetched = (remaining) => {
  document.documentElement.dataset.prefetchRemaining = String(remaining);
};

async function recompute(asked = minimal(setup)) {
  // A later change supersedes this one even when it never reaches the engine (text that is not
  // JSON is refused here): an answer still in flight must not overwrite that change's messages.
  const ask = ++lastAsk;
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
  // The numbers first, with the allocator's reserve scaled from the last replay (the replay is
  // most of an estimate's time); then the replayed numbers; the suggestions (each a re-run of the
  // simulation) when the reader pauses.
  // A setup the engine prefetched (or computed lately) is answered at once: no fast answer first.
  const prefetched = engine.hasAnswer(asked);
  const fraction = prefetched ? null : reserveFraction(lastReplayed);
  const fast = await engine.compute(asked, { suggestions: false, reserveFraction: fraction });
  if (fast.superseded || ask !== lastAsk) return;
  // The replayed answer is asked for before the fast one is drawn (the request reaches the worker
  // in this task's microtasks, the drawing waits for the next task): the worker replays while this
  // thread renders the first numbers, instead of after.
  const replayed = fast.ok && !isReplayed(fast.report) ? engine.compute(asked, { suggestions: false }) : null;
  if (replayed) await new Promise((resolve) => setTimeout(resolve, 0));
  if (ask !== lastAsk) return;
  if (replayed) {
    form.clearErrors();
    showReport(fast.report, { suggestionsPending: true, computedFor: asked, cudaPending: true });
    const shown = performance.now();
    document.documentElement.dataset.lastFastMs = (shown - computeStarted).toFixed(1);
    document.documentElement.dataset.fastSetup = JSON.stringify(asked);
  }
  const answer = replayed ? await replayed : fast;
  if (answer.superseded || ask !== lastAsk) return;
  const answered = performance.now();
  if (answer.ok) {
    form.clearErrors();
    showReport(answer.report, { suggestionsPending: true, computedFor: asked });
    suggestionsTimer = setTimeout(() => addSuggestions(asked), SUGGESTIONS_DELAY_MS);
    // Where a recompute's time goes (read by benchmarks/bench_site.py).
    const rendered = performance.now();
    document.documentElement.dataset.lastEngineMs = (answered - computeStarted).toFixed(1);
    document.documentElement.dataset.lastRenderMs = (rendered - answered).toFixed(1);
    document.documentElement.dataset.lastPrefetched = String(prefetched);
  } else if (answer.cancelled) {
    form.showErrors(answer.errors);
    setStale(answer.errors[0].message);
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
  const hash = pageHash(small);
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
  requestModelInputs: (model) => engine.modelInputs(model),
  modelInputs: deepEqual(setup.model, pageDefault.model) ? data.default_model_inputs : null,
});
form.build();
form.setSetup(setup);
setupJsonNode.textContent = JSON.stringify(minimal(setup), null, 2);

if (deepEqual(minimal(setup), minimal(pageDefault))) {
  showReport(data.default_report); // the build-time result: same numbers, now with charts
} else {
  showComparison();
  setStale("computing");
}
resolvePinned();

window.addEventListener("hashchange", () => {
  const next = setupFromHash();
  const nextPinned = pinnedFromHash();
  if (!deepEqual(nextPinned?.setup, pinned?.setup)) {
    pinned = nextPinned;
    showComparison();
    resolvePinned();
  }
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

// Trainer files (and a model config.json) dropped anywhere on the page, picked or pasted: the core
// reads them, the form shows the setup they describe, the key report what was read (web/js/files.js).
const trainerFiles = new TrainerFiles(document.getElementById("trainer-files"), {
  engine,
  formSetup: () => form.getSetup(),
  onRead(answer) {
    const paths = flatten(answer.setup, schema).map(([path]) => path);
    const base = answer.mode === "run" ? data.core_defaults : form.getSetup();
    const next = applyCouplings(overlay(base, answer.setup, schema), paths);
    form.setSetup(next);
    setupChanged(form.getSetup());
  },
});
document.addEventListener("dragover", (event) => {
  if ([...event.dataTransfer.types].includes("Files")) event.preventDefault();
});
document.addEventListener("drop", (event) => {
  const files = [...event.dataTransfer.files];
  if (!files.length) return;
  event.preventDefault();
  trainerFiles.add(files);
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
      return new URL(`#${pageHash(small)}`, location.href).href;
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

// ---------------------------------------------------------------------------- phone drawer
// Below 880 px the results come first and the form is a bottom drawer: the verdict and the
// headline numbers stay in view above it while a value changes.

const layout = document.querySelector(".layout");
const drawerToggle = document.getElementById("drawer-toggle");
const drawerClose = document.getElementById("drawer-close");

function setDrawer(open) {
  layout.classList.toggle("drawer-open", open);
  drawerToggle.setAttribute("aria-expanded", String(open));
  if (open) document.getElementById("setup-form").querySelector("select, input, textarea, button")?.focus();
  else drawerToggle.focus();
}

drawerToggle.addEventListener("click", () => setDrawer(true));
drawerClose.addEventListener("click", () => setDrawer(false));
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && layout.classList.contains("drawer-open")) setDrawer(false);
});

// ---------------------------------------------------------------------------- downloads

/** Save a Blob as a file (an <a download> of an object URL: nothing leaves the page). */
function saveFile(blob, name) {
  const url = URL.createObjectURL(blob);
  const link = Object.assign(document.createElement("a"), { href: url, download: name });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

function fileStem() {
  const small = minimal(setup);
  const words = [small.model.preset || "custom-model", `mbs${setup.micro_batch_size}`, `seq${setup.sequence_length}`];
  return `trainmem-${words.join("-")}`.replace(/[^A-Za-z0-9._-]+/g, "-");
}

async function downloadFile(kind) {
  if (!report) return null;
  const title = describeSetup(overlay(data.core_defaults, shownSetup, schema), data.catalogs);
  flushCharts();
  switch (kind) {
    case "capacity.png":
      return chartPng(resultsNode.querySelector('canvas[data-chart="capacity"]'));
    case "timeline.png":
      return chartPng(resultsNode.querySelector('canvas[data-chart="timeline"]'));
    case "capacity.svg":
      return new Blob([capacitySvg(summarize(report), chartColors())], { type: "image/svg+xml" });
    case "timeline.svg":
      return new Blob([timelineSvg(report, chartColors())], { type: "image/svg+xml" });
    case "report.md":
      return new Blob([await engine.markdown(report, `trainmem: ${title}`)], { type: "text/markdown" });
    case "compare.md": {
      if (!pinned?.report) return null;
      const aTitle = describeSetup(overlay(data.core_defaults, pinned.setup, schema), data.catalogs);
      return new Blob([await engine.compareMarkdown(pinned.report, report, aTitle, title)], { type: "text/markdown" });
    }
    default:
      return null;
  }
}

/** The setup on screen as a trainer's file (the core's writers, trainmem.inputs.writers). */
async function downloadTrainerFile(format) {
  if (!engineReady) shareStatus.textContent = "Waiting for the Python engine to write the file…";
  const answer = await engine.writeFile(minimal(setup), format);
  if (!answer.ok) {
    shareStatus.textContent = `Cannot write the file: ${answer.errors.map((e) => (e.path ? `${e.path}: ${e.message}` : e.message)).join(" ")}`;
    return;
  }
  saveFile(new Blob([answer.text], { type: format === "deepspeed" ? "application/json" : "application/yaml" }), answer.filename);
  shareStatus.textContent = `Saved ${answer.filename}.${answer.notes.length ? ` ${answer.notes.join(" ")}` : ""}`;
}

document.querySelector(".download-buttons").addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-download]");
  if (!button) return;
  const kind = button.dataset.download;
  if (!kind.includes(".")) return downloadTrainerFile(kind);
  const needsEngine = kind.endsWith(".md") && !engineReady;
  if (needsEngine) shareStatus.textContent = "Waiting for the Python engine to write the Markdown…";
  let blob;
  try {
    blob = await downloadFile(kind);
  } catch (error) {
    shareStatus.textContent = `Could not write the file: ${error.message}`;
    return;
  }
  if (!blob) {
    shareStatus.textContent = "Nothing to download yet: the charts are still loading.";
    return;
  }
  const name = `${fileStem()}-${kind.replace("capacity", "breakdown")}`;
  saveFile(blob, name);
  shareStatus.textContent = `Saved ${name}.`;
});

// ---------------------------------------------------------------------------- offline

/**
 * sw.js caches this build's files, so the next visit works without a network. Registered once
 * the engine is ready: its download (the same files, revalidated) never competes with the first load.
 */
function registerServiceWorker() {
  if (!("serviceWorker" in navigator) || location.protocol === "file:") return;
  // A new build's worker takes over while this (older) page is open: say so, do not reload under the reader.
  const hadController = Boolean(navigator.serviceWorker.controller);
  navigator.serviceWorker.addEventListener("controllerchange", () => {
    if (hadController) setProgress(1, "A new version of trainmem is ready: reload the page to use it.");
  });
  navigator.serviceWorker.register("sw.js").then(
    () => navigator.serviceWorker.ready.then(() => { document.documentElement.dataset.offline = "ready"; }),
    () => { document.documentElement.dataset.offline = "unavailable"; },
  );
}

// ---------------------------------------------------------------------------- start

let interactive = false;

/** The engine takes changes from now on (`trainmem:interactive` is read by benchmarks/bench_site.py). */
function markInteractive() {
  if (interactive) return;
  interactive = true;
  performance.mark("trainmem:interactive");
  setProgress(1, "Python engine ready: every change recomputes in your browser.");
}

engine
  .start()
  .then(() => {
    engineReady = true;
    // The build-time result of the default setup is already the answer on screen: the page takes
    // changes at once, and the engine's own answer for it (which also warms its first compute,
    // ~0.5 s in Pyodide) follows; a change meanwhile supersedes it.
    if (!pinned && deepEqual(minimal(setup), minimal(pageDefault))) markInteractive();
    return resolvePinned().then(() => recompute());
  })
  .then(() => {
    markInteractive();
    performance.mark("trainmem:first-answer");
    document.documentElement.dataset.engine = "ready"; // the engine's first answer is on screen (tests wait on it)
    registerServiceWorker();
  })
  .catch((error) => {
    document.documentElement.dataset.engine = "failed";
    setProgress(null, `The Python engine could not start (${error.message}). The result shown was computed when this page was built.`);
  });

// Renders a trainmem Report into the page with DOM APIs only (text never becomes markup).
//
// The same functions run at build time under Node (linkedom) to pre-render the default
// setup's result into the HTML, and in the browser for every recompute. Chart canvases are
// created once and kept; charts.js draws into them.

import { el } from "./dom.js";
import { CATEGORIES, CATEGORY_LABELS, STATUS_LABELS, formatBytes, formatCount, formatShare } from "./format.js";

/** A child section of the results, created on first use and kept afterwards. */
function part(container, name, tag = "section", attributes = {}) {
  let node = [...container.children].find((child) => child.getAttribute("data-part") === name);
  if (!node) {
    node = el(container.ownerDocument, tag, { "data-part": name, ...attributes });
    container.append(node);
  }
  return node;
}

/**
 * True when a section shows the same inputs as last time (it is then left as it is): a recompute
 * changes a few numbers, and rebuilding every table's rows each time is most of the DOM work.
 * The key is kept on the node, so a section pre-rendered into the HTML is rendered once more.
 */
function unchanged(node, inputs) {
  const key = JSON.stringify(inputs);
  if (node.trainmemInputs === key) return true;
  node.trainmemInputs = key;
  return false;
}

function bytesNode(doc, tag, bytes, testid, extra = {}) {
  return el(doc, tag, { "data-bytes": String(bytes), "data-testid": testid, ...extra, text: formatBytes(bytes) });
}

function gpuName(ctx, name) {
  const gpu = ctx.catalogs?.gpus?.find((item) => item.name === name);
  return gpu ? gpu.display_name : name;
}

/** The few figures the embed needs, taken from a Report (also what an embed link carries). */
export function summarize(report) {
  return {
    v: report.trainmem_version,
    peak_total_bytes: report.peak_total_bytes,
    peak_allocated_bytes: report.peak_allocated_bytes,
    peak_reserved_bytes: report.peak_reserved_bytes || 0,
    upper_bound_bytes: report.upper_bound_bytes || 0,
    breakdown: Object.fromEntries(CATEGORIES.map((category) => [category, report.breakdown[category]])),
    fit: {
      status: report.fit.status,
      message: report.fit.message,
      gpu_display_name: report.fit.gpu_display_name,
      capacity_bytes: report.fit.capacity_bytes,
      usable_bytes: report.fit.usable_bytes,
      headroom_fraction: report.fit.headroom_fraction,
    },
    num_parameters: report.num_parameters,
    num_trainable_parameters: report.num_trainable_parameters,
  };
}

// ---------------------------------------------------------------------------- summary

export function renderVerdict(container, summary) {
  const doc = container.ownerDocument;
  const verdict = part(container, "verdict", "div", { class: "verdict", role: "status" });
  verdict.setAttribute("data-testid", "fit-verdict");
  verdict.setAttribute("data-status", summary.fit.status);
  verdict.replaceChildren(
    el(doc, "span", { class: "verdict-badge", text: STATUS_LABELS[summary.fit.status] || summary.fit.status }),
    el(doc, "span", { class: "verdict-message", text: summary.fit.message }),
  );
}

export function renderHeadline(container, summary, peak) {
  const doc = container.ownerDocument;
  const headline = part(container, "headline", "dl", { class: "headline" });
  const fit = summary.fit;
  const items = [
    [
      "Peak per GPU",
      bytesNode(doc, "dd", summary.peak_total_bytes, "peak-total", { class: "big" }),
      `of ${formatBytes(fit.usable_bytes)} usable on ${fit.gpu_display_name} (${formatBytes(fit.capacity_bytes)}, ${Math.round(fit.headroom_fraction * 100)} % headroom)`,
    ],
    [
      "Tensors (allocated)",
      bytesNode(doc, "dd", summary.peak_allocated_bytes, "peak-allocated", { class: "big" }),
      "what torch.cuda.max_memory_allocated() reports",
    ],
  ];
  // CUDA: the caching allocator's replayed reserve, and the upper bound the verdict judges.
  const isCount = (n) => Number.isSafeInteger(n) && n > 0;
  if (isCount(summary.peak_reserved_bytes)) {
    items.push([
      "Reserved (allocator replay)",
      bytesNode(doc, "dd", summary.peak_reserved_bytes, "peak-reserved", { class: "big" }),
      "what torch.cuda.max_memory_reserved() would report: allocations replayed through PyTorch's caching allocator",
    ]);
  }
  if (isCount(summary.upper_bound_bytes)) {
    items.push([
      "Upper bound (the verdict's)",
      bytesNode(doc, "dd", summary.upper_bound_bytes, "upper-bound", { class: "big" }),
      "reserved + outside-allocator parts at their upper figures + margin",
    ]);
  }
  items.push(
    [
      "Parameters",
      el(doc, "dd", { class: "big", "data-testid": "num-parameters", text: formatCount(summary.num_parameters) }),
      `${formatCount(summary.num_trainable_parameters)} trainable`,
    ],
  );
  if (peak) items.push(["Peak happens at", el(doc, "dd", { class: "big small-text", text: peak.label }), peak.description]);
  headline.replaceChildren(
    ...items.map(([term, value, note]) =>
      el(doc, "div", { class: "figure" }, [el(doc, "dt", { text: term }), value, el(doc, "dd", { class: "note", text: note })]),
    ),
  );
}

/** A chart slot: a captioned canvas whose accessible name summarises what it shows. */
export function chartSlot(container, name, title, description) {
  const doc = container.ownerDocument;
  const figure = part(container, name, "figure", { class: `chart chart-${name}` });
  if (!figure.querySelector("canvas")) {
    figure.append(
      el(doc, "figcaption", {}, [el(doc, "span", { class: "chart-title", text: title }), el(doc, "span", { class: "chart-description" })]),
      el(doc, "div", { class: "canvas-box" }, [el(doc, "canvas", { role: "img", "data-chart": name })]),
    );
  }
  figure.querySelector(".chart-description").textContent = description;
  figure.querySelector("canvas").setAttribute("aria-label", `${title}. ${description}`);
  return figure;
}

export function renderCompactBreakdown(container, summary) {
  const doc = container.ownerDocument;
  const list = part(container, "compact-breakdown", "ul", { class: "compact-breakdown" });
  list.replaceChildren(
    ...CATEGORIES.map((category) =>
      el(doc, "li", {}, [
        el(doc, "span", { class: `swatch swatch-${category}`, "aria-hidden": "true" }),
        el(doc, "span", { class: "name", text: CATEGORY_LABELS[category] }),
        bytesNode(doc, "span", summary.breakdown[category], `breakdown-${category}`, { class: "num" }),
      ]),
    ),
  );
}

// ---------------------------------------------------------------------------- full report

/**
 * Render a whole Report into the results container. `ctx.catalogs` names the GPUs;
 * `ctx.suggestionsPending` says the report was computed without its suggestions.
 */
export function renderReport(container, report, ctx = {}) {
  const doc = container.ownerDocument;
  const summary = summarize(report);
  renderVerdict(container, summary);
  renderHeadline(container, summary, report.peak);
  chartSlot(
    container,
    "capacity",
    "Peak per GPU against capacity",
    `${formatBytes(report.peak_total_bytes)} at the peak; ${formatBytes(report.fit.usable_bytes)} usable of ${formatBytes(report.fit.capacity_bytes)}.`,
  );
  const timeline = report.ranks[report.heaviest_rank].timeline;
  chartSlot(
    container,
    "timeline",
    "Memory over one training step",
    `${timeline.labels.length} events from forward to zero_grad; the peak is at ${report.peak.label}.`,
  );
  renderBreakdownTable(container, report);
  renderFitsOn(container, report, ctx);
  renderHost(container, report);
  renderSuggestions(container, report, ctx.suggestionsPending, ctx.suggestionsCancelled);
  renderWarnings(container, report);
  renderRanks(container, report);
  renderResolved(container, report);
  container.setAttribute("data-peak-total", String(report.peak_total_bytes));
  return doc;
}

function renderBreakdownTable(container, report) {
  const doc = container.ownerDocument;
  // tabindex: the table can scroll sideways on a narrow screen, and a scrollable region must take the keyboard focus.
  const section = part(container, "breakdown", "section", { class: "card", "aria-labelledby": "breakdown-title", tabindex: "0" });
  if (unchanged(section, [report.breakdown, report.parts, report.peak_total_bytes])) return;
  const total = report.peak_total_bytes;
  const table = el(doc, "table", { class: "breakdown" }, [
    el(doc, "caption", { id: "breakdown-title", text: "Where the memory goes at the peak" }),
    el(doc, "thead", {}, [
      el(doc, "tr", {}, [
        el(doc, "th", { scope: "col", text: "Category and part" }),
        el(doc, "th", { scope: "col", class: "num", text: "Memory" }),
        el(doc, "th", { scope: "col", class: "num", text: "Share" }),
      ]),
    ]),
  ]);
  for (const category of CATEGORIES) {
    const bytes = report.breakdown[category];
    const body = el(doc, "tbody", { "data-category": category }, [
      el(doc, "tr", { class: "category-row" }, [
        el(doc, "th", { scope: "row" }, [
          el(doc, "span", { class: `swatch swatch-${category}`, "aria-hidden": "true" }),
          doc.createTextNode(CATEGORY_LABELS[category]),
        ]),
        bytesNode(doc, "td", bytes, `breakdown-${category}`, { class: "num" }),
        el(doc, "td", { class: "num", text: formatShare(bytes, total) }),
      ]),
    ]);
    for (const item of report.parts.filter((p) => p.category === category)) {
      const name = el(doc, "th", { scope: "row", class: "part" }, [el(doc, "span", { text: item.name })]);
      if (item.detail) name.append(el(doc, "span", { class: "detail", text: item.detail }));
      if (!item.allocated) name.append(el(doc, "span", { class: "tag", text: "outside the allocator" }));
      body.append(
        el(doc, "tr", { class: "part-row" }, [
          name,
          el(doc, "td", { class: "num", "data-bytes": String(item.bytes), text: formatBytes(item.bytes) }),
          el(doc, "td", { class: "num", text: formatShare(item.bytes, total) }),
        ]),
      );
    }
    table.append(body);
  }
  table.append(
    el(doc, "tfoot", {}, [
      el(doc, "tr", {}, [
        el(doc, "th", { scope: "row", text: "Total at the peak" }),
        el(doc, "td", { class: "num", "data-bytes": String(total), text: formatBytes(total) }),
        el(doc, "td", { class: "num", text: "100 %" }),
      ]),
    ]),
  );
  section.replaceChildren(table);
}

function renderFitsOn(container, report, ctx) {
  const doc = container.ownerDocument;
  const section = part(container, "fits-on", "section", { class: "card" });
  if (unchanged(section, [report.fits_on, report.fit.gpu])) return;
  const list = el(doc, "ul", { class: "chips", "data-testid": "fits-on" });
  for (const name of report.fits_on) {
    list.append(el(doc, "li", { class: name === report.fit.gpu ? "chip current" : "chip", "data-gpu": name, text: gpuName(ctx, name) }));
  }
  section.replaceChildren(
    el(doc, "h3", { text: "GPUs of the catalog it fits on" }),
    report.fits_on.length ? list : el(doc, "p", { class: "muted", text: "None of the catalog's GPUs holds this setup with its headroom." }),
  );
}

/**
 * Host (CPU) RAM per node (Report.host, trainmem.parallel.host): the training steady state (offloaded
 * states, pinned buffers, processes) and the model load, each with its parts, and the verdict against
 * parallelism.host_ram_gib_per_node when one is given.
 */
function renderHost(container, report) {
  const doc = container.ownerDocument;
  const section = part(container, "host", "section", { class: "card", "aria-labelledby": "host-title" });
  const host = report.host;
  if (unchanged(section, [host])) return;
  section.hidden = !host;
  if (!host) {
    section.replaceChildren();
    return;
  }
  const rows = [];
  for (const [title, parts, total, testid] of [
    ["During training", host.steady_parts, host.steady_bytes, "host-steady"],
    ["While the model loads", host.load_parts, host.load_bytes, "host-load"],
  ]) {
    rows.push(
      el(doc, "tr", { class: "category-row" }, [
        el(doc, "th", { scope: "row", text: title }),
        el(doc, "td", { class: "num", "data-bytes": String(total), "data-testid": testid, text: formatBytes(total) }),
      ]),
    );
    for (const item of parts) {
      rows.push(
        el(doc, "tr", { class: "part-row" }, [
          el(doc, "th", { scope: "row", class: "part" }, [el(doc, "span", { text: item.name }), item.detail ? el(doc, "span", { class: "muted detail", text: ` (${item.detail})` }) : null]),
          el(doc, "td", { class: "num", "data-bytes": String(item.bytes), text: formatBytes(item.bytes) }),
        ]),
      );
    }
  }
  if (host.nvme_bytes) {
    rows.push(
      el(doc, "tr", { class: "category-row" }, [
        el(doc, "th", { scope: "row", text: "NVMe (ZeRO-Infinity)" }),
        el(doc, "td", { class: "num", "data-bytes": String(host.nvme_bytes), "data-testid": "host-nvme", text: formatBytes(host.nvme_bytes) }),
      ]),
    );
  }
  const budget =
    host.budget_bytes === null || host.budget_bytes === undefined
      ? el(doc, "p", { class: "muted", text: "No host RAM budget given (parallelism.host_ram_gib_per_node)." })
      : el(doc, "p", {
          "data-testid": "host-verdict",
          "data-status": host.fits ? "fits" : "does_not_fit",
          text: `${host.fits ? "Fits" : "Does not fit"} in ${formatBytes(host.budget_bytes)} of host RAM per node.`,
        });
  section.replaceChildren(
    el(doc, "h3", { id: "host-title" }, [
      doc.createTextNode(`Host RAM per node (${host.ranks_per_node} ranks): `),
      bytesNode(doc, "span", host.peak_bytes, "host-peak"),
    ]),
    el(doc, "table", { class: "host-ram", "data-testid": "host-table" }, [
      el(doc, "caption", { class: "visually-hidden", text: "Host RAM per node, by phase and part" }),
      el(doc, "thead", {}, [
        el(doc, "tr", {}, [el(doc, "th", { scope: "col", text: "Part" }), el(doc, "th", { scope: "col", class: "num", text: "RAM" })]),
      ]),
      el(doc, "tbody", {}, rows),
    ]),
    budget,
    ...(host.message ? [el(doc, "p", { class: "muted", text: host.message })] : []),
  );
}

function renderSuggestions(container, report, pending = false, cancelled = "") {
  const doc = container.ownerDocument;
  const section = part(container, "suggestions", "section", { class: "card" });
  // A report computed without its suggestions: the previous ones stay, dimmed, until they come.
  section.classList.toggle("pending", pending);
  section.setAttribute("aria-busy", pending ? "true" : "false");
  if (pending) {
    // A cancellation's message belongs to the answer it was shown with: the new setup's
    // suggestions have not run yet, so it goes (earlier suggestions stay, dimmed).
    if (section.querySelector('[data-testid="suggestions-cancelled"]')) {
      section.replaceChildren();
      section.hidden = true;
    }
    return;
  }
  if (cancelled) {
    // Their computation ran past the engine's limit: say so where they would be.
    section.hidden = false;
    section.replaceChildren(el(doc, "h3", { text: "What to change" }), el(doc, "p", { class: "error", "data-testid": "suggestions-cancelled", text: cancelled }));
    return;
  }
  section.hidden = !report.suggestions.length;
  const list = el(doc, "ul", { class: "suggestions" });
  report.suggestions.forEach((suggestion, index) => {
    list.append(
      el(doc, "li", { class: suggestion.fits ? "suggestion fits" : "suggestion" }, [
        el(doc, "div", {}, [
          el(doc, "strong", { text: suggestion.title }),
          el(doc, "span", { class: "detail", text: suggestion.detail }),
        ]),
        el(doc, "span", {
          class: "num",
          "data-bytes": String(suggestion.peak_total_bytes),
          text: `${formatBytes(suggestion.peak_total_bytes)}${suggestion.fits ? " · fits" : ""}`,
        }),
        el(doc, "button", { type: "button", class: "apply", "data-suggestion": String(index), text: "Apply" }),
      ]),
    );
  });
  section.replaceChildren(el(doc, "h3", { text: "What to change" }), list);
}

function renderWarnings(container, report) {
  const doc = container.ownerDocument;
  const section = part(container, "warnings", "section", { class: "card warnings" });
  if (unchanged(section, [report.warnings])) return;
  section.hidden = !report.warnings.length;
  section.replaceChildren(
    el(doc, "h3", { text: "Notes" }),
    el(doc, "ul", {}, report.warnings.map((text) => el(doc, "li", { text }))),
  );
}

function renderRanks(container, report) {
  const doc = container.ownerDocument;
  const section = part(container, "ranks", "section", { class: "card" });
  if (unchanged(section, [report.heaviest_rank, report.ranks.map((rank) => [rank.name, rank.num_ranks, rank.peak_total_bytes])])) return;
  section.hidden = report.ranks.length < 2;
  const rows = report.ranks.map((rank, index) =>
    el(doc, "tr", { class: index === report.heaviest_rank ? "current" : null }, [
      el(doc, "th", { scope: "row", text: rank.name }),
      el(doc, "td", { class: "num", text: String(rank.num_ranks) }),
      el(doc, "td", { class: "num", "data-bytes": String(rank.peak_total_bytes), text: formatBytes(rank.peak_total_bytes) }),
    ]),
  );
  section.replaceChildren(
    el(doc, "table", { class: "ranks" }, [
      el(doc, "caption", { text: "Ranks (the heaviest is shown above)" }),
      el(doc, "thead", {}, [
        el(doc, "tr", {}, [
          el(doc, "th", { scope: "col", text: "Rank" }),
          el(doc, "th", { scope: "col", class: "num", text: "GPUs" }),
          el(doc, "th", { scope: "col", class: "num", text: "Peak" }),
        ]),
      ]),
      el(doc, "tbody", {}, rows),
    ]),
  );
}

function renderResolved(container, report) {
  const doc = container.ownerDocument;
  const section = part(container, "resolved", "section", { class: "card" });
  const r = report.resolved;
  if (unchanged(section, [r, report.trainmem_version])) return;
  const rows = [
    ["Model", r.model_description],
    ["Precision", `${r.precision_recipe}: ${r.precision_description}`],
    [
      "Bytes per parameter",
      `weights ${r.weight_bytes_per_parameter}, gradients ${r.gradient_bytes_per_parameter}, optimizer ${r.optimizer_bytes_per_parameter}`,
    ],
    ["Data parallel size", String(r.data_parallel_size)],
    ["Optimizer step", r.optimizer_implementation],
    ["Activations", `${r.activation_dtype}${r.attention_saves_scores ? ", attention scores saved" : ""}`],
    ["trainmem", report.trainmem_version],
  ];
  section.replaceChildren(
    el(doc, "h3", { text: "How trainmem read the setup" }),
    el(doc, "dl", { class: "resolved" }, rows.flatMap(([term, value]) => [el(doc, "dt", { text: term }), el(doc, "dd", { text: value })])),
  );
}

/** Render the compact view of the embed from a summary. */
export function renderSummary(container, summary, title) {
  const doc = container.ownerDocument;
  part(container, "title", "h1", { class: "embed-title" }).textContent = title; // the page's one heading
  renderVerdict(container, summary);
  renderHeadline(container, summary, null);
  chartSlot(
    container,
    "capacity",
    "Peak per GPU against capacity",
    `${formatBytes(summary.peak_total_bytes)} at the peak; ${formatBytes(summary.fit.usable_bytes)} usable of ${formatBytes(summary.fit.capacity_bytes)}.`,
  );
  renderCompactBreakdown(container, summary);
  return doc;
}

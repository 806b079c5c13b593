// Compare mode: a pinned report A against the report of the form's setup B.
//
// compareReports() mirrors core/trainmem/compare.py field for field (every delta is B − A,
// parts matched by category and name, a part on one side only counts 0 on the other), so the
// page shows exactly what `trainmem compare A.json B.json --json` prints; the browser tests
// check one against the other. renderComparison() writes it into the page with DOM APIs only.

import { el } from "./dom.js";
import { CATEGORIES, CATEGORY_LABELS, STATUS_LABELS, formatBytes } from "./format.js";

function delta(a, b) {
  return { a_bytes: a, b_bytes: b, delta_bytes: b - a };
}

/** Dotted paths to leaf values; a config.json (model.hf_config) stays whole, as in compare.py. */
function flattenValues(value, prefix = "", out = new Map()) {
  if (value === null || typeof value !== "object" || Array.isArray(value) || prefix === "model.hf_config") {
    out.set(prefix, value);
    return out;
  }
  for (const [key, item] of Object.entries(value)) flattenValues(item, prefix ? `${prefix}.${key}` : key, out);
  return out;
}

const same = (x, y) => JSON.stringify(x) === JSON.stringify(y);

export function setupChanges(a, b) {
  const flatA = flattenValues(a.setup);
  const flatB = flattenValues(b.setup);
  const paths = [...flatA.keys(), ...[...flatB.keys()].filter((path) => !flatA.has(path))];
  return paths
    .filter((path) => !same(flatA.get(path) ?? null, flatB.get(path) ?? null))
    .map((path) => ({ path, a: flatA.get(path) ?? null, b: flatB.get(path) ?? null }));
}

function partBytes(report) {
  const totals = new Map();
  for (const part of report.parts) {
    const key = JSON.stringify([part.category, part.name]);
    totals.set(key, (totals.get(key) || 0) + part.bytes);
  }
  return totals;
}

export function partDeltas(a, b) {
  const bytesA = partBytes(a);
  const bytesB = partBytes(b);
  const keys = [...bytesA.keys(), ...[...bytesB.keys()].filter((key) => !bytesA.has(key))];
  const order = (key) => CATEGORIES.indexOf(JSON.parse(key)[0]);
  keys.sort((x, y) => order(x) - order(y)); // stable: the order within a category stays
  return keys.map((key) => {
    const [category, name] = JSON.parse(key);
    return { category, name, ...delta(bytesA.get(key) || 0, bytesB.get(key) || 0) };
  });
}

function fitSide(report) {
  const fit = report.fit;
  return { gpu: fit.gpu, gpu_display_name: fit.gpu_display_name, usable_bytes: fit.usable_bytes, status: fit.status, message: fit.message };
}

/** Report B against report A: the same object as trainmem.compare.compare(a, b).model_dump(). */
export function compareReports(a, b, aLabel = "A", bLabel = "B") {
  return {
    a_label: aLabel,
    b_label: bLabel,
    setup_changes: setupChanges(a, b),
    peak_total: delta(a.peak_total_bytes, b.peak_total_bytes),
    peak_allocated: delta(a.peak_allocated_bytes, b.peak_allocated_bytes),
    num_trainable_parameters: delta(a.num_trainable_parameters, b.num_trainable_parameters),
    breakdown: Object.fromEntries(CATEGORIES.map((c) => [c, delta(a.breakdown[c], b.breakdown[c])])),
    parts: partDeltas(a, b),
    a_fit: fitSide(a),
    b_fit: fitSide(b),
    a_peak_label: a.peak.label,
    b_peak_label: b.peak.label,
    host_peak: a.host && b.host ? delta(a.host.peak_bytes, b.host.peak_bytes) : null,
  };
}

/** B − A with a sign and the relative change: "+1.50 GiB (+12.3 %)", "0" when equal. */
export function formatDelta(d) {
  if (d.delta_bytes === 0) return "0";
  const sign = d.delta_bytes > 0 ? "+" : "−";
  let text = `${sign}${formatBytes(Math.abs(d.delta_bytes))}`;
  if (d.a_bytes) text += ` (${sign}${(Math.abs(d.delta_bytes / d.a_bytes) * 100).toFixed(1)} %)`;
  return text;
}

function formatValue(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

function deltaClass(d) {
  return d.delta_bytes > 0 ? "num delta up" : d.delta_bytes < 0 ? "num delta down" : "num delta";
}

function bytesCell(doc, tag, d, attributes = {}) {
  return el(doc, tag, { ...attributes, class: "num", "data-bytes": String(d) , text: formatBytes(d) });
}

function deltaCell(doc, d, attributes = {}) {
  return el(doc, "td", { ...attributes, class: deltaClass(d), "data-bytes": String(d.delta_bytes), text: formatDelta(d) });
}

function sideFigure(doc, side, label, peak, fit, description) {
  return el(doc, "div", { class: `figure compare-side side-${side}`, "data-side": side }, [
    el(doc, "dt", {}, [el(doc, "span", { class: `side-mark side-mark-${side}`, text: side.toUpperCase() }), doc.createTextNode(` ${label}`)]),
    el(doc, "dd", { class: "big", "data-bytes": String(peak), "data-testid": `compare-peak-${side}`, text: formatBytes(peak) }),
    el(doc, "dd", { class: "note" }, [
      el(doc, "span", { class: "verdict-chip", "data-status": fit.status, "data-testid": `compare-fit-${side}`, text: STATUS_LABELS[fit.status] || fit.status }),
      doc.createTextNode(` ${description}`),
    ]),
  ]);
}

/**
 * The comparison in `container`: A and B peaks with their verdicts, what changed in the setup,
 * the two chart slots (categories as paired bars, timelines overlaid) and the table per part.
 */
export function renderComparison(container, cmp, { aTitle, bTitle }) {
  const doc = container.ownerDocument;
  const headline = el(doc, "dl", { class: "headline compare-headline" }, [
    sideFigure(doc, "a", "pinned", cmp.peak_total.a_bytes, cmp.a_fit, aTitle),
    sideFigure(doc, "b", "this setup", cmp.peak_total.b_bytes, cmp.b_fit, bTitle),
    el(doc, "div", { class: "figure" }, [
      el(doc, "dt", { text: "B − A, peak per GPU" }),
      el(doc, "dd", { class: `big ${deltaClass(cmp.peak_total)}`, "data-bytes": String(cmp.peak_total.delta_bytes), "data-testid": "compare-peak-delta", text: formatDelta(cmp.peak_total) }),
      el(doc, "dd", { class: "note", text: `allocated ${formatDelta(cmp.peak_allocated)}` }),
    ]),
  ]);
  const changes = cmp.setup_changes.length
    ? el(doc, "ul", { class: "setup-changes", "data-testid": "compare-changes" },
        cmp.setup_changes.map((change) => el(doc, "li", { "data-path": change.path }, [
          el(doc, "code", { text: change.path }),
          doc.createTextNode(`: ${formatValue(change.a)} → ${formatValue(change.b)}`),
        ])))
    : el(doc, "p", { class: "muted", "data-testid": "compare-changes", text: "Same setup as A: change a field of the form to compare." });

  const table = el(doc, "table", { class: "breakdown compare-table", "data-testid": "compare-table" }, [
    el(doc, "caption", { text: "Difference per part at the peak (B − A)" }),
    el(doc, "thead", {}, [el(doc, "tr", {}, [
      el(doc, "th", { scope: "col", text: "Category and part" }),
      el(doc, "th", { scope: "col", class: "num", text: "A" }),
      el(doc, "th", { scope: "col", class: "num", text: "B" }),
      el(doc, "th", { scope: "col", class: "num", text: "B − A" }),
    ])]),
  ]);
  for (const category of CATEGORIES) {
    const d = cmp.breakdown[category];
    const body = el(doc, "tbody", { "data-category": category }, [
      el(doc, "tr", { class: "category-row", "data-row": category }, [
        el(doc, "th", { scope: "row" }, [el(doc, "span", { class: `swatch swatch-${category}`, "aria-hidden": "true" }), doc.createTextNode(CATEGORY_LABELS[category])]),
        bytesCell(doc, "td", d.a_bytes),
        bytesCell(doc, "td", d.b_bytes),
        deltaCell(doc, d),
      ]),
    ]);
    for (const part of cmp.parts.filter((p) => p.category === category)) {
      body.append(el(doc, "tr", { class: "part-row", "data-row": `${category}/${part.name}` }, [
        el(doc, "th", { scope: "row", class: "part", text: part.name }),
        bytesCell(doc, "td", part.a_bytes),
        bytesCell(doc, "td", part.b_bytes),
        deltaCell(doc, part),
      ]));
    }
    table.append(body);
  }
  table.append(el(doc, "tfoot", {}, [el(doc, "tr", {}, [
    el(doc, "th", { scope: "row", text: "Total at the peak" }),
    bytesCell(doc, "td", cmp.peak_total.a_bytes),
    bytesCell(doc, "td", cmp.peak_total.b_bytes),
    deltaCell(doc, cmp.peak_total),
  ]), ...(cmp.host_peak ? [el(doc, "tr", { "data-testid": "compare-host" }, [
    el(doc, "th", { scope: "row", text: "Host RAM per node" }),
    bytesCell(doc, "td", cmp.host_peak.a_bytes),
    bytesCell(doc, "td", cmp.host_peak.b_bytes),
    deltaCell(doc, cmp.host_peak),
  ])] : [])]));

  const chart = (name, title, description) => el(doc, "figure", { class: `chart chart-${name}` }, [
    el(doc, "figcaption", {}, [el(doc, "span", { class: "chart-title", text: title }), el(doc, "span", { class: "chart-description", text: description })]),
    el(doc, "div", { class: "canvas-box" }, [el(doc, "canvas", { role: "img", "data-chart": name, "aria-label": `${title}. ${description}` })]),
  ]);
  const categoriesText = CATEGORIES.map((c) => `${CATEGORY_LABELS[c]} ${formatBytes(cmp.breakdown[c].a_bytes)} against ${formatBytes(cmp.breakdown[c].b_bytes)}`).join("; ");
  container.replaceChildren(
    el(doc, "h3", { id: "compare-title", text: "Compare: A (pinned) against B (this setup)" }),
    headline,
    changes,
    chart("compare-categories", "The five categories, A and B", `${categoriesText}. The table below has every number.`),
    chart("compare-timeline", "Both steps over time (allocated)", `A peaks at ${formatBytes(cmp.peak_allocated.a_bytes)} (${cmp.a_peak_label}), B at ${formatBytes(cmp.peak_allocated.b_bytes)} (${cmp.b_peak_label}).`),
    el(doc, "div", { class: "table-scroll" }, [table]),
  );
}

// The two charts as standalone SVG documents, for people to paste into an issue or a post.
//
// Chart.js draws on a canvas only, so the SVG pictures are drawn here from the same report
// data: the peak by category against the GPU's capacity, and the step's memory over time,
// stacked by category. Pure functions: report data and colours in, SVG text out. Every piece
// of text is escaped (a model name from a config.json is untrusted text).

import { CATEGORIES, CATEGORY_LABELS, formatBytes, toGiB } from "./format.js";

const FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif";

export function escapeXml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;" })[c]);
}

const n = (value) => (Math.round(value * 10) / 10).toString(); // coordinates to 0.1 px

function text(x, y, content, { size = 12, fill, anchor = "start", weight = "normal" } = {}) {
  return `<text x="${n(x)}" y="${n(y)}" font-size="${size}" fill="${fill}" text-anchor="${anchor}" font-weight="${weight}">${escapeXml(content)}</text>`;
}

function line(x1, y1, x2, y2, stroke, { width = 1, dash = "" } = {}) {
  return `<line x1="${n(x1)}" y1="${n(y1)}" x2="${n(x2)}" y2="${n(y2)}" stroke="${stroke}" stroke-width="${width}"${dash ? ` stroke-dasharray="${dash}"` : ""}/>`;
}

function document_(width, height, title, description, colors, body) {
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="${escapeXml(FONT)}" role="img" aria-labelledby="t d">`,
    `<title id="t">${escapeXml(title)}</title>`,
    `<desc id="d">${escapeXml(description)}</desc>`,
    `<rect width="100%" height="100%" fill="${colors.surface}"/>`,
    ...body,
    "</svg>",
    "",
  ].join("\n");
}

/** Swatches and names in rows that wrap before maxX; returns the SVG pieces and the last row's baseline. */
function legend(x, y, maxX, colors, values) {
  const parts = [];
  let at = x;
  let row = y;
  for (const category of CATEGORIES) {
    const label = values ? `${CATEGORY_LABELS[category]} ${formatBytes(values[category])}` : CATEGORY_LABELS[category];
    const width = 16 + label.length * 7.2; // a generous 12 px system-ui advance per character
    if (at > x && at + width > maxX) {
      at = x;
      row += 20;
    }
    parts.push(`<rect x="${n(at)}" y="${n(row - 10)}" width="11" height="11" rx="2" fill="${colors.categories[category]}"/>`);
    parts.push(text(at + 16, row, label, { fill: colors.text, size: 12 }));
    at += width + 14;
  }
  return { parts, bottom: row };
}

/** Niceish axis ticks: 0 and about five round steps up to max. */
function ticks(max) {
  const raw = max / 5;
  const power = 10 ** Math.floor(Math.log10(raw || 1));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => s >= raw) || raw;
  const out = [];
  for (let value = 0; value <= max + 1e-9; value += step) out.push(value);
  return out;
}

/** The peak per GPU by category, one stacked bar, with the usable and capacity lines. */
export function capacitySvg(summary, colors) {
  const width = 760;
  const left = 24;
  const right = width - 24;
  const fit = summary.fit;
  const scaleMax = Math.max(fit.capacity_bytes, summary.peak_total_bytes) * 1.04;
  const x = (bytes) => left + ((right - left) * bytes) / scaleMax;
  const title = `Peak per GPU: ${formatBytes(summary.peak_total_bytes)} of ${formatBytes(fit.usable_bytes)} usable on ${fit.gpu_display_name}`;
  const body = [text(left, 28, title, { size: 15, weight: "bold", fill: colors.text }), text(left, 48, fit.message, { size: 12, fill: colors.muted })];
  let at = 0;
  for (const category of CATEGORIES) {
    const bytes = summary.breakdown[category];
    if (bytes > 0) body.push(`<rect x="${n(x(at))}" y="74" width="${n(x(at + bytes) - x(at))}" height="40" fill="${colors.categories[category]}"><title>${escapeXml(`${CATEGORY_LABELS[category]}: ${formatBytes(bytes)}`)}</title></rect>`);
    at += bytes;
  }
  body.push(line(x(fit.usable_bytes), 64, x(fit.usable_bytes), 124, colors.warn, { width: 2, dash: "6 4" }));
  body.push(text(x(fit.usable_bytes), 138, `usable ${formatBytes(fit.usable_bytes)}`, { size: 11, fill: colors.text, anchor: "end" }));
  body.push(line(x(fit.capacity_bytes), 64, x(fit.capacity_bytes), 124, fit.status === "does_not_fit" ? colors.danger : colors.muted, { width: 2 }));
  body.push(text(x(fit.capacity_bytes), 60, `${formatBytes(fit.capacity_bytes)} on the GPU`, { size: 11, fill: colors.text, anchor: "end" }));
  const key = legend(left, 170, right, colors, summary.breakdown);
  body.push(...key.parts);
  const height = key.bottom + 16;
  return document_(width, height, title, CATEGORIES.map((c) => `${CATEGORY_LABELS[c]} ${formatBytes(summary.breakdown[c])}`).join("; "), colors, body);
}

/** Allocated memory over one step, stacked by category, with the peak and the usable line. */
export function timelineSvg(report, colors) {
  const timeline = report.ranks[report.heaviest_rank].timeline;
  const count = timeline.labels.length;
  const width = 900;
  const height = 400;
  const plot = { left: 70, right: width - 20, top: 56, bottom: height - 64 };
  const totals = timeline.labels.map((_, i) => CATEGORIES.reduce((sum, c) => sum + timeline[c][i], 0));
  const yMax = Math.max(...totals, report.fit.usable_bytes) * 1.05 || 1;
  const x = (i) => plot.left + ((plot.right - plot.left) * i) / Math.max(1, count - 1);
  const y = (bytes) => plot.bottom - ((plot.bottom - plot.top) * bytes) / yMax;
  const peakTotal = totals[timeline.peak_index];
  const title = `Memory over one training step: peak ${formatBytes(peakTotal)} allocated at ${report.peak.label}`;
  const body = [text(plot.left, 26, title, { size: 15, weight: "bold", fill: colors.text })];
  for (const value of ticks(toGiB(yMax))) {
    const at = y(value * 2 ** 30);
    body.push(line(plot.left, at, plot.right, at, colors.grid));
    body.push(text(plot.left - 8, at + 4, `${value.toFixed(value >= 100 || Number.isInteger(value) ? 0 : 1)} GiB`, { size: 11, fill: colors.muted, anchor: "end" }));
  }
  const below = new Array(count).fill(0);
  for (const category of CATEGORIES) {
    const above = below.map((value, i) => value + timeline[category][i]);
    if (above.some((value, i) => value !== below[i])) {
      const top = above.map((value, i) => `${n(x(i))},${n(y(value))}`);
      const bottom = below.map((value, i) => `${n(x(i))},${n(y(value))}`).reverse();
      body.push(`<polygon points="${[...top, ...bottom].join(" ")}" fill="${colors.categories[category]}" fill-opacity="0.85" stroke="${colors.categories[category]}" stroke-width="1"><title>${escapeXml(CATEGORY_LABELS[category])}</title></polygon>`);
    }
    above.forEach((value, i) => { below[i] = value; });
  }
  const usable = y(report.fit.usable_bytes);
  body.push(line(plot.left, usable, plot.right, usable, colors.warn, { width: 1.5, dash: "6 4" }));
  body.push(text(plot.left + 6, usable - 6, `usable on ${report.fit.gpu_display_name}: ${formatBytes(report.fit.usable_bytes)}`, { size: 11, fill: colors.text }));
  const peakX = x(timeline.peak_index);
  body.push(line(peakX, plot.top, peakX, plot.bottom, colors.danger, { width: 2 }));
  body.push(text(peakX + 6, plot.top + 12, `peak ${formatBytes(peakTotal)}`, { size: 11, fill: colors.danger, weight: "bold" }));
  body.push(line(plot.left, plot.bottom, plot.right, plot.bottom, colors.muted));
  body.push(text(plot.left, plot.bottom + 18, "start of the step", { size: 11, fill: colors.muted }));
  body.push(text(plot.right, plot.bottom + 18, "zero_grad", { size: 11, fill: colors.muted, anchor: "end" }));
  body.push(...legend(plot.left, height - 18, plot.right, colors, null).parts);
  const description = `${count} events from forward to zero_grad; peak ${formatBytes(peakTotal)} at ${report.peak.label}; usable ${formatBytes(report.fit.usable_bytes)}.`;
  return document_(width, height, title, description, colors, body);
}

// Charts with Chart.js and chartjs-plugin-annotation (self-hosted UMD builds: window.Chart).
// Colours come from the stylesheet's custom properties, so light and dark mode follow the system.

import { CATEGORIES, CATEGORY_LABELS, PHASE_LABELS, formatBytes, toGiB } from "./format.js";

const charts = new Map(); // canvas -> Chart

let cachedPalette = null; // [scheme, colours]: reading styles after a DOM change forces a style pass

function palette() {
  const scheme = window.matchMedia?.("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  if (cachedPalette && cachedPalette[0] === scheme) return cachedPalette[1];
  const colors = readPalette();
  cachedPalette = [scheme, colors];
  return colors;
}

function readPalette() {
  const style = getComputedStyle(document.documentElement);
  const read = (name) => style.getPropertyValue(name).trim();
  return {
    categories: Object.fromEntries(CATEGORIES.map((c) => [c, read(`--c-${c}`)])),
    text: read("--fg"),
    muted: read("--muted"),
    grid: read("--grid"),
    danger: read("--danger"),
    warn: read("--warn"),
    band: read("--band"),
    surface: read("--surface"),
  };
}

export function chartsAvailable() {
  return typeof window !== "undefined" && typeof window.Chart === "function";
}

function gib(value) {
  return `${value.toFixed(value >= 100 ? 0 : 1)} GiB`;
}

function baseOptions(colors) {
  return {
    responsive: true,
    maintainAspectRatio: false,
    animation: false,
    color: colors.text,
    font: { family: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif" },
    plugins: {
      legend: { labels: { color: colors.text, boxWidth: 12, boxHeight: 12 } },
      tooltip: {
        callbacks: {
          label: (item) => `${item.dataset.label}: ${formatBytes(item.raw * 2 ** 30)}`,
        },
      },
    },
  };
}

/**
 * Create the chart of a canvas once (again only when the colour scheme changes), then update
 * it in place: new data and annotations, the same options object, which keeps a recompute cheap.
 * `inputs` is what the picture is drawn from: when it is the same as last time (a replayed answer
 * that changed only the reserve leaves the timeline of allocated memory as it was), nothing is redrawn.
 */
function upsert(canvas, build, fill, inputs) {
  const colors = palette();
  const theme = JSON.stringify(colors);
  const key = inputs === undefined ? null : JSON.stringify(inputs);
  let chart = charts.get(canvas);
  if (chart && chart.$theme === theme && key !== null && chart.$inputs === key) return chart;
  if (!chart || chart.$theme !== theme) {
    if (chart) chart.destroy();
    chart = new window.Chart(canvas, build(colors));
    chart.$theme = theme;
    charts.set(canvas, chart);
  }
  fill(chart, colors);
  chart.update("none"); // no animation: the new numbers and the charts arrive together, at once
  chart.$inputs = key;
  return chart;
}

/** One stacked horizontal bar: the peak by category, against the GPU's capacity and headroom. */
export function drawCapacity(canvas, summary, { legend = true } = {}) {
  if (!chartsAvailable()) return;
  const build = (colors) => {
    const options = baseOptions(colors);
    Object.assign(options, {
      indexAxis: "y",
      scales: {
        x: { stacked: true, min: 0, ticks: { color: colors.muted, callback: (value) => gib(Number(value)) }, grid: { color: colors.grid } },
        y: { stacked: true, ticks: { display: false }, grid: { display: false } },
      },
    });
    options.plugins.legend.position = "bottom";
    options.plugins.legend.display = legend;
    options.plugins.annotation = { annotations: {} };
    return {
      type: "bar",
      data: {
        labels: ["Peak per GPU"],
        datasets: CATEGORIES.map((category) => ({
          label: CATEGORY_LABELS[category],
          data: [0],
          backgroundColor: colors.categories[category],
          borderWidth: 0,
          barPercentage: 0.55, // room above and below the bar for the capacity and headroom labels
          categoryPercentage: 1,
        })),
      },
      options,
    };
  };
  const fill = (chart, colors) => {
    const fit = summary.fit;
    const capacity = toGiB(fit.capacity_bytes);
    const usable = toGiB(fit.usable_bytes);
    const peak = toGiB(summary.peak_total_bytes);
    CATEGORIES.forEach((category, index) => {
      chart.data.datasets[index].data = [toGiB(summary.breakdown[category])];
    });
    chart.options.scales.x.max = Math.max(capacity, peak) * 1.04;
    const label = { display: true, backgroundColor: colors.surface, color: colors.text, font: { size: 11 } };
    chart.options.plugins.annotation.annotations = {
      usable: {
        type: "line",
        xMin: usable,
        xMax: usable,
        borderColor: colors.warn,
        borderWidth: 2,
        borderDash: [6, 4],
        label: { ...label, content: `usable ${gib(usable)}`, position: "end" },
      },
      capacity: {
        type: "line",
        xMin: capacity,
        xMax: capacity,
        borderColor: fit.status === "does_not_fit" ? colors.danger : colors.muted,
        borderWidth: 2,
        label: { ...label, content: `${gib(capacity)} on the GPU`, position: "start" },
      },
    };
  };
  upsert(canvas, build, fill, [legend, summary.fit, summary.peak_total_bytes, summary.breakdown]);
}

/** Memory over the step, stacked by category, phases shaded, the peak and the usable line marked. */
export function drawTimeline(canvas, report) {
  if (!chartsAvailable()) return;
  const timeline = report.ranks[report.heaviest_rank].timeline;
  const build = (colors) => {
    const options = baseOptions(colors);
    Object.assign(options, {
      interaction: { mode: "index", intersect: false },
      elements: { point: { radius: 0, hitRadius: 4 }, line: { borderWidth: 1, tension: 0 } },
      scales: {
        x: {
          ticks: { display: false }, // the shaded phases are named above the plot; the tooltip names each event
          grid: { display: false },
        },
        y: {
          stacked: true,
          min: 0,
          ticks: { color: colors.muted, callback: (value) => gib(Number(value)) },
          grid: { color: colors.grid },
          title: { display: true, text: "allocated memory", color: colors.muted },
        },
      },
    });
    options.plugins.legend.position = "bottom";
    options.plugins.annotation = { annotations: {} };
    options.plugins.tooltip.callbacks.footer = (items) =>
      `total ${formatBytes(items.reduce((sum, item) => sum + item.raw * 2 ** 30, 0))}`;
    return {
      type: "line",
      data: {
        labels: [],
        datasets: CATEGORIES.map((category, index) => ({
          label: CATEGORY_LABELS[category],
          data: [],
          borderColor: colors.categories[category],
          backgroundColor: colors.categories[category],
          fill: index === 0 ? "origin" : "-1",
          stack: "memory",
        })),
      },
      options,
    };
  };
  const fill = (chart, colors) => {
    chart.data.labels = timeline.labels.map((label, i) => (timeline.micro_batches[i] > 1 ? `${label} (later micro-batch)` : label));
    CATEGORIES.forEach((category, index) => {
      chart.data.datasets[index].data = timeline[category].map(toGiB);
    });
    chart.options.scales.y.suggestedMax = toGiB(report.fit.usable_bytes) * 1.05;
    chart.options.plugins.annotation.annotations = timelineAnnotations(timeline, report, colors);
  };
  upsert(canvas, build, fill, [timeline, report.fit.usable_bytes, report.fit.gpu_display_name]);
}

function timelineAnnotations(timeline, report, colors) {
  const count = timeline.labels.length;
  const annotations = {};
  // Shade each run of one phase, and name it once.
  let start = 0;
  for (let i = 1; i <= count; i += 1) {
    if (i === count || timeline.phases[i] !== timeline.phases[start] || timeline.micro_batches[i] !== timeline.micro_batches[start]) {
      const phase = timeline.phases[start];
      if (["forward", "backward", "optimizer", "generation", "reference"].includes(phase)) {
        annotations[`phase${start}`] = {
          type: "box",
          xMin: start - 0.5,
          xMax: i - 0.5,
          backgroundColor: phase === "backward" ? colors.band : "transparent",
          borderWidth: 0,
          drawTime: "beforeDatasetsDraw",
          label: {
            // A short phase is named only where the plot is wide enough for its name.
            display: ["optimizer", "generation", "reference"].includes(phase) ? (context) => context.chart.chartArea.width > 520 : i - start > 2,
            content: PHASE_LABELS[phase],
            position: { x: phase === "optimizer" ? "end" : "center", y: "start" },
            color: colors.muted,
            font: { size: 11, weight: "normal" },
          },
        };
      }
      start = i;
    }
  }
  const peakTotal = CATEGORIES.reduce((sum, c) => sum + timeline[c][timeline.peak_index], 0);
  annotations.peak = {
    type: "line",
    xMin: timeline.peak_index,
    xMax: timeline.peak_index,
    borderColor: colors.danger,
    borderWidth: 2,
    label: {
      display: true,
      content: `peak ${formatBytes(peakTotal)}`,
      position: "start",
      backgroundColor: colors.danger,
      color: "#fff",
      font: { size: 11 },
    },
  };
  annotations.usable = {
    type: "line",
    yMin: toGiB(report.fit.usable_bytes),
    yMax: toGiB(report.fit.usable_bytes),
    borderColor: colors.warn,
    borderWidth: 1.5,
    borderDash: [6, 4],
    label: {
      display: true,
      content: `usable on ${report.fit.gpu_display_name}`,
      position: "start",
      yAdjust: 14,
      backgroundColor: colors.surface,
      color: colors.text,
      font: { size: 11 },
    },
  };
  return annotations;
}

/** Compare mode: the five categories as paired bars, A (hatched lighter) next to B. */
export function drawCategoryPairs(canvas, a, b) {
  if (!chartsAvailable()) return;
  const build = (colors) => {
    const options = baseOptions(colors);
    Object.assign(options, {
      scales: {
        x: { ticks: { color: colors.muted }, grid: { display: false } },
        y: { min: 0, ticks: { color: colors.muted, callback: (value) => gib(Number(value)) }, grid: { color: colors.grid } },
      },
    });
    options.plugins.legend.position = "bottom";
    return {
      type: "bar",
      data: {
        labels: CATEGORIES.map((category) => CATEGORY_LABELS[category]),
        datasets: [
          { label: "A (pinned)", data: [], backgroundColor: [], borderColor: [], borderWidth: 2 },
          { label: "B (this setup)", data: [], backgroundColor: [], borderWidth: 0 },
        ],
      },
      options,
    };
  };
  const fill = (chart, colors) => {
    const [setA, setB] = chart.data.datasets;
    setA.data = CATEGORIES.map((category) => toGiB(a.breakdown[category]));
    setB.data = CATEGORIES.map((category) => toGiB(b.breakdown[category]));
    setA.backgroundColor = CATEGORIES.map(() => colors.surface); // A outlined, B filled
    setA.borderColor = CATEGORIES.map((category) => colors.categories[category]);
    setB.backgroundColor = CATEGORIES.map((category) => colors.categories[category]);
  };
  upsert(canvas, build, fill, [a.breakdown, b.breakdown]);
}

function totals(report) {
  const timeline = report.ranks[report.heaviest_rank].timeline;
  return timeline.labels.map((label, i) => ({
    label,
    total: CATEGORIES.reduce((sum, category) => sum + timeline[category][i], 0),
  }));
}

/** Compare mode: both steps' allocated memory, overlaid on a common 0–100 % of the step axis. */
export function drawTimelineOverlay(canvas, a, b) {
  if (!chartsAvailable()) return;
  const build = (colors) => {
    const options = baseOptions(colors);
    Object.assign(options, {
      interaction: { mode: "nearest", intersect: false, axis: "x" },
      elements: { point: { radius: 0, hitRadius: 4 }, line: { borderWidth: 2, tension: 0 } },
      scales: {
        x: { type: "linear", min: 0, max: 100, ticks: { color: colors.muted, callback: (value) => `${value} %` }, grid: { display: false },
             title: { display: true, text: "share of the step's events", color: colors.muted } },
        y: { min: 0, ticks: { color: colors.muted, callback: (value) => gib(Number(value)) }, grid: { color: colors.grid },
             title: { display: true, text: "allocated memory", color: colors.muted } },
      },
    });
    options.plugins.legend.position = "bottom";
    options.plugins.tooltip.callbacks.label = (item) => `${item.dataset.label}: ${item.raw.event}, ${formatBytes(item.raw.y * 2 ** 30)}`;
    return {
      type: "line",
      data: {
        datasets: [
          { label: "A (pinned)", data: [], borderColor: colors.muted, backgroundColor: colors.muted, borderDash: [6, 4] },
          { label: "B (this setup)", data: [], borderColor: colors.categories.parameters, backgroundColor: colors.categories.parameters },
        ],
      },
      options,
    };
  };
  const points = (report) => {
    const list = totals(report);
    const last = Math.max(1, list.length - 1);
    return list.map((point, i) => ({ x: (100 * i) / last, y: toGiB(point.total), event: point.label }));
  };
  const fill = (chart) => {
    chart.data.datasets[0].data = points(a);
    chart.data.datasets[1].data = points(b);
  };
  upsert(canvas, build, fill, [a.ranks[a.heaviest_rank].timeline, b.ranks[b.heaviest_rank].timeline]);
}

/** The colours the charts use now (the stylesheet's, for the current light or dark scheme). */
export function chartColors() {
  return palette();
}

/** A chart's picture as a PNG Blob on an opaque background (a transparent PNG pastes badly); null before it is drawn. */
export function chartPng(canvas) {
  if (!charts.get(canvas)) return Promise.resolve(null);
  const out = document.createElement("canvas");
  out.width = canvas.width;
  out.height = canvas.height;
  const context = out.getContext("2d");
  context.fillStyle = palette().surface || "#ffffff";
  context.fillRect(0, 0, out.width, out.height);
  context.drawImage(canvas, 0, 0);
  return new Promise((resolve) => out.toBlob(resolve, "image/png"));
}

/** Redraw every chart when the system switches between light and dark. */
export function followColorScheme(redraw) {
  if (typeof window === "undefined" || !window.matchMedia) return;
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", redraw);
}

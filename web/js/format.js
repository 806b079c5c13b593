// Display formatting only: every number shown comes from the core's report.

const GIB = 2 ** 30;
const MIB = 2 ** 20;
const KIB = 2 ** 10;
const LOCALE = "en-US"; // fixed, so the build-time render and the browser's agree

const twoDecimals = new Intl.NumberFormat(LOCALE, { minimumFractionDigits: 2, maximumFractionDigits: 2 });
const oneDecimal = new Intl.NumberFormat(LOCALE, { minimumFractionDigits: 1, maximumFractionDigits: 1 });
const integer = new Intl.NumberFormat(LOCALE, { maximumFractionDigits: 0 });

/** Bytes with a binary unit, as trainmem.units.format_bytes writes them: "38.42 GiB". */
export function formatBytes(bytes) {
  const sign = bytes < 0 ? "-" : "";
  const value = Math.abs(bytes);
  for (const [unit, size] of [["GiB", GIB], ["MiB", MIB], ["KiB", KIB]]) {
    if (value >= size) return `${sign}${twoDecimals.format(value / size)} ${unit}`;
  }
  return `${sign}${integer.format(value)} B`;
}

/** Bytes as GiB, a plain number for chart axes. */
export function toGiB(bytes) {
  return bytes / GIB;
}

/** A parameter count the way model cards write it: 8.03B, 124.4M. */
export function formatCount(count) {
  for (const [suffix, size] of [["T", 1e12], ["B", 1e9], ["M", 1e6], ["K", 1e3]]) {
    if (Math.abs(count) >= size) {
      return (size >= 1e9 ? twoDecimals : oneDecimal).format(count / size) + suffix;
    }
  }
  return String(count);
}

/** A share of a whole as a percentage: "41.2 %". */
export function formatShare(part, whole) {
  if (!whole) return "–";
  return `${oneDecimal.format((100 * part) / whole)} %`;
}

export const CATEGORY_LABELS = {
  parameters: "Parameters",
  gradients: "Gradients",
  optimizer_states: "Optimizer states",
  activations: "Activations",
  overhead: "Overhead",
};

export const CATEGORIES = Object.keys(CATEGORY_LABELS);

export const PHASE_LABELS = {
  start: "Start",
  forward: "Forward",
  loss: "Loss",
  backward: "Backward",
  optimizer: "Optimizer step",
  zero_grad: "zero_grad",
  generation: "Generation",
  reference: "Reference / log-prob pass",
};

export const STATUS_LABELS = {
  fits: "Fits",
  tight: "Tight",
  does_not_fit: "Does not fit",
};

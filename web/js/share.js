// What the share buttons produce: a link, a `trainmem estimate` command, a Python snippet,
// the JSON report and an iframe snippet for blog posts. Pure functions of the setup.

import { flatten } from "./setup.js";

/** Quote a word for a POSIX shell (single quotes, with embedded ones escaped). */
export function shellQuote(text) {
  return /^[A-Za-z0-9_./:=@%+-]+$/.test(text) ? text : `'${text.replaceAll("'", "'\\''")}'`;
}

// Flags of `trainmem estimate` (core/trainmem/cli.py) that set one field each.
const VALUE_FLAGS = {
  "model.preset": "--preset",
  "model.num_parameters": "--num-parameters",
  micro_batch_size: "--micro-batch-size",
  sequence_length: "--seq-len",
  gradient_accumulation_steps: "--grad-accum",
  precision: "--precision",
  "optimizer.name": "--optimizer",
  "optimizer.implementation": "--optimizer-implementation",
  activation_checkpointing: "--checkpointing",
  attention: "--attention",
  loss: "--loss",
  headroom_fraction: "--headroom",
  "parallelism.num_gpus": "--gpus",
  "parallelism.tensor_parallel_size": "--tp",
  "parallelism.pipeline_parallel_size": "--pp",
  "parallelism.context_parallel_size": "--cp",
  "parallelism.expert_parallel_size": "--ep",
  "parallelism.expert_tensor_parallel_size": "--etp",
  gpu: "--gpu",
  "gpu.memory_gib": "--gpu-memory-gib",
  "runtime.device": "--device",
};
// Flags that switch a boolean field on.
const SWITCH_FLAGS = {
  "parallelism.sequence_parallel": "--sequence-parallel",
  "parallelism.offload_optimizer": "--offload-optimizer",
  "parallelism.offload_parameters": "--offload-params",
};

const STRATEGY_PATHS = ["parallelism.strategy", "parallelism.zero_stage", "parallelism.fsdp_sharding_strategy"];
const LORA_PATHS = ["finetuning.method", "finetuning.lora.r", "finetuning.lora.target_modules"];

/** The flags for a minimal setup (in the setup's order), or null when some field has no flag. */
function cliFlags(minimal, full, schema) {
  const words = [];
  const pairs = flatten(minimal, schema);
  const paths = new Set(pairs.map(([path]) => path));
  for (const [path, value] of pairs) {
    if (STRATEGY_PATHS.includes(path)) {
      if (path !== STRATEGY_PATHS.find((p) => paths.has(p))) continue; // written once, at its first field
      // --zero N implies strategy "zero"; --fsdp [STRATEGY] implies "fsdp"; --ddp the default.
      const p = full.parallelism;
      if (p.strategy === "zero") words.push("--zero", String(p.zero_stage));
      else if (p.strategy === "fsdp") words.push("--fsdp", p.fsdp_sharding_strategy);
      else if (!paths.has("parallelism.fsdp_sharding_strategy")) words.push("--ddp");
      else return null;
    } else if (LORA_PATHS.includes(path)) {
      if (path !== LORA_PATHS.find((p) => paths.has(p))) continue;
      const tuning = full.finetuning;
      if (tuning.method === "full") return null;
      words.push(tuning.method === "qlora" ? "--qlora" : "--lora", String(tuning.lora.r));
      if (paths.has("finetuning.lora.target_modules")) {
        const targets = tuning.lora.target_modules;
        words.push("--lora-targets", shellQuote(Array.isArray(targets) ? targets.join(",") : targets));
      }
    } else if (path === "gpu.name" && value === "custom") {
      continue;
    } else if (path in VALUE_FLAGS && value !== null && typeof value !== "object") {
      words.push(VALUE_FLAGS[path], shellQuote(String(value)));
    } else if (path in SWITCH_FLAGS && value === true) {
      words.push(SWITCH_FLAGS[path]);
    } else {
      return null;
    }
  }
  return words;
}

/**
 * The `trainmem estimate` command for a setup: flags when they cover every field of the
 * minimal setup, otherwise the minimal setup written to a file first.
 */
export function cliCommand(minimal, full, schema) {
  const flags = cliFlags(minimal, full, schema);
  if (flags) return ["trainmem", "estimate", ...flags].join(" ");
  return `echo ${shellQuote(JSON.stringify(minimal))} > setup.json && trainmem estimate setup.json`;
}

/** A JSON value as a Python literal (True/False/None), indented like json.dumps(indent=4). */
export function pythonLiteral(value, indent = 0) {
  const pad = " ".repeat(indent);
  const inner = " ".repeat(indent + 4);
  if (value === null) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "number") return Number.isFinite(value) ? String(value) : "None";
  if (typeof value === "string") return JSON.stringify(value);
  if (Array.isArray(value)) {
    if (!value.length) return "[]";
    return `[\n${value.map((item) => inner + pythonLiteral(item, indent + 4)).join(",\n")},\n${pad}]`;
  }
  const entries = Object.entries(value);
  if (!entries.length) return "{}";
  return `{\n${entries.map(([key, item]) => `${inner}${JSON.stringify(key)}: ${pythonLiteral(item, indent + 4)}`).join(",\n")},\n${pad}}`;
}

export function pythonSnippet(minimal) {
  return [
    "import trainmem",
    "",
    `report = trainmem.estimate(${pythonLiteral(minimal)})`,
    "print(report.fit.message)",
    'print(f"peak per GPU: {report.peak_total_bytes / 2**30:.2f} GiB")',
    "",
  ].join("\n");
}

/** Escape text for an HTML attribute value in a snippet the user pastes (never into our DOM). */
function attribute(text) {
  return text.replaceAll("&", "&amp;").replaceAll('"', "&quot;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
}

export function embedSnippet(url, title) {
  return `<iframe src="${attribute(url)}" title="${attribute(title)}" width="100%" height="480" style="border:0;max-width:720px" loading="lazy"></iframe>`;
}

/** Base64url of UTF-8 JSON (compact result snapshots in embed links). */
export function encodeSnapshot(value) {
  const bytes = new TextEncoder().encode(JSON.stringify(value));
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

export function decodeSnapshot(text) {
  try {
    const binary = atob(text.replaceAll("-", "+").replaceAll("_", "/"));
    const bytes = Uint8Array.from(binary, (c) => c.charCodeAt(0));
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return null;
  }
}

/** Copy text; resolves true on success. Falls back to selecting a text field for Ctrl+C. */
export async function copyText(text, fallbackField) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    if (fallbackField) {
      fallbackField.value = text;
      fallbackField.focus();
      fallbackField.select();
    }
    return false;
  }
}

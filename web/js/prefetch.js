// The setups one control step away from the one on screen, which the engine computes while the
// reader is idle (issue 14: engine.js prefetch, trainmem_web.prefetch), most likely next first.
//
// Each is the full setup with one field moved the way the form's own control moves it: the
// micro-batch and accumulation steppers by one, the sequence length to the neighbouring power of
// two, the other activation-checkpointing modes, the ZeRO stage by one (with the form's coupling
// to the strategy, hints.js COUPLINGS). The page asks the engine with the minimal setup's JSON
// text, so a neighbour is a hit only when the reader's change makes the very same text; any other
// change is computed as before.

import { applyCouplings } from "./hints.js";

export const PREFETCH_LIMIT = 8;

const CHECKPOINTING = ["none", "selective", "full"];

function changed(full, path, value) {
  const next = structuredClone(full);
  const keys = path.split(".");
  let node = next;
  for (const key of keys.slice(0, -1)) {
    if (node[key] === null || typeof node[key] !== "object") return null;
    node = node[key];
  }
  const last = keys[keys.length - 1];
  if (!(last in node) || node[last] === value) return null;
  node[last] = value;
  return applyCouplings(next, [path]);
}

function powerOfTwoNeighbours(value) {
  if (!Number.isInteger(value) || value < 2) return [];
  const below = 2 ** Math.floor(Math.log2(value - 1));
  const above = 2 ** (Math.floor(Math.log2(value)) + 1);
  return [above, below];
}

/** Full setups one step from `full` (an object as the form holds it), most likely first. */
export function neighbourSetups(full) {
  const out = [];
  const add = (path, value) => {
    const next = changed(full, path, value);
    if (next) out.push(next);
  };
  const micro = full.micro_batch_size;
  if (Number.isInteger(micro)) {
    add("micro_batch_size", micro + 1);
    if (micro > 1) add("micro_batch_size", micro - 1);
  }
  for (const length of powerOfTwoNeighbours(full.sequence_length)) add("sequence_length", length);
  for (const mode of CHECKPOINTING) add("activation_checkpointing", mode);
  const stage = full.parallelism?.zero_stage;
  if (Number.isInteger(stage) && (full.parallelism.num_gpus ?? 1) > 1) {
    if (stage < 3) add("parallelism.zero_stage", stage + 1);
    if (stage > 0) add("parallelism.zero_stage", stage - 1);
  }
  const accumulation = full.gradient_accumulation_steps;
  if (Number.isInteger(accumulation)) add("gradient_accumulation_steps", accumulation + 1);
  return out.slice(0, PREFETCH_LIMIT);
}

// The setup as data: the JSON Schema of trainmem.setup.Setup, defaults, and the URL hash.
//
// The page holds the *full* setup (every field, defaults filled in); what it shows as JSON,
// puts in the URL and hands to the CLI is the *minimal* setup: the model plus the fields
// that differ from the core's defaults, which is exactly what `trainmem estimate` accepts.

const FORBIDDEN_KEYS = new Set(["__proto__", "prototype", "constructor"]);

export function isPlainObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

export function clone(value) {
  return value === undefined ? undefined : JSON.parse(JSON.stringify(value));
}

export function deepEqual(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** Follow a local "$ref" of the schema. */
export function resolve(schema, root) {
  let node = schema;
  while (node && node.$ref) {
    const name = node.$ref.replace("#/$defs/", "");
    node = { ...root.$defs[name], ...withoutRef(node) };
  }
  return node;
}

function withoutRef(node) {
  const { $ref, ...rest } = node;
  return rest;
}

/** The branches of a union (anyOf / oneOf), resolved; [] for a plain schema. */
export function branches(schema, root) {
  const list = schema.anyOf || schema.oneOf || [];
  return list.map((branch) => resolve(branch, root));
}

/** A field whose value is replaced whole, never merged key by key: a union with an object branch. */
export function isAtomic(schema, root) {
  return branches(schema, root).some((branch) => branch.type === "object" || branch.properties);
}

/** An object whose keys the schema does not list (a config.json, a merge patch): kept as JSON. */
export function isFreeForm(schema) {
  return !schema.properties && (schema.type === "object" || schema.additionalProperties === true);
}

const schemaCache = new WeakMap(); // root -> Map(path -> schema)

/** The schema of the field at a dotted path, or null. Union branches are searched for the key. */
export function schemaAt(root, path) {
  let cache = schemaCache.get(root);
  if (!cache) schemaCache.set(root, (cache = new Map()));
  if (!cache.has(path)) cache.set(path, findSchema(root, path));
  return cache.get(path);
}

function findSchema(root, path) {
  let node = resolve(root, root);
  for (const key of path.split(".")) {
    node = childSchema(node, key, root);
    if (!node) return null;
  }
  return node;
}

function childSchema(node, key, root) {
  if (node.properties && node.properties[key]) return resolve(node.properties[key], root);
  for (const branch of branches(node, root)) {
    if (branch.properties && branch.properties[key]) return resolve(branch.properties[key], root);
  }
  return null;
}

export function getPath(object, path) {
  let node = object;
  for (const key of path.split(".")) {
    if (!isPlainObject(node)) return undefined;
    node = node[key];
  }
  return node;
}

export function setPath(object, path, value) {
  const keys = path.split(".");
  if (keys.some((key) => FORBIDDEN_KEYS.has(key))) return;
  let node = object;
  for (const key of keys.slice(0, -1)) {
    if (!isPlainObject(node[key])) node[key] = {};
    node = node[key];
  }
  node[keys[keys.length - 1]] = value;
}

/**
 * Lay a partial setup over a full one. Objects merge key by key, except atomic fields
 * (the model, the GPU) which the partial replaces whole.
 */
export function overlay(full, partial, root, prefix = "") {
  const result = clone(full);
  for (const [key, value] of Object.entries(partial)) {
    if (FORBIDDEN_KEYS.has(key)) continue;
    const path = prefix ? `${prefix}.${key}` : key;
    const schema = schemaAt(root, path);
    const mergeable = schema && !isAtomic(schema, root) && !isFreeForm(schema);
    if (mergeable && isPlainObject(value) && isPlainObject(result[key])) {
      result[key] = overlay(result[key], value, root, path);
    } else {
      result[key] = clone(value);
    }
  }
  return result;
}

/** The minimal setup: the model, and every field that differs from the core's defaults. */
export function minimalSetup(full, defaults, root) {
  const minimal = { model: clone(full.model) };
  const rest = diff(full, defaults, root, "");
  delete rest.model;
  return { ...minimal, ...rest };
}

function diff(value, base, root, prefix) {
  const out = {};
  for (const [key, item] of Object.entries(value)) {
    const path = prefix ? `${prefix}.${key}` : key;
    const schema = schemaAt(root, path);
    const nested = schema && !isAtomic(schema, root) && !isFreeForm(schema) && isPlainObject(item);
    if (nested && isPlainObject(base?.[key])) {
      const inner = diff(item, base[key], root, path);
      if (Object.keys(inner).length) out[key] = inner;
    } else if (!deepEqual(item, base?.[key])) {
      out[key] = clone(item);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------- URL hash
//
// A readable hash: one dotted path per field, e.g.
//   #model.preset=llama-3-8b&micro_batch_size=4&parallelism.zero_stage=3
// Values are JSON where they parse as JSON (numbers, booleans, arrays, a config.json) and
// plain text otherwise. Keys starting with "_" carry page state that is not the setup.

export function flatten(value, root, prefix = "", out = []) {
  for (const [key, item] of Object.entries(value)) {
    const path = prefix ? `${prefix}.${key}` : key;
    const schema = schemaAt(root, path);
    if (isPlainObject(item) && !(schema && isFreeForm(schema))) {
      flatten(item, root, path, out);
    } else {
      out.push([path, item]);
    }
  }
  return out;
}

function encodeValue(value) {
  if (typeof value === "string") {
    let parses = true;
    try {
      JSON.parse(value);
    } catch {
      parses = false;
    }
    return parses ? JSON.stringify(value) : value;
  }
  return JSON.stringify(value);
}

function decodeValue(text) {
  try {
    const value = parseJson(text);
    // JSON such as 1e400 parses to Infinity, which JSON cannot carry on: keep the text, which the core names.
    // So too a number JavaScript cannot hold as written: an integer literal past 2^53 (99999999999999999999999
    // would reach the core as 1e+23) or a nonzero number that underflows to 0 (1e-400). A number written with
    // an exponent (1e308) is a float as written: it goes on as the number it is.
    if (typeof value !== "number") return value;
    const integerLiteral = /^\s*-?\d+\s*$/.test(text);
    const altered = !Number.isFinite(value) || (integerLiteral && !Number.isSafeInteger(value))
      || (value === 0 && /[1-9]/.test(text.split(/[eE]/)[0]));
    return altered ? text : value;
  } catch {
    return text;
  }
}

const MAX_JSON_DEPTH = 32; // trainmem.files.MAX_NESTING_DEPTH: the core refuses deeper JSON anyway

/**
 * JSON.parse, refusing nesting deeper than the core accepts before parsing: the page's recursive
 * helpers (clone, overlay, flatten) would otherwise overflow the stack on a hostile document.
 */
export function parseJson(text) {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i += 1) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92) i += 1; // backslash: skip the escaped character
      else if (c === 34) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 91 || c === 123) {
      depth += 1;
      if (depth > MAX_JSON_DEPTH) throw new SyntaxError(`nested deeper than ${MAX_JSON_DEPTH} levels`);
    } else if (c === 93 || c === 125) depth -= 1;
  }
  return JSON.parse(text);
}

const KEEP = /[!'()*]/g; // encodeURIComponent leaves these; they are fine in a fragment too
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** encodeURIComponent, which throws on a lone surrogate (a pasted "\ud800"): U+FFFD stands in. */
function encodePart(text) {
  return encodeURIComponent(String(text).replace(LONE_SURROGATE, "\uFFFD"));
}

export function encodeHash(minimal, root, extra = {}) {
  const pairs = flatten(minimal, root).map(([path, value]) => [path, encodeValue(value)]);
  for (const [key, value] of Object.entries(extra)) pairs.push([`_${key}`, value]);
  return pairs
    .map(([key, value]) => `${encodePart(key)}=${encodePart(value).replace(KEEP, (c) => c)}`)
    .join("&");
}

/** Parse a hash into {setup: partial setup | null, extra: {key: text}}. Never throws. */
export function decodeHash(hash) {
  const text = hash.replace(/^#/, "");
  const extra = {};
  if (!text) return { setup: null, extra };
  const setup = {};
  let count = 0;
  for (const piece of text.split("&")) {
    if (!piece) continue;
    const at = piece.indexOf("=");
    let key;
    let raw;
    try {
      key = decodeURIComponent(at < 0 ? piece : piece.slice(0, at));
      raw = at < 0 ? "" : decodeURIComponent(piece.slice(at + 1));
    } catch {
      continue; // malformed percent-encoding: ignore that piece
    }
    if (key.startsWith("_")) {
      extra[key.slice(1)] = raw;
      continue;
    }
    if (!/^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$/.test(key)) continue;
    setPath(setup, key, decodeValue(raw));
    count += 1;
  }
  return { setup: count ? setup : null, extra };
}

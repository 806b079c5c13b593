// A memory snapshot of Pyodide's runtime for repeat visits (issue 14), made in the browser: no
// extra download on a first visit.
//
// The snapshot holds trainmem imported. On a first visit the worker (web/js/worker.js) starts
// Python with loadPyodide({_makeSnapshot: true}) and loads pydantic-core's WebAssembly library
// BEFORE emscripten initialises its runtime (a preRun callback): its memory then comes from the
// bump pointer at __heap_base and its function-table slots start at the table's initial length,
// both fixed by pyodide.asm.wasm, so they are the same in every run. After the engine's first
// answer, when no request has come for a while (worker.js IDLE_MS), the worker copies WebAssembly
// memory (pyodide.makeMemorySnapshot()), with a manifest of where each library was loaded (memory
// base, first table slot, the allocator's top after it) and the dlopen handles the import gave it
// (they index emscripten's JavaScript-side LDSO.loadedLibsByHandle, which the memory does not hold).
// The technique is the one of Cloudflare's Python Workers (workerd src/pyodide/internal/snapshot.ts,
// preloadDynamicLibs); benchmarks/bench_snapshot_imported.mjs tried it under Node first.
//
// A later visit loads each library in the same preRun, checks that it landed where the manifest
// says (libraryMismatch), puts the handles back, grows the memory to the snapshot's size (Pyodide's
// restoreSnapshot copies without growing), restores, writes the files again (emscripten's file
// system lives in JavaScript, not in the memory) and checks one pydantic-core call: no import.
//
// The copy goes into the service worker's cache of this build (`trainmem-<site_version>`,
// web/sw.js), which a new build's service worker deletes when it activates. The entry's URL carries
// a hash of every file the memory depends on (build_site.py python_snapshot: Pyodide's runtime and
// loader, the standard library's zip, the worker, the bundle, the libraries, the page's modules),
// so a snapshot is only ever restored into the runtime that made it. Pyodide checks its own header
// (magic number, build id); a snapshot that does not unpack, whose libraries do not land where they
// were, that does not restore, or whose check fails, is deleted and the worker boots as on a first
// visit (worker.js boot). The memory itself is not hashed (a SHA-256 of 31 MB costs 0.15-0.25 s on
// this machine): Cache Storage keeps what it was given, and only this origin's scripts can write to it.
//
// The file: a u32 (little-endian) length, the manifest as JSON padded with spaces so that what
// follows starts at a multiple of 16 (Pyodide reads its header as a Uint32Array), then Pyodide's
// snapshot.

/** The manifest's format; another one is not restored. */
export const SNAPSHOT_FORMAT = "trainmem-imported-1";

/** [head, Pyodide's snapshot]: the parts of the file (stored as one Blob, no third copy of the memory). */
export function packSnapshot(manifest, pyodideSnapshot) {
  let json = JSON.stringify({ format: SNAPSHOT_FORMAT, ...manifest });
  const encoder = new TextEncoder();
  let length = encoder.encode(json).byteLength;
  const padding = (16 - ((4 + length) % 16)) % 16;
  json += " ".repeat(padding);
  length += padding;
  const head = new Uint8Array(4 + length);
  new DataView(head.buffer).setUint32(0, length, true);
  encoder.encodeInto(json, head.subarray(4));
  return [head, pyodideSnapshot];
}

/** {manifest, snapshot} of a file packSnapshot wrote, or null when it is not one (any damage to its head). */
export function unpackSnapshot(bytes) {
  try {
    if (!(bytes instanceof Uint8Array) || bytes.byteLength < 4) return null;
    const length = new DataView(bytes.buffer, bytes.byteOffset, 4).getUint32(0, true);
    if ((4 + length) % 16 !== 0 || 4 + length + 64 > bytes.byteLength) return null;
    const manifest = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(4, 4 + length)));
    if (!manifest || manifest.format !== SNAPSHOT_FORMAT || !Array.isArray(manifest.libraries)) return null;
    if (!Number.isInteger(manifest.memory_bytes) || manifest.memory_bytes <= 0) return null;
    const snapshot = bytes.subarray(4 + length);
    if (snapshot.byteOffset % 16 !== 0) return null; // a copy would cost as much as the check saves
    return { manifest, snapshot };
  } catch {
    return null;
  }
}

const LIBRARY_FIELDS = ["path", "heap_base", "heap_start", "table_base"];

/**
 * Why the libraries a restoring process loaded (worker.js: [{path, heap_base, heap_start,
 * table_base}] in load order) are not where the manifest's were, or null when every one is.
 */
export function libraryMismatch(manifest, loaded) {
  const recorded = manifest.libraries;
  if (recorded.length !== loaded.length) return `${loaded.length} libraries loaded, the snapshot has ${recorded.length}`;
  for (let i = 0; i < recorded.length; i++) {
    for (const field of LIBRARY_FIELDS) {
      if (recorded[i][field] !== loaded[i][field]) {
        return `library ${i} ${field}: ${JSON.stringify(loaded[i][field])}, the snapshot has ${JSON.stringify(recorded[i][field])}`;
      }
    }
    const handles = recorded[i].handles;
    if (!Array.isArray(handles) || !handles.every((h) => Number.isInteger(h) && h > 0)) return `library ${i} handles: not positive integers`;
  }
  return null;
}

/** The prefix of the service worker's cache names (web/sw.js PREFIX). */
const CACHE_PREFIX = "trainmem-";

function cacheStorage() {
  return typeof self.caches === "object" && self.caches !== null ? self.caches : null;
}

/** True when snapshots can be kept here (Cache Storage needs a secure context: https or 127.0.0.1). */
export function canKeepSnapshots(config) {
  return Boolean(config && config.url && cacheStorage());
}

/** The cached snapshot's bytes, or null (none, no Cache Storage, or it cannot be read). */
export async function cachedSnapshot(config) {
  if (!canKeepSnapshots(config)) return null;
  try {
    const response = await cacheStorage().match(new URL(config.url, config.base).href);
    if (!response) return null;
    const bytes = new Uint8Array(await response.arrayBuffer());
    return bytes.byteLength === Number(response.headers.get("X-Snapshot-Bytes")) ? bytes : null;
  } catch {
    return null;
  }
}

/** Keep `parts` (packSnapshot's) in this build's cache (its name from manifest.json's site_version). Never throws. */
export async function storeSnapshot(config, parts) {
  if (!canKeepSnapshots(config)) return false;
  try {
    const response = await fetch(new URL("manifest.json", config.base));
    if (!response.ok) return false;
    const { site_version: version } = await response.json();
    if (typeof version !== "string" || !version) return false;
    const cache = await cacheStorage().open(`${CACHE_PREFIX}${version}`);
    const body = new Blob(parts);
    const headers = { "Content-Type": "application/octet-stream", "X-Snapshot-Bytes": String(body.size) };
    await cache.put(new URL(config.url, config.base).href, new Response(body, { headers }));
    return true;
  } catch {
    return false; // a full quota, a private mode without Cache Storage: the next visit boots as this one did
  }
}

/** Delete the snapshot from every cache that holds it. Never throws. */
export async function forgetSnapshot(config) {
  const storage = cacheStorage();
  if (!storage || !config || !config.url) return;
  try {
    const url = new URL(config.url, config.base).href;
    for (const name of await storage.keys()) {
      if (name.startsWith(CACHE_PREFIX)) await (await storage.open(name)).delete(url);
    }
  } catch {
    // nothing to delete
  }
}

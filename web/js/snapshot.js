// A memory snapshot of Pyodide's runtime for repeat visits (issue 14), made in the browser: no
// extra download on a first visit.
//
// On a first visit the worker (web/js/worker.js) starts Python with loadPyodide({_makeSnapshot: true})
// and copies WebAssembly memory right after loadPyodide (pyodide.makeMemorySnapshot(): Python
// initialised, Pyodide's own modules imported, about 31 MB), before it loads any dynamic library:
// Pyodide 314.0.7 cannot restore a snapshot made after pydantic-core's library was loaded (the
// library's function-table entries are not part of the memory: "table index is out of bounds",
// README "Start-up, measured"). Once the boot is done the copy goes into the service worker's cache
// of this build (`trainmem-<site_version>`, web/sw.js), which a new build's service worker deletes
// when it activates. A later visit restores it (loadPyodide({_loadSnapshot})) instead of
// initialising Python again, then loads the bundle and imports trainmem as a first visit does.
//
// The entry's URL carries a hash of the files the memory depends on (build_site.py
// python_snapshot: Pyodide's runtime and loader, the standard library's zip, the worker), so a
// snapshot is only ever restored into the runtime that made it. Pyodide checks its own header
// (magic number, build id); a snapshot that does not restore, or a boot from it that fails, is
// deleted and the worker boots as on a first visit (worker.js startPython). The memory itself is
// not hashed (a SHA-256 of 31 MB costs 0.15-0.25 s on this machine, a fifth of what the snapshot
// saves): Cache Storage keeps what it was given, and only this origin's scripts can write to it.

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

/** Keep `bytes` in this build's cache (its name from manifest.json's site_version). Never throws. */
export async function storeSnapshot(config, bytes) {
  if (!canKeepSnapshots(config)) return false;
  try {
    const response = await fetch(new URL("manifest.json", config.base));
    if (!response.ok) return false;
    const { site_version: version } = await response.json();
    if (typeof version !== "string" || !version) return false;
    const cache = await cacheStorage().open(`${CACHE_PREFIX}${version}`);
    const headers = { "Content-Type": "application/octet-stream", "X-Snapshot-Bytes": String(bytes.byteLength) };
    await cache.put(new URL(config.url, config.base).href, new Response(bytes, { headers }));
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

// The service worker: after the first visit the calculator works without a network.
//
// One cache per build: build_site.py writes the build's version (a hash of every other file
// of the site) into VERSION below, and manifest.json lists the files. Installing fetches the
// manifest, checks it is this build's, and caches every file it lists; activating deletes the
// caches of other builds. Requests for the site's own files are answered from the cache
// (the files of one build never change), anything else goes to the network. A new build is a
// new sw.js, which the browser installs on the next visit, replacing the cache.
//
// The WebAssembly files are stored compressed (X.wasm as X.wasm.gz: manifest.stored_compressed,
// build_site.py store_compressed). Installing also caches each one decompressed under its
// original path, X.wasm, which the worker asks for first (web/js/stored.js): a response the
// service worker answers from its cache, by URL, is one whose compiled code Chrome keeps in its
// WebAssembly code cache (https://v8.dev/blog/wasm-code-caching), so a repeat visit need not
// compile the runtime again; a response the worker builds from a decompressed stream is not.

const VERSION = "@SITE_VERSION@";
const CACHE = `trainmem-${VERSION}`;
const PREFIX = "trainmem-";

self.addEventListener("install", (event) => {
  event.waitUntil(
    (async () => {
      const response = await fetch("manifest.json", { cache: "no-cache" });
      if (!response.ok) throw new Error(`manifest.json: HTTP ${response.status}`);
      const manifest = await response.clone().json();
      if (manifest.site_version !== VERSION) throw new Error("manifest.json is of another build");
      const cache = await caches.open(CACHE);
      // cache_files: the files the page fetches (the manifest also lists the wheels, for the Node tests).
      const files = (manifest.cache_files ?? Object.keys(manifest.files)).filter((path) => path !== "sw.js");
      await cache.addAll(["./", ...files].map((path) => new Request(path, { cache: "no-cache" })));
      for (const [original, stored] of Object.entries(manifest.stored_compressed ?? {})) {
        await cache.put(original, await decompressed(await cache.match(stored)));
      }
      await cache.put("manifest.json", response);
      await self.skipWaiting();
    })(),
  );
});

/** The cached X.wasm.gz as X.wasm (as it is when the host has decoded it already: its first byte is not gzip's). */
async function decompressed(response) {
  const bytes = new Uint8Array(await response.arrayBuffer());
  const body = bytes[0] === 0x1f ? new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip")) : bytes;
  return new Response(await new Response(body).arrayBuffer(), { headers: { "Content-Type": "application/wasm" } });
}

self.addEventListener("activate", (event) => {
  event.waitUntil(
    (async () => {
      for (const name of await caches.keys()) {
        if (name.startsWith(PREFIX) && name !== CACHE) await caches.delete(name);
      }
      await self.clients.claim();
    })(),
  );
});

self.addEventListener("fetch", (event) => {
  const request = event.request;
  if (request.method !== "GET" || new URL(request.url).origin !== self.location.origin) return;
  event.respondWith(
    (async () => {
      const cache = await caches.open(CACHE);
      const cached = await cache.match(request, { ignoreSearch: true });
      return cached || fetch(request);
    })(),
  );
});

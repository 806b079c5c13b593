// The service worker: after the first visit the calculator works without a network.
//
// One cache per build: build_site.py writes the build's version (a hash of every other file
// of the site) into VERSION below, and manifest.json lists the files. Installing fetches the
// manifest, checks it is this build's, and caches every file it lists; activating deletes the
// caches of other builds. Requests for the site's own files are answered from the cache
// (the files of one build never change), anything else goes to the network. A new build is a
// new sw.js, which the browser installs on the next visit, replacing the cache.

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
      await cache.put("manifest.json", response);
      await self.skipWaiting();
    })(),
  );
});

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

// The site's WebAssembly files are stored gzip-compressed (build_site.py store_compressed): the
// bytes of X.wasm are served as X.wasm.gz, which any static host sends as it is (application/gzip,
// no Content-Encoding). This module turns that file back into what WebAssembly.compileStreaming and
// instantiateStreaming want: a Response of type application/wasm whose body is decompressed by the
// browser's DecompressionStream("gzip") as it downloads, so compiling still starts with the first
// bytes (the Compression Streams API: https://compression.spec.whatwg.org/).
//
// On a repeat visit the service worker (web/sw.js) holds the decompressed bytes under X.wasm itself;
// that copy is used first, because a Response fetched by URL is one whose compiled code the browser
// may keep (Chrome's WebAssembly code cache: https://v8.dev/blog/wasm-code-caching), which a Response
// built here from a stream is not.

const WASM_TYPE = { "Content-Type": "application/wasm" };
const fetchFromNetwork = globalThis.fetch.bind(globalThis); // not the worker's wrapper (worker.js self.fetch)
const GZIP_FIRST_BYTE = 0x1f; // gzip's magic number is 1f 8b (RFC 1952); a wasm module starts with 00 61 73 6d

/** The service worker's decompressed copy of `url`, or null: `only-if-cached` never reaches the
 *  network, so without a service worker (a first visit) this fails at once. */
async function fromServiceWorker(url) {
  try {
    const response = await fetchFromNetwork(url, { cache: "only-if-cached", mode: "same-origin" });
    return response.ok ? response : null;
  } catch {
    return null;
  }
}

/** `body` (a stream of the .gz file) decompressed; as it is when the host already decoded it (a
 *  host that sends a .gz with Content-Encoding: gzip), which its first byte tells. */
async function gunzipped(body) {
  const reader = body.getReader();
  const first = await reader.read();
  const whole = new ReadableStream({
    start(controller) {
      if (first.done) controller.close();
      else controller.enqueue(first.value);
    },
    async pull(controller) {
      const { done, value } = await reader.read();
      if (done) controller.close();
      else controller.enqueue(value);
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
  const compressed = !first.done && first.value[0] === GZIP_FIRST_BYTE;
  return compressed ? whole.pipeThrough(new DecompressionStream("gzip")) : whole;
}

/** A streaming Response (application/wasm) with the bytes of `url`, an X.wasm of this site stored as X.wasm.gz. */
export async function fetchWasm(url) {
  const cached = await fromServiceWorker(url);
  if (cached) return cached;
  const stored = `${url}.gz`;
  const response = await fetchFromNetwork(stored);
  if (!response.ok) throw new Error(`cannot load ${new URL(stored, self.location.href).pathname}: HTTP ${response.status}`);
  return new Response(await gunzipped(response.body), { headers: WASM_TYPE });
}

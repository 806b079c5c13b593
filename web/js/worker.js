// Module Web Worker: loads Pyodide and the page's Python code, then answers compute requests.
// Everything is fetched from this site, so no package index is ever consulted.
//
// Start-up (issue 14): every download starts at once, before Pyodide's runtime has loaded, and
// nothing waits on Python that need not:
//  * python/site-packages.zip (build_site.py bundle_python): every pure-Python file of the wheels
//    (trainmem, pydantic, typing_extensions, ...), already bytecode, written to the file system in
//    one call and put on sys.path as it is: zipimport reads it, nothing is unpacked;
//  * each WebAssembly extension module (pydantic-core's) is compiled while loadPyodide runs
//    (WebAssembly.compileStreaming), then instantiated into Pyodide's runtime and handed to
//    emscripten's dynamic loader as already loaded (Module.preloadedWasm, the same table its
//    own preload plugin fills: registerWasmPlugin in pyodide.asm.mjs), so Python's import of it
//    compiles nothing; a meta-path finder maps the module's name to its file;
//  * both WebAssembly files, Pyodide's runtime and pydantic-core's, are stored as .wasm.gz and
//    decompressed as they download (web/js/stored.js fetchWasm); the runtime's early fetch below
//    goes through it, and Pyodide's loader, which fetches pyodide.asm.wasm itself, is answered
//    with that response;
//  * loadPyodide gets the lock file's `info` inline (lockFileContents), so it neither fetches nor
//    parses pyodide-lock.json: the page loads no package by name;
//  * Pyodide's own files start loading when this module starts (the page's head creates this
//    worker with the page: web/js/early.js): its loader and runtime scripts by dynamic imports (a
//    static import would hold this module, and so the boot message, until they had loaded), its
//    WebAssembly runtime and standard library by fetches that loadPyodide's own requests for the
//    same URLs then take over (startedFetch) instead of requesting them again;
//  * a repeat visit restores a memory snapshot of Python with trainmem imported, made on an earlier
//    visit after the engine's first answer while the page was idle and kept in Cache Storage
//    (web/js/snapshot.js), instead of initialising Python and importing trainmem; one that fails
//    to restore is deleted and the boot starts again without it.

import { fetchWasm } from "./stored.js";
import { cachedSnapshot, canKeepSnapshots, forgetSnapshot, libraryMismatch, packSnapshot, storeSnapshot, unpackSnapshot } from "./snapshot.js";

/** This worker's stages on the epoch clock ([stage, ms]), sent to the page with the boot's answer. */
const marks = [];
function mark(stage) {
  marks.push([stage, performance.timeOrigin + performance.now()]);
}
mark("start");

const PYODIDE = new URL("../pyodide/", import.meta.url);
const pyodideLoader = import("../pyodide/pyodide.mjs");
const pyodideRuntime = import("../pyodide/pyodide.asm.mjs");
/** One of Pyodide's files as loadPyodide expects its response (the one place that fetches them);
 *  the runtime is stored as pyodide.asm.wasm.gz, which stored.js fetchWasm decompresses as it downloads. */
const fetchPyodideFile = (url) => (url.endsWith(".wasm") ? fetchWasm(url) : fetch(url));
const earlyFetches = new Map();
/** Start the fetches of Pyodide's runtime and standard library (again, for a boot that starts over). */
function startEarlyFetches() {
  for (const name of ["pyodide.asm.wasm", "python_stdlib.zip"]) {
    const url = new URL(name, PYODIDE).href;
    const pending = fetchPyodideFile(url);
    pending.catch(() => {}); // awaited by loadPyodide
    earlyFetches.set(url, pending);
  }
}
startEarlyFetches();
for (const pending of [pyodideLoader, pyodideRuntime]) pending.catch(() => {}); // awaited later

/**
 * fetch, except that the first request for a URL this module already fetched gets that response
 * (Pyodide's loader fetches its runtime and standard library itself: emscripten-settings.ts
 * getInstantiateWasmFunc and installStdlib, through compat.ts getBinaryResponse).
 */
const networkFetch = self.fetch.bind(self);
self.fetch = (resource, options) => {
  const url = typeof resource === "string" || resource instanceof URL ? new URL(resource, self.location.href).href : null;
  const started = url !== null && earlyFetches.get(url);
  if (!started) return networkFetch(resource, options);
  earlyFetches.delete(url);
  return started;
};

/** Pyodide 314's site-packages (its fsInit reports it; checked before a snapshot is made). */
const SITE_PACKAGES = "/lib/python3.14/site-packages";
/** emscripten's flags for a library Python's dlopen loads (RTLD_LOCAL; pyodide.asm.mjs loadDynamicLibrary). */
const LIBRARY_FLAGS = { loadAsync: true, nodelete: true, allowUndefined: true };

/**
 * A preRun callback (settings.preRun) that loads the extension libraries (`natives`: compiled
 * while the runtime downloads) before emscripten initialises its runtime, so that each lands at the
 * same memory base and table slot in every run (snapshot.js), registered under its file's path for
 * Python's dlopen to find; the handles of a snapshot's manifest (`recorded`) are put back. Where
 * each landed goes into `loaded` ({libraries, error}).
 */
function loadLibrariesFirst(natives, recorded, loaded) {
  return (Module) => {
    Module.addRunDependency("trainmem-native-libraries");
    const sbrk = () => Module.HEAPU32[Module._emscripten_get_sbrk_ptr() >>> 2];
    (async () => {
      for (const [index, lib] of (await Promise.all(natives)).entries()) {
        const path = `${SITE_PACKAGES}/${lib.path}`;
        const dso = Module.newDSO(path, undefined, "loading");
        dso.global = false;
        const where = { path, heap_base: sbrk(), table_base: Module.wasmTable.length };
        dso.exports = await Module.loadWebAssemblyModule(lib.wasm, LIBRARY_FLAGS, path, {});
        where.heap_start = sbrk();
        for (const handle of recorded?.[index]?.handles ?? []) Module.LDSO.loadedLibsByHandle[handle] = dso;
        loaded.libraries.push(where);
      }
    })().catch((error) => {
      loaded.error = error;
    }).finally(() => Module.removeRunDependency("trainmem-native-libraries"));
  };
}

/**
 * loadPyodide's createPyodideModule: the runtime script imported above, with marks of its stages
 * (the WebAssembly instantiated, emscripten's runtime up, Python's main() returned); with
 * `libraries` ({natives, manifest, snapshot, loaded}), the extension libraries loaded first, and
 * for a snapshot, their places checked against its manifest and the memory grown to its size.
 */
async function createPyodideModule(settings, libraries = null) {
  const create = (await pyodideRuntime).default;
  if (libraries) {
    const { natives, manifest } = libraries;
    settings.preRun = [...[].concat(settings.preRun ?? []), loadLibrariesFirst(natives, manifest?.libraries, libraries.loaded)];
  }
  mark("runtime-script");
  const instantiate = settings.instantiateWasm; // emscripten's Module is this object itself
  if (instantiate) {
    settings.instantiateWasm = (imports, done) =>
      instantiate(imports, (instance, module) => {
        mark("wasm-instantiated");
        done(instance, module);
      });
  }
  settings.onRuntimeInitialized = () => mark("runtime-initialized");
  const module = await create(settings);
  mark("python-main");
  if (libraries?.loaded.error) throw libraries.loaded.error;
  if (libraries?.snapshot) {
    const mismatch = libraryMismatch(libraries.manifest, libraries.loaded.libraries);
    if (mismatch) throw new Error(`the snapshot's libraries are not where they were: ${mismatch}`);
    module.growMemory(libraries.snapshot.byteLength); // restoreSnapshot copies without growing
  }
  return module;
}

let bridge = null;

function progress(stage, fraction, label) {
  self.postMessage({ type: "progress", stage, fraction, label });
}

async function fetchOk(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`cannot load ${url.pathname ?? url}: HTTP ${response.status}`);
  return response;
}

/** A WebAssembly module compiled while it downloads (from its bytes when the type is not application/wasm). */
async function compileNative(url) {
  const response = await fetchWasm(url);
  const bytes = response.clone().arrayBuffer();
  try {
    return { wasm: await WebAssembly.compileStreaming(response), bytes: new Uint8Array(await bytes) };
  } catch (error) {
    if (!(error instanceof TypeError)) throw error; // a served type other than application/wasm
    const data = new Uint8Array(await bytes);
    return { wasm: await WebAssembly.compile(data), bytes: data };
  }
}

/** Python, run before the first import: the bundle on sys.path, the extension modules by name. */
const BOOTSTRAP = `
import sys
from importlib.machinery import ExtensionFileLoader, ModuleSpec

class _NativeExtensions:
    """A meta-path finder for the extension modules the worker wrote outside the zip (zipimport
    cannot load a shared library): their dotted name -> file path (web/js/worker.js)."""
    paths = {}

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        location = cls.paths.get(name)
        if location is None:
            return None
        spec = ModuleSpec(name, ExtensionFileLoader(name, location), origin=location)
        spec.has_location = True
        return spec

def _install(zip_path, native_json):
    import json
    _NativeExtensions.paths.update(json.loads(native_json))
    sys.meta_path.insert(0, _NativeExtensions)
    sys.path.insert(1, zip_path)
`;

async function boot({ modules, python }) {
  const started = performance.now();
  mark("boot");
  progress("runtime", 0.05, "Loading Python (Pyodide)…");
  const base = new URL("../", import.meta.url);
  if (!python) throw new Error("this page's engine configuration has no python bundle (rebuild the site)");
  // Every download at once: the runtime, the bundle, the extensions (compiled as they arrive), the
  // page's modules, and a snapshot of Python kept by an earlier visit (snapshot.js).
  const snapshotConfig = python.snapshot ? { ...python.snapshot, base: base.href } : null;
  const cached = cachedSnapshot(snapshotConfig);
  const bundle = fetchOk(new URL(python.zip, base)).then((response) => response.arrayBuffer());
  const natives = python.native.map((lib) => compileNative(new URL(lib.url, base)).then((compiled) => ({ ...lib, ...compiled })));
  const sources = Promise.all(
    modules.map(async (path) => [path.split("/").pop(), await (await fetchOk(new URL(path, base))).text()]),
  );
  for (const pending of [bundle, sources, ...natives]) pending.catch(() => {}); // awaited below
  const { loadPyodide } = await pyodideLoader;
  mark("loader");
  const downloads = { bundle, natives, sources };
  const kept = await cached;
  const unpacked = kept && unpackSnapshot(kept);
  if (kept && !unpacked) {
    mark("snapshot-failed"); // not one this worker wrote (damaged, or of another format)
    await forgetSnapshot(snapshotConfig);
  }
  const firstVisit = { makeSnapshot: canKeepSnapshots(snapshotConfig) && python.native.length > 0 };
  if (unpacked) {
    try {
      bridge = await startPython(loadPyodide, python, downloads, unpacked);
    } catch {
      // A snapshot that does not restore (or a boot from it that fails): forget it, boot as a first visit.
      mark("snapshot-failed");
      await forgetSnapshot(snapshotConfig);
      startEarlyFetches();
      bridge = await startPython(loadPyodide, python, downloads, firstVisit);
    }
  } else {
    bridge = await startPython(loadPyodide, python, downloads, firstVisit);
  }
  mark("imported");
  self.postMessage({ type: "timings", marks });
  progress("ready", 1, "Ready");
  if (pendingSnapshot) pendingSnapshot.config = snapshotConfig;
  return { seconds: (performance.now() - started) / 1000, failures: [] };
}

/**
 * loadPyodide, the bundle and the extensions in place, then `import trainmem_web`: the bridge.
 * From `snapshot` (and its `manifest`) when given: the libraries loaded first where the manifest
 * says, the memory restored, the files written again, nothing imported. With makeSnapshot: the
 * libraries loaded first, and a snapshot made later, when the page is idle (pendingSnapshot).
 */
async function startPython(loadPyodide, python, { bundle, natives, sources }, { snapshot = null, manifest = null, makeSnapshot = false }) {
  let sitePackages = null;
  const libraries = snapshot || makeSnapshot ? { natives, manifest, snapshot, loaded: { libraries: [], error: null } } : null;
  // PYDANTIC_DISABLE_PLUGINS: pydantic otherwise scans every installed distribution's entry points
  // (importlib.metadata) when it builds its first model; the page has no pydantic plugin.
  const pyodide = await loadPyodide({
    indexURL: new URL("pyodide/", new URL("../", import.meta.url)).href,
    lockFileContents: { info: python.lock_info, packages: {} },
    env: { PYDANTIC_DISABLE_PLUGINS: "__all__" },
    fsInit: (FS, { sitePackages: folder }) => {
      sitePackages = folder;
    },
    stdout: () => {},
    stderr: () => {},
    createPyodideModule: (settings) => createPyodideModule(settings, libraries),
    ...(snapshot ? { _loadSnapshot: snapshot } : makeSnapshot ? { _makeSnapshot: true } : {}),
  });
  mark("loadpyodide");
  if (snapshot) {
    mark("snapshot-restored");
    pyodide.runPython("import random; random.seed()"); // not the seed of the visit that made the snapshot
  }
  progress("packages", 0.6, "Loading trainmem and pydantic…");
  const zipPath = "/lib/trainmem-site-packages.zip";
  pyodide.FS.writeFile(zipPath, new Uint8Array(await bundle));
  const Module = pyodide._module; // emscripten's module: its dynamic loader (pyodide.asm.mjs)
  const nativePaths = {};
  for (const lib of await Promise.all(natives)) {
    const path = `${sitePackages}/${lib.path}`;
    pyodide.FS.mkdirTree(path.slice(0, path.lastIndexOf("/")));
    pyodide.FS.writeFile(path, lib.bytes); // the import system finds the file; its code is preloaded
    if (!libraries) Module.preloadedWasm[path] = await Module.loadWebAssemblyModule(lib.wasm, LIBRARY_FLAGS, path, {});
    nativePaths[lib.module] = path;
  }
  for (const [name, source] of await sources) pyodide.FS.writeFile(`/home/pyodide/${name}`, source);
  mark("files");
  if (snapshot) {
    // Python's state is the snapshot's: trainmem is imported. One call into pydantic-core (through
    // the function table the library filled again) before the page relies on it; a failure
    // throws, and boot() forgets the snapshot and starts again.
    pyodide.runPython("import sys, pydantic\nassert 'trainmem_web' in sys.modules\nassert pydantic.TypeAdapter(int).validate_python('3') == 3");
    mark("snapshot-checked");
    return pyodide.pyimport("trainmem_web");
  }
  if (makeSnapshot && sitePackages === SITE_PACKAGES) pendingSnapshot = { pyodide, libraries: libraries.loaded.libraries, config: null };
  progress("import", 0.8, "Importing trainmem…");
  try {
    const namespace = pyodide.globals.get("dict")();
    pyodide.runPython(BOOTSTRAP, { globals: namespace });
    namespace.get("_install")(zipPath, JSON.stringify(nativePaths));
    namespace.destroy();
    return pyodide.pyimport("trainmem_web");
  } catch (error) {
    throw new Error(`cannot import trainmem in Pyodide: ${error.message}`);
  }
}

/**
 * The snapshot a first visit makes (snapshot.js): {pyodide, libraries, config} until it is made.
 * It is made IDLE_MS after the last answer, once the engine has answered a compute, and only when
 * no request has arrived meanwhile (each one postpones it; requests run one at a time in this
 * worker, so none runs while it is made). It copies the memory (about 0.1 s), then stores it.
 */
let pendingSnapshot = null;
let snapshotTimer = null;
let computed = false;
let requestsRunning = 0;
const IDLE_MS = 1000;

function postponeSnapshot() {
  if (snapshotTimer !== null) clearTimeout(snapshotTimer);
  snapshotTimer = null;
  if (pendingSnapshot && computed && requestsRunning === 0) snapshotTimer = setTimeout(makeSnapshot, IDLE_MS);
}

function makeSnapshot() {
  snapshotTimer = null;
  const pending = pendingSnapshot;
  if (!pending || !pending.config || requestsRunning > 0) return;
  pendingSnapshot = null; // one try per visit
  const from = marks.length;
  try {
    const Module = pending.pyodide._module;
    const libraries = pending.libraries.map((where) => ({
      ...where,
      handles: Object.entries(Module.LDSO.loadedLibsByHandle)
        .filter(([handle, dso]) => Number(handle) !== 0 && dso.name === where.path)
        .map(([handle]) => Number(handle)),
    }));
    const memory = pending.pyodide.makeMemorySnapshot();
    mark("snapshot-made");
    const parts = packSnapshot({ libraries, memory_bytes: Module.HEAP8.length }, memory);
    storeSnapshot(pending.config, parts).then((stored) => {
      mark(stored ? "snapshot-stored" : "snapshot-not-stored");
      self.postMessage({ type: "timings", marks: marks.slice(from) });
    });
  } catch {
    mark("snapshot-not-made"); // e.g. a JavaScript object Python holds that Pyodide cannot serialise
    self.postMessage({ type: "timings", marks: marks.slice(from) });
  }
}

const handlers = {
  boot,
  compute: ({ setupJson, suggestions, reserveFraction }) => bridge.compute(setupJson, suggestions, reserveFraction ?? undefined), // undefined is None (null is jsnull)
  prefetch: ({ setupJson }) => bridge.prefetch(setupJson),
  architecture: ({ modelJson }) => bridge.architecture(modelJson),
  modelInputs: ({ modelJson }) => bridge.model_inputs(modelJson),
  markdown: ({ reportJson, title }) => bridge.markdown(reportJson, title),
  compareMarkdown: ({ aJson, bJson, aLabel, bLabel }) => bridge.compare_markdown(aJson, bJson, aLabel, bLabel),
  readFiles: ({ filesJson, formJson }) => bridge.read_files(filesJson, formJson),
  writeFile: ({ setupJson, format }) => bridge.write_file(setupJson, format),
};

self.addEventListener("message", async (event) => {
  const { id, type, ...payload } = event.data;
  requestsRunning += 1;
  postponeSnapshot();
  try {
    const result = await handlers[type](payload);
    if (type === "compute") computed = true;
    self.postMessage({ id, result });
  } catch (error) {
    self.postMessage({ id, error: String(error && error.message ? error.message : error) });
  } finally {
    requestsRunning -= 1;
    postponeSnapshot();
  }
});

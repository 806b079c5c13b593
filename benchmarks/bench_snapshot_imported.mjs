// Benchmark and experiment (not a test, not used by the page): a Pyodide memory snapshot made AFTER
// `import trainmem_web` and a first compute, so that pydantic-core's WebAssembly library is loaded in
// it, restored in a fresh process (issue 14, "Python ready <= 1.5 s cold"; README "Start-up,
// measured"). Under Node, with the built site's runtime, bundle and library, as web/js/worker.js
// boots them; CPU time of the process for each stage (a loaded machine disturbs it less than wall time).
//
//   node benchmarks/bench_snapshot_imported.mjs plain SITE_DIR
//       a normal boot: loadPyodide, the bundle, `import trainmem_web`, then the ANSWER compute
//   node benchmarks/bench_snapshot_imported.mjs make SITE_DIR SNAPSHOT.bin
//       the same boot with loadPyodide({_makeSnapshot: true}); after the import and the FIRST compute
//       (the page's default setup) the memory goes to SNAPSHOT.bin; then the ANSWER compute
//   node benchmarks/bench_snapshot_imported.mjs restore SITE_DIR SNAPSHOT.bin
//       loadPyodide({_loadSnapshot}) from SNAPSHOT.bin, the files written (nothing imported), then the
//       ANSWER compute: answer_sha must equal plain's
//   node benchmarks/bench_snapshot_imported.mjs sizes SITE_DIR SNAPSHOT.bin
//       what the snapshot would cost to download: gzip -9 of the memory as Pyodide writes it, trimmed
//       at the allocator's top (sbrk) with the free chunks' stale bytes zeroed, and that XOR the
//       memory a fresh runtime has before the copy (its static data and the library's data segments)
//
// With CASES=cases.json ({"setups": [...]}: build_site.py IMPORT_CASES) every case is computed too
// (with suggestions) and hashed into cases_sha, which must also be the same in plain and restore.
//
// The technique (Cloudflare's Python Workers do the same for their packages' libraries:
// workerd src/pyodide/internal/snapshot.ts, preloadDynamicLibs / getMemoryPatched): a snapshot is
// WebAssembly memory only. A dynamic library's code, its instance and its function-table entries
// live outside it, and the memory holds pointers into both: its data at the library's memory base
// and its functions as table indices (Python's method tables and type slots). So the restoring
// process must instantiate the library again at the SAME memory base and table base before the
// memory is copied back. Here both the making and the restoring process load pydantic-core's
// library in a preRun callback, before emscripten initialises the runtime: emscripten's
// loadWebAssemblyModule then takes its memory from the bump pointer at __heap_base (getMemory, no
// malloc yet) and its table slots at the table's initial length, both fixed by pyodide.asm.wasm, so
// they are the same in both processes (checked on restore against the recorded ones). The library
// is registered under its file's path (newDSO), so Python's dlopen of it at the import finds it
// loaded; the restoring process re-registers the dlopen handles the import made (they index
// emscripten's JavaScript-side LDSO.loadedLibsByHandle, which the memory does not hold). The memory
// is grown to the snapshot's size before Pyodide's restoreSnapshot copies it in.

import { copyFileSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { gunzipSync, gzipSync } from "node:zlib";
import { fileURLToPath, pathToFileURL } from "node:url";
import { createHash } from "node:crypto";

const repo = resolve(fileURLToPath(new URL(".", import.meta.url)), "..");
const [mode, site, snapshotPath] = process.argv.slice(2);
if (!["plain", "make", "restore", "sizes"].includes(mode) || !site || (mode !== "plain" && !snapshotPath)) {
  console.error("usage: node bench_snapshot_imported.mjs plain|make|restore|sizes SITE_DIR [SNAPSHOT.bin]");
  process.exit(2);
}
const cpu = () => {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1e6;
};
const started = cpu();
const manifest = JSON.parse(readFileSync(join(site, "manifest.json"), "utf8"));

// The page's default setup (build_site.py DEFAULT_SETUP), computed before the snapshot is made, and
// another setup, computed after the boot or the restore (its answer is compared).
const FIRST = { model: { preset: "llama-3.1-8b" }, micro_batch_size: 1, sequence_length: 4096, activation_checkpointing: "full",
  parallelism: { num_gpus: 8, strategy: "zero", zero_stage: 2 }, gpu: "h100-sxm-80gb" };
const ANSWER = { ...FIRST, micro_batch_size: 2 };

/** The site's pyodide/ as Node's loader reads it: X.gz (build_site.py store_compressed) decompressed. */
function siteRuntime() {
  const folder = mkdtempSync(join(tmpdir(), "trainmem-bench-snapshot-imported-"));
  for (const name of readdirSync(join(site, "pyodide"))) {
    if (name.endsWith(".gz")) writeFileSync(join(folder, name.slice(0, -3)), gunzipSync(readFileSync(join(site, "pyodide", name))));
    else copyFileSync(join(site, "pyodide", name), join(folder, name));
  }
  return folder;
}
const runtime = siteRuntime();
const { loadPyodide } = await import(pathToFileURL(join(runtime, "pyodide.mjs")).href);
const createRuntime = (await import(pathToFileURL(join(runtime, "pyodide.asm.mjs")).href)).default;
const [library] = manifest.python.native; // pydantic-core's: the page's only one
const libraryBytes = gunzipSync(readFileSync(join(site, `${library.url}.gz`)));
const libraryModule = await WebAssembly.compile(libraryBytes);
const SITE_PACKAGES = "/lib/python3.14/site-packages"; // Pyodide 314's (its fsInit reports the same)
const libraryPath = `${SITE_PACKAGES}/${library.path}`;

/** [meta, Pyodide's snapshot] of a file written by `make` (meta: u32 length, JSON padded to 16). */
function readSnapshot(path) {
  const all = readFileSync(path);
  const length = all.readUInt32LE(0);
  const meta = JSON.parse(all.subarray(4, 4 + length).toString("utf8"));
  const body = all.subarray(4 + length);
  return [meta, new Uint8Array(body.buffer, body.byteOffset, body.byteLength)];
}
function writeSnapshot(path, meta, snapshot) {
  let json = JSON.stringify(meta);
  json += " ".repeat((16 - ((4 + json.length) % 16)) % 16); // Pyodide reads its header as Uint32Array
  const head = Buffer.alloc(4);
  head.writeUInt32LE(json.length, 0);
  writeFileSync(path, Buffer.concat([head, Buffer.from(json, "utf8"), snapshot]));
}

const [meta, snapshot] = mode === "restore" || mode === "sizes" ? readSnapshot(snapshotPath) : [null, null];
const loaded = {};

/** loadPyodide's createPyodideModule: the runtime, with pydantic-core's library loaded before its initialisation. */
async function createPyodideModule(settings) {
  settings.preRun = [...[].concat(settings.preRun ?? []), (Module) => {
    Module.addRunDependency("trainmem-native-library");
    const dso = Module.newDSO(libraryPath, undefined, "loading");
    dso.global = false; // Python's dlopen is RTLD_LOCAL
    loaded.table_base = Module.wasmTable.length;
    loaded.heap_base = Module.HEAPU32[Module._emscripten_get_sbrk_ptr() >>> 2]; // the library's memory goes here
    const flags = { loadAsync: true, nodelete: true, allowUndefined: true };
    Module.loadWebAssemblyModule(libraryModule, flags, libraryPath, {}).then((exports) => {
      dso.exports = exports;
      loaded.heap_start = Module.HEAPU32[Module._emscripten_get_sbrk_ptr() >>> 2];
      for (const handle of meta?.handles ?? []) Module.LDSO.loadedLibsByHandle[handle] = dso;
      Module.removeRunDependency("trainmem-native-library");
    });
  }];
  const Module = await createRuntime(settings);
  if (snapshot) {
    if (loaded.table_base !== meta.table_base || loaded.heap_base !== meta.heap_base || loaded.heap_start !== meta.heap_start) {
      throw new Error(`the library did not load where it was: ${JSON.stringify(loaded)} against ${JSON.stringify(meta)}`);
    }
    if (mode === "sizes") return Module;
    Module.growMemory(snapshot.byteLength); // restoreSnapshot copies without growing
  }
  return Module;
}

const options = {
  indexURL: `${runtime}/`,
  lockFileContents: { info: manifest.python.lock_info, packages: {} },
  env: { PYDANTIC_DISABLE_PLUGINS: "__all__" },
  stdout: () => {},
  stderr: (line) => console.error(line),
  createPyodideModule,
};
if (mode === "sizes") {
  options.createPyodideModule = async (settings) => {
    settings.noInitialRun = true;
    const Module = await createPyodideModule(settings);
    measureSizes(Module);
    process.exit(0);
  };
}
if (mode === "make") options._makeSnapshot = true;
if (mode === "restore") options._loadSnapshot = snapshot;

/** gzip -9 sizes of the snapshot's memory: as written, trimmed and zeroed, and as a delta to a fresh runtime's memory. */
function measureSizes(Module) {
  const header = new Uint32Array(snapshot.buffer, snapshot.byteOffset, 4);
  const memory = snapshot.subarray(header[1]);
  const trimmed = new Uint8Array(memory.subarray(0, meta.heap_top));
  // dlmalloc's chunks from the first (at the heap's start) to the top: [prev_foot, head = size | bits,
  // payload]; a chunk is free when its CINUSE bit (2) is clear. A free chunk's payload begins with the
  // allocator's links (fd, bk, child[2], parent, index: 24 bytes), kept; the rest is stale.
  const view = new DataView(trimmed.buffer);
  let free = 0;
  for (let chunk = meta.heap_start; chunk < meta.heap_top;) {
    const head = view.getUint32(chunk + 4, true);
    const size = head & ~7;
    if (size < 16 || chunk + size > meta.heap_top) throw new Error(`not a dlmalloc chunk at ${chunk}`);
    if (!(head & 2)) {
      free += size;
      if (size > 32) trimmed.fill(0, chunk + 32, chunk + size);
    }
    chunk += size;
  }
  const fresh = Module.HEAPU8;
  const delta = new Uint8Array(trimmed);
  for (let i = 0; i < Math.min(delta.length, fresh.length); i++) delta[i] ^= fresh[i];
  const gz = (bytes) => gzipSync(bytes, { level: 9 }).byteLength;
  console.log(JSON.stringify({
    mode, snapshot_bytes: snapshot.byteLength, snapshot_gzip9: gz(snapshot), heap_start: meta.heap_start, heap_top: meta.heap_top,
    free_chunk_bytes: free, trimmed_zeroed_gzip9: gz(trimmed), delta_to_fresh_gzip9: gz(delta),
  }));
}

const c0 = cpu();
const pyodide = await loadPyodide(options);
const c1 = cpu();
const result = { mode, start_cpu_s: c0 - started, loadpyodide_cpu_s: c1 - c0, library: loaded };

// The worker's files: the bundle on sys.path, the library's file (its code is loaded), the page's module.
const zipPath = "/lib/trainmem-site-packages.zip";
pyodide.FS.writeFile(zipPath, readFileSync(join(site, manifest.python.zip)));
pyodide.FS.mkdirTree(libraryPath.slice(0, libraryPath.lastIndexOf("/")));
pyodide.FS.writeFile(libraryPath, libraryBytes);
for (const name of readdirSync(join(site, "py")).filter((n) => n.endsWith(".py"))) {
  pyodide.FS.writeFile(`/home/pyodide/${name}`, readFileSync(join(site, "py", name), "utf8"));
}
const c2 = cpu();
const compute = (setup) => {
  pyodide.globals.set("setup_json", JSON.stringify(setup));
  const answer = pyodide.runPython("import trainmem_web; trainmem_web.compute(setup_json, True)");
  pyodide.runPython("del setup_json");
  return answer;
};
if (mode !== "restore") {
  const worker = readFileSync(join(site, "js", "worker.js"), "utf8");
  const bootstrap = worker.match(/const BOOTSTRAP = `([\s\S]*?)`;/)[1];
  const natives = JSON.stringify(JSON.stringify({ [library.module]: libraryPath }));
  pyodide.runPython(`${bootstrap}\n_install(${JSON.stringify(zipPath)}, ${natives})\ndel _install\nimport trainmem_web\n`);
}
const c3 = cpu();
result.files_cpu_s = c2 - c1;
result.import_cpu_s = c3 - c2;
if (mode === "make") {
  compute(FIRST);
  const c4 = cpu();
  const handles = Object.entries(pyodide._module.LDSO.loadedLibsByHandle)
    .filter(([handle, dso]) => Number(handle) !== 0 && dso.name === libraryPath)
    .map(([handle]) => Number(handle));
  const bytes = pyodide.makeMemorySnapshot();
  const heapTop = pyodide._module.HEAPU32[pyodide._module._emscripten_get_sbrk_ptr() >>> 2];
  writeSnapshot(snapshotPath, { ...loaded, handles, heap_top: heapTop }, bytes);
  Object.assign(result, { first_compute_cpu_s: c4 - c3, snapshot_cpu_s: cpu() - c4, snapshot_bytes: bytes.byteLength, handles });
}
const c5 = cpu();
const answer = compute(ANSWER);
const c6 = cpu();
Object.assign(result, {
  compute_cpu_s: c6 - c5, to_answer_cpu_s: c6 - started,
  answer_sha: createHash("sha256").update(answer).digest("hex").slice(0, 16), ok: JSON.parse(answer).ok,
  modules: pyodide.runPython("import sys; len(sys.modules)"),
});
const c7 = cpu();
compute(ANSWER);
result.same_again_cpu_s = cpu() - c7;
if (process.env.CASES) {
  const hash = createHash("sha256");
  for (const setup of JSON.parse(readFileSync(process.env.CASES, "utf8")).setups) hash.update(compute(setup));
  result.cases_sha = hash.digest("hex").slice(0, 16);
}
console.log(JSON.stringify(result));

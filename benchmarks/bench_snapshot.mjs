// Benchmark (not a test): Pyodide's memory snapshot (issue 14, repeat visits; web/js/snapshot.js)
// under Node, the built site booted as its worker boots it (web/js/worker.js), with CPU time of the
// process for each stage (which a loaded machine disturbs less than wall time).
//
//   node benchmarks/bench_snapshot.mjs plain SITE_DIR
//       loadPyodide as a first visit without snapshots, the bundle, `import trainmem_web`, one compute
//   node benchmarks/bench_snapshot.mjs make SITE_DIR SNAPSHOT.bin [PREIMPORT.py]
//       the same with loadPyodide({_makeSnapshot: true}) and the memory written to SNAPSHOT.bin right
//       after loadPyodide (after running PREIMPORT.py, when given), as the worker makes it
//   node benchmarks/bench_snapshot.mjs restore SITE_DIR SNAPSHOT.bin
//       loadPyodide({_loadSnapshot}) from SNAPSHOT.bin, then the same as plain
//
// Prints one JSON line; answer_sha (the default compute's answer) and, with CASES=cases.json
// ({"setups": [...]}, e.g. build_site.py IMPORT_CASES), cases_sha (every case's answer with
// suggestions) must be the same in the three modes.

import { readFileSync, writeFileSync, mkdtempSync, readdirSync, copyFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { gunzipSync } from "node:zlib";
import { fileURLToPath, pathToFileURL } from "node:url";
import { createHash } from "node:crypto";
const repo = resolve(fileURLToPath(new URL(".", import.meta.url)), "..");
const { loadPyodide } = await import(pathToFileURL(join(repo, "web/node_modules/pyodide/pyodide.mjs")).href);
const [mode, site, snapPath, preimport] = process.argv.slice(2);
const manifest = JSON.parse(readFileSync(join(site, "manifest.json"), "utf8"));
function siteRuntime(site) {
  const folder = mkdtempSync(join(tmpdir(), "trainmem-bench-snapshot-"));
  for (const name of readdirSync(join(site, "pyodide"))) {
    if (name.endsWith(".gz")) writeFileSync(join(folder, name.slice(0, -3)), gunzipSync(readFileSync(join(site, "pyodide", name))));
    else copyFileSync(join(site, "pyodide", name), join(folder, name));
  }
  return `${folder}/`;
}
const indexURL = siteRuntime(site);
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };
let sitePackages = null;
const opts = {
  indexURL, lockFileContents: { info: manifest.python.lock_info, packages: {} },
  env: { PYDANTIC_DISABLE_PLUGINS: "__all__" },
  fsInit: (FS, { sitePackages: f }) => { sitePackages = f; },
  stdout: () => {}, stderr: (l) => console.error(l),
};
if (mode === "make") opts._makeSnapshot = true;
if (mode === "restore") opts._loadSnapshot = new Uint8Array(readFileSync(snapPath));
const c0 = cpu(), t0 = performance.now();
const pyodide = await loadPyodide(opts);
const c1 = cpu();
const result = { loadpyodide_cpu_s: c1 - c0, loadpyodide_s: (performance.now() - t0) / 1000, modules_after_load: pyodide.runPython("import sys; len(sys.modules)") };
if (mode === "make") {
  const cp = cpu();
  if (preimport) pyodide.runPython(readFileSync(preimport, "utf8"));
  const c2 = cpu(); result.preimport_cpu_s = c2 - cp;
  const snap = pyodide.makeMemorySnapshot();
  result.snapshot_cpu_s = cpu() - c2; result.snapshot_bytes = snap.length;
  writeFileSync(snapPath, snap);
}
// install the bundle as the worker does
const c3 = cpu();
const zipPath = "/lib/trainmem-site-packages.zip";
pyodide.FS.writeFile(zipPath, readFileSync(join(site, manifest.python.zip)));
const Module = pyodide._module; const nativePaths = {};
for (const lib of manifest.python.native) {
  const bytes = gunzipSync(readFileSync(join(site, `${lib.url}.gz`)));
  const path = `${sitePackages}/${lib.path}`;
  pyodide.FS.mkdirTree(path.slice(0, path.lastIndexOf("/")));
  pyodide.FS.writeFile(path, bytes);
  Module.preloadedWasm[path] = await Module.loadWebAssemblyModule(await WebAssembly.compile(bytes), { loadAsync: true, nodelete: true, allowUndefined: true }, path, {});
  nativePaths[lib.module] = path;
}
for (const name of readdirSync(join(site, "py")).filter((n) => n.endsWith(".py"))) pyodide.FS.writeFile(`/home/pyodide/${name}`, readFileSync(join(site, "py", name), "utf8"));
const worker = readFileSync(join(site, "js", "worker.js"), "utf8");
const bootstrap = worker.match(/const BOOTSTRAP = `([\s\S]*?)`;/)[1];
const ns = pyodide.globals.get("dict")(); pyodide.runPython(bootstrap, { globals: ns }); ns.get("_install")(zipPath, JSON.stringify(nativePaths)); ns.destroy();
const c4 = cpu();
const bridge = pyodide.pyimport("trainmem_web");
const c5 = cpu();
const setup = JSON.stringify({ model: { preset: "llama-3-8b" }, micro_batch_size: 2 });
const answer = bridge.compute(setup, false);
const c6 = cpu(); const t6 = performance.now();
if (process.env.CASES) {
  const cases = JSON.parse(readFileSync(process.env.CASES, "utf8")).setups;
  const h = createHash("sha256");
  for (const c of cases) { const a = bridge.compute(JSON.stringify(c), true); h.update(a); }
  result.cases = cases.length; result.cases_sha = h.digest("hex").slice(0, 16);
}
Object.assign(result, { files_cpu_s: c4 - c3, import_cpu_s: c5 - c4, compute_cpu_s: c6 - c5, total_cpu_s: c6 - c0, total_s: (t6 - t0) / 1000,
  answer_sha: createHash("sha256").update(answer).digest("hex").slice(0, 16), ok: JSON.parse(answer).ok,
  modules: pyodide.runPython("import sys; len(sys.modules)") });
console.log(JSON.stringify(result));

// Benchmark (not a test): the page's recompute in Pyodide under Node, with the core of a checkout.
//
//   node benchmarks/bench_pyodide_recompute.mjs CHECKOUT [WHEELS_DIR] [ROUNDS]
//
// Loads the npm package's Pyodide (web/node_modules/pyodide), the site's wheels except trainmem
// (WHEELS_DIR, default CHECKOUT/.cache/site-wheels: build_site.py keeps them there), and
// CHECKOUT/core/trainmem with CHECKOUT/web/py/trainmem_web.py copied into the in-memory file
// system; then, for ROUNDS (default 20) sequence lengths the page has not seen, what the page's
// worker runs for a change it did not prefetch: the fast answer (`compute(text, false, fraction)`)
// and then the replayed one (`compute(text, false)`). Prints one JSON line: the CPU time of this
// process (less disturbed by a loaded machine than wall time) of each, min and median, in ms.
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
const repo = resolve(here, "..");
const [checkoutArg, wheelsArg, roundsArg] = process.argv.slice(2);
const checkout = resolve(checkoutArg || repo);
const wheelsDir = resolve(wheelsArg || join(checkout, ".cache", "site-wheels"));
const rounds = Number(roundsArg || 20);
const { loadPyodide } = await import(pathToFileURL(join(repo, "web", "node_modules", "pyodide", "pyodide.mjs")).href);
const pyodide = await loadPyodide({ env: { PYDANTIC_DISABLE_PLUGINS: "__all__", HOME: "/home/pyodide" } });
const wheels = readdirSync(wheelsDir)
  .filter((name) => name.endsWith(".whl") && !name.startsWith("trainmem-"))
  .map((name) => resolve(wheelsDir, name));
await pyodide.loadPackage(wheels, { messageCallback: () => {} });
const copy = (from, to) => {
  for (const name of readdirSync(from)) {
    const path = join(from, name);
    if (name === "__pycache__") continue;
    if (statSync(path).isDirectory()) {
      pyodide.FS.mkdirTree(join(to, name));
      copy(path, join(to, name));
    } else {
      pyodide.FS.writeFile(join(to, name), readFileSync(path));
    }
  }
};
pyodide.FS.mkdirTree("/home/pyodide/trainmem");
copy(join(checkout, "core", "trainmem"), "/home/pyodide/trainmem");
pyodide.FS.writeFile("/home/pyodide/trainmem_web.py", readFileSync(join(checkout, "web", "py", "trainmem_web.py")));
pyodide.runPython("import sys; sys.path.insert(0, '/home/pyodide')");
const bridge = pyodide.pyimport("trainmem_web");
const base = { model: { preset: "llama-3.1-8b" }, micro_batch_size: 1, sequence_length: 4096,
  activation_checkpointing: "full", parallelism: { num_gpus: 8, strategy: "zero", zero_stage: 2 }, gpu: "h100-sxm-80gb" };
const text = (sequence) => JSON.stringify({ ...base, sequence_length: sequence });
const first = JSON.parse(bridge.compute(text(4096), false));
if (!first.ok) throw new Error(JSON.stringify(first.errors));
const top = first.report.ranks[first.report.heaviest_rank];
const fraction = (top.peak_reserved_bytes - top.peak_allocated_bytes) / top.peak_allocated_bytes;
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e3; };
const fast = [], replayed = [], pair = [];
for (let round = 0; round < rounds; round++) {
  const asked = text(1000 + 37 * round);
  const c0 = cpu();
  const a = bridge.compute(asked, false, fraction);
  const c1 = cpu();
  const b = bridge.compute(asked, false);
  const c2 = cpu();
  if (!JSON.parse(a).ok || !JSON.parse(b).ok) throw new Error("a compute failed");
  fast.push(c1 - c0); replayed.push(c2 - c1); pair.push(c2 - c0);
}
const stats = (values) => {
  const sorted = [...values].sort((x, y) => x - y);
  return { min: +sorted[0].toFixed(2), median: +sorted[Math.floor(sorted.length / 2)].toFixed(2) };
};
console.log(JSON.stringify({ checkout, rounds, fast_ms: stats(fast), replayed_ms: stats(replayed), pair_ms: stats(pair) }));

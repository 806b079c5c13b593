// Benchmark (not a test): the page's Python start-up in Pyodide under Node — `import trainmem_web`
// and the first compute of the default setup — with the core of THIS checkout, not a built wheel.
// benchmarks/bench_import.py drives it (and measures the same under CPython).
//
//   node bench_pyodide_import.mjs compile SITE_DIR SOURCES_DIR
//       compile every .py under SOURCES_DIR (a copy of core/trainmem and web/py/trainmem_web.py)
//       to unchecked-hash bytecode in __pycache__, by Pyodide's own interpreter (the npm package's
//       Pyodide, the same version as the site's, with the whole standard library), as the site's
//       build does for the trainmem wheel (web/tools/precompile.mjs)
//   node bench_pyodide_import.mjs profile SITE_DIR SOURCES_DIR SETUP.json
//       the same under cProfile (the npm package's Pyodide, whose standard library has cProfile)
//   node bench_pyodide_import.mjs measure SITE_DIR SOURCES_DIR SETUP.json
//       a fresh Pyodide (SITE_DIR/pyodide: the built site's runtime, from its .wasm.gz, and pruned,
//       precompiled standard library), the build's wheels except trainmem (loadPackage, from
//       .cache/site-wheels/: build_site.py keeps them out of the site), SOURCES_DIR copied
//       into the in-memory file system (as loadPackage unpacks a wheel); prints one JSON line:
//       seconds (wall clock) and CPU seconds of this process for the import and the first compute

import { copyFileSync, mkdtempSync, readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import { gunzipSync } from "node:zlib";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
const repo = resolve(here, "..");
const { loadPyodide } = await import(pathToFileURL(join(repo, "web", "node_modules", "pyodide", "pyodide.mjs")).href);

const [mode, site, sources, setupPath] = process.argv.slice(2);
const siteWheels = join(repo, ".cache", "site-wheels"); // build_site.py SITE_WHEELS

/** The site's pyodide/ as Node's loader reads it: X.gz (build_site.py store_compressed) decompressed. */
function siteRuntime() {
  const folder = mkdtempSync(join(tmpdir(), "trainmem-bench-pyodide-"));
  for (const name of readdirSync(join(site, "pyodide"))) {
    if (name.endsWith(".gz")) writeFileSync(join(folder, name.slice(0, -3)), gunzipSync(readFileSync(join(site, "pyodide", name))));
    else copyFileSync(join(site, "pyodide", name), join(folder, name));
  }
  return `${folder}/`;
}
// Compiling needs the whole standard library (compileall): the npm package's; measuring, the site's.
const pyodide = await loadPyodide({
  indexURL: mode === "compile" || mode === "profile" ? undefined : siteRuntime(),
  ...(mode === "measure" && { lockFileURL: join(repo, "web", "node_modules", "pyodide", "pyodide-lock.json") }),
  env: {
    PYDANTIC_DISABLE_PLUGINS: "__all__",
    HOME: "/home/pyodide",
    ...(process.env.PYTHONPROFILEIMPORTTIME ? { PYTHONPROFILEIMPORTTIME: "1" } : {}), // -X importtime, on stderr
  },
  stdout: (line) => console.log(line),
  stderr: (line) => console.error(line),
});

if (mode === "compile") {
  pyodide.FS.mkdir("/sources");
  pyodide.FS.mount(pyodide.FS.filesystems.NODEFS, { root: resolve(sources) }, "/sources");
  pyodide.runPython(`
import compileall, py_compile
ok = compileall.compile_dir("/sources", quiet=1, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
assert ok, "compileall failed"
`);
} else if (mode === "measure" || mode === "profile") {
  const wheels = readdirSync(siteWheels)
    .filter((name) => name.endsWith(".whl") && !name.startsWith("trainmem-"))
    .map((name) => resolve(siteWheels, name));
  const failures = [];
  // The page installs no wheel (its worker puts one zip on sys.path): what loadPackage imports to
  // unpack these (tarfile, importlib.metadata, ...) is forgotten again, so the import below pays for
  // what it imports itself, as in the page.
  const started = pyodide.runPython("import sys; list(sys.modules)").toJs();
  await pyodide.loadPackage(wheels, { messageCallback: () => {}, errorCallback: (m) => failures.push(m) });
  if (failures.length) throw new Error(failures.join("; "));
  pyodide.globals.set("started", started);
  pyodide.runPython("for name in set(sys.modules) - set(started): del sys.modules[name]\ndel started");
  const walk = (dir) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      const target = `/home/pyodide/${relative(sources, path)}`;
      if (statSync(path).isDirectory()) {
        pyodide.FS.mkdirTree(target);
        walk(path);
      } else {
        pyodide.FS.writeFile(target, readFileSync(path));
      }
    }
  };
  walk(resolve(sources));
  pyodide.runPython("import sys; sys.path.insert(0, '/home/pyodide')");
  const setupJson = readFileSync(setupPath, "utf8");
  if (mode === "profile") {
    pyodide.globals.set("setup_json", setupJson);
    pyodide.runPython(`
import cProfile, io, pstats
profile = cProfile.Profile()
profile.enable()
import trainmem_web
profile.disable()
for phase in ("import", "first compute"):
    for order in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats(order).print_stats(70)
        print(f"==== {phase}, by {order}")
        print(out.getvalue())
    profile = cProfile.Profile()
    profile.enable()
    trainmem_web.compute(setup_json, False)
    profile.disable()
`);
    process.exit(0);
  }
  const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };
  const t0 = performance.now(), c0 = cpu();
  const bridge = pyodide.pyimport("trainmem_web");
  const t1 = performance.now(), c1 = cpu();
  const answer = JSON.parse(bridge.compute(setupJson, false));
  const t2 = performance.now(), c2 = cpu();
  bridge.compute(setupJson, false);
  const t3 = performance.now();
  if (!answer.ok) throw new Error(JSON.stringify(answer.errors));
  const modules = pyodide.runPython("import sys; len(sys.modules)");
  console.log(JSON.stringify({
    import_s: (t1 - t0) / 1000, first_compute_s: (t2 - t1) / 1000, second_compute_s: (t3 - t2) / 1000,
    import_cpu_s: c1 - c0, first_compute_cpu_s: c2 - c1, modules,
  }));
} else {
  console.error("usage: node bench_pyodide_import.mjs compile|measure SITE_DIR SOURCES_DIR [SETUP.json]");
  process.exit(2);
}

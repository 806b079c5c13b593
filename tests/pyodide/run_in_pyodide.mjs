// Runs trainmem inside Pyodide under Node (no browser): the wheels the web page's Python bundle is
// made from (build_site.py: .cache/site-wheels/), or the built site itself, plus pytest, so that a
// break that only shows under WebAssembly fails a test.
//
//   node run_in_pyodide.mjs estimate WHEELS_DIR CASES.json OUT.json
//       estimate each setup of CASES.json ([setup, ...]) with the page's bridge; write the answers
//   node run_in_pyodide.mjs site SITE_DIR CASES.json OUT.json
//       the built site as the page's worker (web/js/worker.js) runs it, from the files the page
//       fetches: its Pyodide (the runtime from pyodide.asm.wasm.gz, the pruned python_stdlib.zip, the
//       lock's info inline), python/site-packages.zip on sys.path, pydantic-core from its .wasm.gz
//       found by the worker's own finder (its BOOTSTRAP), and py/; estimate each setup, write each
//       report's Markdown too
//   node run_in_pyodide.mjs pytest WHEELS_DIR TEST_WHEELS_DIR REPO_DIR [pytest args...]
//       run pytest over REPO_DIR (mounted read-only in spirit at /repo) with the core from the wheels

import { copyFileSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { gunzipSync } from "node:zlib";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
const repo = resolve(here, "..", "..");
// The same Pyodide the page ships: web/node_modules (npm ci), pinned in web/package.json.
const { loadPyodide } = await import(pathToFileURL(join(repo, "web", "node_modules", "pyodide", "pyodide.mjs")).href);

const [mode, wheelsDir, ...rest] = process.argv.slice(2);
const wheelsIn = (dir) => readdirSync(dir).filter((name) => name.endsWith(".whl")).map((name) => resolve(dir, name));

/** The site's pyodide/ as Node's loader reads it (from files, by name): the stored-compressed
 *  files (X.gz, build_site.py store_compressed) decompressed, the others as they are. */
function siteRuntime(site) {
  const folder = mkdtempSync(join(tmpdir(), "trainmem-site-pyodide-"));
  for (const name of readdirSync(join(site, "pyodide"))) {
    if (name.endsWith(".gz")) writeFileSync(join(folder, name.slice(0, -3)), gunzipSync(readFileSync(join(site, "pyodide", name))));
    else copyFileSync(join(site, "pyodide", name), join(folder, name));
  }
  return `${folder}/`;
}

const output = [];
const manifest = mode === "site" ? JSON.parse(readFileSync(join(wheelsDir, "manifest.json"), "utf8")) : null;
let sitePackages = null;
const pyodide = await loadPyodide({
  ...(manifest && {
    // As the page's worker loads it (web/js/worker.js boot).
    indexURL: siteRuntime(wheelsDir),
    lockFileContents: { info: manifest.python.lock_info, packages: {} },
    env: { PYDANTIC_DISABLE_PLUGINS: "__all__" },
    fsInit: (FS, { sitePackages: folder }) => {
      sitePackages = folder;
    },
  }),
  stdout: (line) => output.push(line) && mode === "pytest" && console.log(line),
  stderr: (line) => console.error(line),
});

/** The page's Python bundle (python/ of the site, build_site.py bundle_python) installed as the
 *  worker installs it, with the worker's own bootstrap code. */
async function installSiteBundle(site, python) {
  const zipPath = "/lib/trainmem-site-packages.zip";
  pyodide.FS.writeFile(zipPath, readFileSync(join(site, python.zip)));
  const Module = pyodide._module;
  const nativePaths = {};
  for (const lib of python.native) {
    const bytes = gunzipSync(readFileSync(join(site, `${lib.url}.gz`)));
    const path = `${sitePackages}/${lib.path}`;
    pyodide.FS.mkdirTree(path.slice(0, path.lastIndexOf("/")));
    pyodide.FS.writeFile(path, bytes);
    const flags = { loadAsync: true, nodelete: true, allowUndefined: true };
    Module.preloadedWasm[path] = await Module.loadWebAssemblyModule(await WebAssembly.compile(bytes), flags, path, {});
    nativePaths[lib.module] = path;
  }
  const worker = readFileSync(join(site, "js", "worker.js"), "utf8");
  const bootstrap = worker.match(/const BOOTSTRAP = `([\s\S]*?)`;/)[1];
  const namespace = pyodide.globals.get("dict")();
  pyodide.runPython(bootstrap, { globals: namespace });
  namespace.get("_install")(zipPath, JSON.stringify(nativePaths));
  namespace.destroy();
}

async function load(wheels) {
  const failures = [];
  await pyodide.loadPackage(wheels, { messageCallback: () => {}, errorCallback: (m) => failures.push(m) });
  if (failures.length) throw new Error(`loadPackage: ${failures.join("; ")}`);
}

if (mode === "estimate") {
  const [casesPath, outPath] = rest;
  await load(wheelsIn(wheelsDir));
  pyodide.FS.writeFile("/home/pyodide/trainmem_web.py", readFileSync(join(repo, "web", "py", "trainmem_web.py"), "utf8"));
  const bridge = pyodide.pyimport("trainmem_web");
  const cases = JSON.parse(readFileSync(casesPath, "utf8"));
  const answers = cases.map((setup) => JSON.parse(bridge.compute(JSON.stringify(setup))));
  answers.push({ platform: pyodide.runPython("import sys, platform; f'{sys.platform} {platform.python_version()}'") });
  writeFileSync(outPath, JSON.stringify(answers));
} else if (mode === "site") {
  const [casesPath, outPath] = rest;
  const site = wheelsDir;
  await installSiteBundle(site, manifest.python);
  for (const name of readdirSync(join(site, "py")).filter((n) => n.endsWith(".py"))) {
    pyodide.FS.writeFile(`/home/pyodide/${name}`, readFileSync(join(site, "py", name), "utf8"));
  }
  const bridge = pyodide.pyimport("trainmem_web");
  // CASES.json: [setup, ...], or {setups, trainer_files: [{name: text}, ...], form, formats}
  const raw = JSON.parse(readFileSync(casesPath, "utf8"));
  const cases = Array.isArray(raw) ? raw : raw.setups;
  const answers = cases.map((setup) => {
    const answer = JSON.parse(bridge.compute(JSON.stringify(setup)));
    if (answer.ok) answer.markdown = bridge.markdown(JSON.stringify(answer.report), "");
    answer.model_inputs = JSON.parse(bridge.model_inputs(JSON.stringify(setup?.model ?? null)));
    return answer;
  });
  const trainerFiles = Array.isArray(raw) ? [] : raw.trainer_files.map((files) => JSON.parse(bridge.read_files(JSON.stringify(files), JSON.stringify(raw.form))));
  const written = Array.isArray(raw) ? [] : raw.formats.map((format) => JSON.parse(bridge.write_file(JSON.stringify(raw.form), format)));
  const stdlib = pyodide.runPython("import sys; [p for p in sys.path if p.endswith('.zip')][0]");
  const yaml = pyodide.runPython(`
import json, yaml
from trainmem.files import parse_yaml_text
json.dumps({"with_libyaml": yaml.__with_libyaml__, "version": yaml.__version__,
            "parsed": parse_yaml_text("trainer:\\n  lr: 2.0e-5\\n  layers: [1, 2]\\n", "config.yaml")})`);
  answers.push({ stdlib_zip: stdlib, yaml: JSON.parse(yaml), trainer_files: trainerFiles, written });
  writeFileSync(outPath, JSON.stringify(answers));
} else if (mode === "pytest") {
  const [testWheelsDir, repoDir, ...pytestArgs] = rest;
  await load([...wheelsIn(wheelsDir), ...wheelsIn(testWheelsDir)]);
  pyodide.FS.mkdir("/repo");
  pyodide.FS.mount(pyodide.FS.filesystems.NODEFS, { root: resolve(repoDir) }, "/repo");
  pyodide.FS.writeFile("/home/pyodide/pyodide_pytest_plugin.py", readFileSync(join(here, "pyodide_pytest_plugin.py"), "utf8"));
  pyodide.globals.set("pytest_args", pyodide.toPy(pytestArgs));
  const code = pyodide.runPython(`
import os, sys
os.chdir("/tmp")  # hypothesis' example database and pytest's cache stay out of the repository
sys.path.insert(0, "/home/pyodide")
import pytest
pytest.main(["--rootdir=/repo", "-c", "/repo/pyproject.toml", "-p", "pyodide_pytest_plugin",
             "-p", "no:cacheprovider", *pytest_args])
`);
  process.exitCode = Number(code);
} else {
  console.error("usage: run_in_pyodide.mjs estimate|pytest ...");
  process.exitCode = 2;
}

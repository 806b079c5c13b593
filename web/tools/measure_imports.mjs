// Build step (run by build_site.py): which top-level modules of Python's standard library the
// page really imports. Pyodide (under Node) loads the site's wheels the way the page's worker
// does (loadPackage), then runs the page's bridge (web/py/trainmem_web.py) over sample setups:
// estimates with and without suggestions, invalid setups (the error path), a config.json's
// architecture, trainer files read and written, the Markdown report and comparison, YAML. precompile.mjs then drops every other
// top-level module from python_stdlib.zip (about half of it: unittest, xml, multiprocessing,
// the REPL, pydoc, ...). A module the page imports but this run does not reach would fail to
// import in the browser: tests/pyodide/test_site_stdlib.py runs the bridge on the pruned zip.
//
//   node web/tools/measure_imports.mjs SITE_DIR CASES.json OUT.json

import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { loadPyodide } from "pyodide";

const [site, casesPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node measure_imports.mjs SITE_DIR CASES.json OUT.json");
  process.exit(2);
}
const pyodide = await loadPyodide({ stdout: () => {}, stderr: (line) => console.error(line) });
const wheels = readdirSync(resolve(site, "wheels")).filter((n) => n.endsWith(".whl")).map((n) => resolve(site, "wheels", n));
await pyodide.loadPackage(wheels, { messageCallback: () => {} });
for (const name of readdirSync(resolve(site, "py")).filter((n) => n.endsWith(".py"))) {
  pyodide.FS.writeFile(`/home/pyodide/${name}`, readFileSync(resolve(site, "py", name), "utf8"));
}
pyodide.globals.set("cases_json", readFileSync(casesPath, "utf8"));
const used = pyodide.runPython(`
import json, sys, zipfile
sys.path.insert(0, "/home/pyodide")
import trainmem_web

cases = json.loads(cases_json)
if isinstance(cases, list):
    cases = {"setups": cases, "trainer_files": []}
reports = []
for setup in cases["setups"]:
    for suggestions in (False, True):
        answer = json.loads(trainmem_web.compute(json.dumps(setup), suggestions))
        if answer["ok"]:
            reports.append(answer["report"])
    trainmem_web.architecture(json.dumps(setup.get("model", {})))
    trainmem_web.model_inputs(json.dumps(setup.get("model", {})))
trainmem_web.compute("{not json")
form = json.dumps(cases["setups"][0])
for files in cases["trainer_files"]:
    trainmem_web.read_files(json.dumps(files), form)
for file_format in trainmem_web.file_formats():
    trainmem_web.write_file(form, file_format["format"])
if reports:
    trainmem_web.markdown(json.dumps(reports[0]))
    trainmem_web.compare_markdown(json.dumps(reports[0]), json.dumps(reports[-1]))
try:
    from trainmem.files import parse_yaml_text
    parse_yaml_text("a: [1, 2]\\nb: {c: d}\\n", "sample.yaml")
except ValueError:
    pass  # no PyYAML among the wheels

stdlib = zipfile.ZipFile(next(p for p in sys.path if p.endswith(".zip")))
tops = {name.split("/")[0].removesuffix(".py") for name in stdlib.namelist()}
json.dumps(sorted(tops & {name.split(".")[0] for name in sys.modules}))
`);
writeFileSync(outPath, used);
console.error(`measure_imports: ${JSON.parse(used).length} top-level standard-library modules imported`);

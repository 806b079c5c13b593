// Build step (run by build_site.py): add Python 3.14 bytecode to the site's wheels, compiled
// by Pyodide's own interpreter under Node, so the browser imports pydantic and trainmem
// without compiling their sources first (about a second less to interactive).
//
//   node web/tools/precompile.mjs _site/wheels
//
// The .pyc files are "unchecked-hash" pycs in __pycache__ beside the sources (PEP 552): the
// interpreter uses them without comparing timestamps, and tracebacks still show the source.
// Each rewritten wheel lists its new files in RECORD (without hashes, as PEP 376 allows).

import { resolve } from "node:path";
import { loadPyodide } from "pyodide";

const wheels = process.argv[2];
if (!wheels) {
  console.error("usage: node precompile.mjs WHEELS_DIR");
  process.exit(2);
}

const pyodide = await loadPyodide({ stdout: () => {}, stderr: (line) => console.error(line) });
pyodide.FS.mkdir("/wheels");
pyodide.FS.mount(pyodide.FS.filesystems.NODEFS, { root: resolve(wheels) }, "/wheels");
pyodide.runPython(`
import compileall, os, py_compile, sys, tempfile, zipfile

SITE_PACKAGES = next(p for p in sys.path if p.endswith("site-packages"))
EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same inputs give the same wheel bytes

def precompile(path):
    with zipfile.ZipFile(path) as source:
        names = source.namelist()
        if any(name.endswith(".pyc") for name in names):
            return 0
        work = tempfile.mkdtemp()
        source.extractall(work)
    compileall.compile_dir(
        work, quiet=2, stripdir=work, prependdir=SITE_PACKAGES,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    added = sorted(
        os.path.relpath(os.path.join(folder, name), work).replace(os.sep, "/")
        for folder, _, files in os.walk(work) for name in files if name.endswith(".pyc")
    )
    record = next(name for name in names if name.endswith(".dist-info/RECORD"))
    with open(os.path.join(work, record), "a", encoding="utf-8") as file:
        file.writelines(f"{name},,\\n" for name in added)
    temporary = path + ".tmp"
    with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as target:
        for name in [n for n in names if n != record] + added + [record]:
            if name.endswith("/"):
                continue
            info = zipfile.ZipInfo(name, date_time=EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            with open(os.path.join(work, name), "rb") as file:
                target.writestr(info, file.read())
    os.replace(temporary, path)
    return len(added)

for name in sorted(os.listdir("/wheels")):
    if name.endswith(".whl"):
        print(f"precompile: {name}: {precompile('/wheels/' + name)} .pyc files", file=sys.stderr)
`);

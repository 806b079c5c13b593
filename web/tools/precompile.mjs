// Build step (run by build_site.py): Python 3.14 bytecode for everything the page imports,
// compiled by Pyodide's own interpreter under Node, so that the browser does not compile
// Python source on every visit. Measured under Node on a 2-core machine, starting Pyodide
// went from about 2.6 s to 0.6 s, and importing pydantic and trainmem from about 1.1 s to 0.4 s.
//
//   node web/tools/precompile.mjs SITE_DIR [KEEP.json]
//
// * SITE_DIR/pyodide/python_stdlib.zip: Pyodide ships the standard library as sources; each
//   module is replaced by its bytecode (module.pyc beside where module.py was, which is where
//   zipimport looks), as Pyodide does for its own packages. Tracebacks keep the file names.
// * SITE_DIR/wheels/*.whl: "unchecked-hash" pycs (PEP 552), used without comparing timestamps
//   and listed in RECORD: for trainmem in __pycache__ beside its sources, for the other wheels
//   in place of the sources (as Pyodide ships packages), which keeps the site small.
// * KEEP.json (from measure_imports.mjs): the top-level standard-library modules the page
//   imports; the others are left out of python_stdlib.zip.
// Timestamps inside the archives are fixed, so the same inputs give the same bytes.

import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { loadPyodide } from "pyodide";

const site = process.argv[2];
const keepPath = process.argv[3];
if (!site) {
  console.error("usage: node precompile.mjs SITE_DIR");
  process.exit(2);
}

const pyodide = await loadPyodide({ stdout: () => {}, stderr: (line) => console.error(line) });
pyodide.FS.mkdir("/site");
pyodide.FS.mount(pyodide.FS.filesystems.NODEFS, { root: resolve(site) }, "/site");
pyodide.globals.set("keep_json", keepPath ? readFileSync(keepPath, "utf8") : "null");
pyodide.runPython(`
import compileall, importlib.util, json, os, py_compile, shutil, sys, tempfile, zipfile
from importlib._bootstrap_external import _code_to_hash_pyc

SITE_PACKAGES = next(p for p in sys.path if p.endswith("site-packages"))
STDLIB_IN_BROWSER = next(p for p in sys.path if p.endswith(".zip"))  # /lib/python314.zip
EPOCH = (1980, 1, 1, 0, 0, 0)
KEEP = json.loads(keep_json)  # top-level modules to keep, or None for all
# Folders of the wheels that nothing the page runs imports: pydantic's copy of its 1.x API.
DROP = {"pydantic-": ("pydantic/v1/",)}


def entry(name):
    info = zipfile.ZipInfo(name, date_time=EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


def precompile_stdlib(path):
    temporary = path + ".tmp"
    compiled = 0
    dropped = 0
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(temporary, "w") as target:
        names = source.namelist()
        if any(name.endswith(".pyc") for name in names):
            return 0
        for name in names:
            top = name.split("/")[0].removesuffix(".py")
            if KEEP is not None and (name.endswith(".py") or "/" in name) and top not in KEEP:
                dropped += 1
                continue
            data = source.read(name)
            if name.endswith(".py"):
                try:
                    code = compile(data, f"{STDLIB_IN_BROWSER}/{name}", "exec", dont_inherit=True)
                except SyntaxError:
                    target.writestr(entry(name), data)
                    continue
                pyc = _code_to_hash_pyc(code, importlib.util.source_hash(data), checked=False)
                target.writestr(entry(name[:-3] + ".pyc"), pyc)
                compiled += 1
            elif not name.endswith("/"):
                target.writestr(entry(name), data)
    os.replace(temporary, path)
    if dropped:
        print(f"precompile: python_stdlib.zip: {dropped} files of unused modules left out", file=sys.stderr)
    return compiled


def precompile_wheel(path, keep_sources):
    with zipfile.ZipFile(path) as source:
        names = source.namelist()
        if any(name.endswith(".pyc") for name in names):
            return 0
        work = tempfile.mkdtemp()
        source.extractall(work)
    drop = next((folders for prefix, folders in DROP.items() if os.path.basename(path).startswith(prefix)), ())
    for folder in drop:
        shutil.rmtree(os.path.join(work, folder), ignore_errors=True)
    names = [n for n in names if not n.startswith(drop)] if drop else names
    compileall.compile_dir(
        work, quiet=2, stripdir=work, prependdir=SITE_PACKAGES, legacy=not keep_sources,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    added = sorted(
        os.path.relpath(os.path.join(folder, name), work).replace(os.sep, "/")
        for folder, _, files in os.walk(work) for name in files if name.endswith(".pyc")
    )
    record = next(name for name in names if name.endswith(".dist-info/RECORD"))
    if drop:
        with open(os.path.join(work, record), encoding="utf-8") as file:
            lines = [line for line in file.read().splitlines() if not line.startswith(drop)]
        with open(os.path.join(work, record), "w", encoding="utf-8") as file:
            file.writelines(f"{line}\\n" for line in lines)
    kept = [n for n in names if n != record and not n.endswith("/")]
    if not keep_sources:  # module.pyc where module.py was, as Pyodide ships its own packages
        compiled = {name[:-1] for name in added}
        kept = [n for n in kept if n not in compiled]
        with open(os.path.join(work, record), encoding="utf-8") as file:
            lines = [line for line in file.read().splitlines() if line.split(",")[0] not in compiled]
        with open(os.path.join(work, record), "w", encoding="utf-8") as file:
            file.writelines(f"{line}\\n" for line in lines)
    with open(os.path.join(work, record), "a", encoding="utf-8") as file:
        file.writelines(f"{name},,\\n" for name in added)
    temporary = path + ".tmp"
    with zipfile.ZipFile(temporary, "w") as target:
        for name in kept + added + [record]:
            with open(os.path.join(work, name), "rb") as file:
                target.writestr(entry(name), file.read())
    os.replace(temporary, path)
    return len(added)


print(f"precompile: python_stdlib.zip: {precompile_stdlib('/site/pyodide/python_stdlib.zip')} modules", file=sys.stderr)
for name in sorted(os.listdir("/site/wheels")):
    if name.endswith(".whl"):
        keep_sources = name.startswith("trainmem-")  # our own code keeps its sources for tracebacks
        count = precompile_wheel("/site/wheels/" + name, keep_sources)
        print(f"precompile: {name}: {count} .pyc files{'' if keep_sources else ', sources dropped'}", file=sys.stderr)
`);

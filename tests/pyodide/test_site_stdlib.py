"""The built site's own Python, from the files the page fetches: Pyodide (its runtime stored as
pyodide.asm.wasm.gz) with the pruned standard library (build_site.py keeps only the top-level
modules the page was measured to import), python/site-packages.zip and pydantic-core's .wasm.gz
(made from the wheels in .cache/site-wheels/, PyYAML's built from its sdist among them: checked
below, byte for byte) and py/ modules.

Every setup of the core-in-Pyodide matrix, and of the build's import measurement, gives the
report CPython gives, and its Markdown: a module left out of python_stdlib.zip that the page
needs fails here, not in a reader's browser.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from test_core_in_pyodide import CASES, ROOT, SITE_WHEELS

HERE = Path(__file__).resolve().parent
SITE = ROOT / "_site"

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")


@pytest.fixture(scope="module")
def site() -> Path:
    sys.path.insert(0, str(ROOT))
    from build_site import is_stale

    if is_stale(SITE) or not any(SITE_WHEELS.glob("trainmem-*.whl")):
        subprocess.run([sys.executable, str(ROOT / "build_site.py")], check=True)
    return SITE


def test_the_standard_library_is_pruned(site):
    names = zipfile.ZipFile(site / "pyodide" / "python_stdlib.zip").namelist()
    tops = {name.split("/")[0].removesuffix(".pyc") for name in names}
    assert {"json", "re", "typing", "dataclasses", "encodings"} <= tops
    assert not tops & {"unittest", "xmlrpc", "tkinter", "idlelib", "pydoc_data", "multiprocessing"}


def test_the_sites_python_is_made_of_the_tested_wheels(site, tmp_path):
    """python/ of the site is what bundle_python makes of .cache/site-wheels/ (the wheels
    test_core_in_pyodide.py runs), its WebAssembly stored gzip-compressed; nothing else ships."""
    from build_site import bundle_python

    manifest = json.loads((site / "manifest.json").read_text())
    remade = tmp_path / "remade"
    remade.mkdir()
    python = bundle_python(remade, sorted(SITE_WHEELS.glob("*.whl")))
    # The worker's snapshot entry is named by the site's runtime files (build_site.py python_snapshot),
    # which store_compressed replaced by their .gz after it was named: not part of the bundle.
    shipped_python = dict(manifest["python"])
    assert shipped_python.pop("snapshot")["url"].startswith("python/snapshot-")
    assert python == shipped_python
    made = sorted(p.relative_to(remade).as_posix() for p in (remade / "python").iterdir())
    shipped = sorted(path for path in manifest["files"] if path.startswith("python/"))
    assert shipped == [name + ".gz" if name.endswith(".wasm") else name for name in made]
    for name in made:
        ours = (remade / name).read_bytes()
        theirs = (site / name).read_bytes() if not name.endswith(".wasm") else gzip.decompress((site / f"{name}.gz").read_bytes())
        assert ours == theirs, f"{name} of the site is not made of the wheels in {SITE_WHEELS}"
    assert not any(path.startswith("wheels/") or path.endswith((".whl", ".wasm")) for path in manifest["files"])
    assert manifest["stored_compressed"] == {name: name + ".gz" for name in
                                             ["pyodide/pyodide.asm.wasm", *(n for n in made if n.endswith(".wasm"))]}


def test_the_site_computes_like_cpython(site, tmp_path):
    from build_site import IMPORT_CASES

    cases = CASES + IMPORT_CASES
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    subprocess.run(["node", str(HERE / "run_in_pyodide.mjs"), "site", str(site), str(tmp_path / "cases.json"),
                    str(tmp_path / "answers.json")], check=True, timeout=600)
    *answers, info = json.loads((tmp_path / "answers.json").read_text())
    assert info["stdlib_zip"].endswith(".zip")
    # PyYAML, from the wheel build_site.py builds of the pinned sdist's pure-Python package.
    assert info["yaml"] == {"with_libyaml": False, "version": "6.0.3",
                            "parsed": {"trainer": {"lr": 2.0e-5, "layers": [1, 2]}}}

    sys.path[:0] = [str(ROOT / "web" / "py")]
    import trainmem_web

    for setup, wasm in zip(cases, answers):
        cpython = json.loads(trainmem_web.compute(json.dumps(setup)))
        if cpython["ok"]:
            cpython["markdown"] = trainmem_web.markdown(json.dumps(cpython["report"]))
        cpython["model_inputs"] = json.loads(trainmem_web.model_inputs(json.dumps(setup.get("model"))))
        assert wasm == cpython, f"the site's Pyodide and CPython disagree for {setup}"


def test_the_site_reads_and_writes_trainer_files_like_cpython(site, tmp_path):
    """The page's trainer-file reader and writers (trainmem.inputs, PyYAML) on the pruned standard library."""
    from build_site import DEFAULT_SETUP, TRAINER_FILE_CASES

    sys.path[:0] = [str(ROOT / "web" / "py")]
    import trainmem_web

    formats = [entry["format"] for entry in trainmem_web.file_formats()]
    cases = {"setups": [], "trainer_files": TRAINER_FILE_CASES, "form": DEFAULT_SETUP, "formats": formats}
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    subprocess.run(["node", str(HERE / "run_in_pyodide.mjs"), "site", str(site), str(tmp_path / "cases.json"),
                    str(tmp_path / "answers.json")], check=True, timeout=600)
    (info,) = json.loads((tmp_path / "answers.json").read_text())
    form = json.dumps(DEFAULT_SETUP)
    assert info["trainer_files"] == [json.loads(trainmem_web.read_files(json.dumps(files), form)) for files in TRAINER_FILE_CASES]
    assert sum(answer["ok"] for answer in info["trainer_files"]) >= 5
    assert info["written"] == [json.loads(trainmem_web.write_file(form, name)) for name in formats]

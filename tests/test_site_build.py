"""build_site.py's pure-Python wheel of an sdist (PyYAML for the page) and its service-worker version."""

from __future__ import annotations

import base64
import hashlib
import io
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import build_site  # noqa: E402


def _sdist(path: Path) -> Path:
    members = {
        "pyyaml-6.0.3/lib/yaml/__init__.py": b"__version__ = '6.0.3'\nfrom .nodes import Node\n",
        "pyyaml-6.0.3/lib/yaml/nodes.py": b"class Node: pass\n",
        "pyyaml-6.0.3/yaml/_yaml.pyx": b"# the C extension: left out\n",
        "pyyaml-6.0.3/LICENSE": b"MIT\n",
        "pyyaml-6.0.3/setup.py": b"",
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_wheel_from_sdist_has_the_pure_package_and_a_true_record(tmp_path):
    wheel = build_site.wheel_from_sdist(_sdist(tmp_path / "pyyaml-6.0.3.tar.gz"), "pyyaml", "6.0.3", tmp_path)
    assert wheel.name == "pyyaml-6.0.3-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert names == {"yaml/__init__.py", "yaml/nodes.py", "PyYAML-6.0.3.dist-info/LICENSE",
                         "PyYAML-6.0.3.dist-info/METADATA", "PyYAML-6.0.3.dist-info/WHEEL",
                         "PyYAML-6.0.3.dist-info/RECORD"}
        assert b"Tag: py3-none-any" in archive.read("PyYAML-6.0.3.dist-info/WHEEL")
        for line in archive.read("PyYAML-6.0.3.dist-info/RECORD").decode().splitlines():
            path, digest, size = line.split(",")
            if path.endswith("RECORD"):
                continue
            data = archive.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expected}" and int(size) == len(data)
    first = wheel.read_bytes()
    again = build_site.wheel_from_sdist(tmp_path / "pyyaml-6.0.3.tar.gz", "pyyaml", "6.0.3", tmp_path)
    assert again.read_bytes() == first  # reproducible


def test_the_sdist_pins_are_hash_pinned():
    pins = build_site.pinned_sdists()
    assert [name for name, *_ in pins] == ["pyyaml"]
    assert all(len(digest) == 64 for *_, digest in pins)


def test_service_worker_version_follows_the_files(tmp_path):
    (tmp_path / "a.txt").write_text("one")
    first = build_site.stamp_service_worker(tmp_path)
    assert first in (tmp_path / "sw.js").read_text()
    assert build_site.stamp_service_worker(tmp_path) == first
    (tmp_path / "a.txt").write_text("two")
    assert build_site.stamp_service_worker(tmp_path) != first


def _wheel(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def test_bundle_python_puts_pure_files_in_one_zip_and_extensions_beside_it(tmp_path, monkeypatch):
    pure = _wheel(tmp_path / "pkg-1.0-py3-none-any.whl", {
        "pkg/__init__.py": b"from .mod import x\n",
        "pkg/__pycache__/__init__.cpython-314.pyc": b"PYC-INIT",
        "pkg/__pycache__/mod.cpython-314.pyc": b"PYC-MOD",
        "pkg/mod.py": b"x = 1\n",
        "pkg/py.typed": b"",
        "pkg-1.0.dist-info/METADATA": b"Name: pkg\nVersion: 1.0\n\nThe long description.\n",
        "pkg/data/corpus.jsonl": b"{}",
    })
    native = _wheel(tmp_path / "ext-2.0-cp314-cp314-pyemscripten_2026_0_wasm32.whl", {
        "ext/__init__.pyc": b"PYC-EXT",
        "ext/_ext.cpython-314-wasm32-emscripten.so": b"\0asm-the-library",
        "ext/_ext/__init__.pyi": b"def f() -> None: ...\n",
        "ext-2.0.dist-info/sboms/ext.cyclonedx.json": b"{}",
        "ext-2.0.dist-info/RECORD": b"",
    })
    lock = tmp_path / "node_modules" / "pyodide" / "pyodide-lock.json"
    lock.parent.mkdir(parents=True)
    lock.write_text('{"info": {"abi_version": "2026_0"}, "packages": {"big": {}}}')
    monkeypatch.setattr(build_site, "NODE_MODULES", tmp_path / "node_modules")
    site = tmp_path / "site"
    site.mkdir()
    bundle = build_site.bundle_python(site, [pure, native])
    assert bundle == {
        "zip": "python/site-packages.zip",
        "native": [{"url": "python/ext._ext.wasm", "path": "ext/_ext.cpython-314-wasm32-emscripten.so", "module": "ext._ext"}],
        "lock_info": {"abi_version": "2026_0"},
    }
    assert (site / "python" / "ext._ext.wasm").read_bytes() == b"\0asm-the-library"
    with zipfile.ZipFile(site / "python" / "site-packages.zip") as archive:
        # zipimport reads bytecode only from beside the source, so __pycache__'s pycs move there,
        # and with its bytecode there a module's source is left out; so is a METADATA's description.
        assert sorted(archive.namelist()) == ["ext-2.0.dist-info/RECORD", "ext/__init__.pyc", "pkg-1.0.dist-info/METADATA",
                                              "pkg/__init__.pyc", "pkg/data/corpus.jsonl", "pkg/mod.pyc"]
        assert archive.read("pkg/mod.pyc") == b"PYC-MOD"
        assert archive.read("pkg-1.0.dist-info/METADATA") == b"Name: pkg\nVersion: 1.0\n"
    first = (site / "python" / "site-packages.zip").read_bytes()
    build_site.bundle_python(site, [pure, native])
    assert (site / "python" / "site-packages.zip").read_bytes() == first  # reproducible


def test_node_modules_are_compared_with_the_lockfile_by_content(tmp_path):
    lock = tmp_path / "package-lock.json"
    lock.write_text('{"packages": {"": {"name": "web"}, "node_modules/a": {"version": "1.0.0", "integrity": "sha512-x"}}}')
    marker = tmp_path / ".package-lock.json"
    assert not build_site._installed_matches_lock(marker, lock)  # nothing installed
    marker.write_text('{"packages": {"node_modules/a": {"version": "1.0.0", "integrity": "sha512-x"}}}')
    assert build_site._installed_matches_lock(marker, lock)
    marker.write_text('{"packages": {"node_modules/a": {"version": "0.9.0", "integrity": "sha512-y"}}}')
    assert not build_site._installed_matches_lock(marker, lock)


def test_the_service_worker_caches_every_file_of_the_site(tmp_path, monkeypatch):
    package = tmp_path / "node_modules" / "pyodide" / "package.json"
    package.parent.mkdir(parents=True)
    package.write_text('{"version": "314.0.7"}')
    monkeypatch.setattr(build_site, "NODE_MODULES", tmp_path / "node_modules")
    site = tmp_path / "site"
    (site / "python").mkdir(parents=True)
    (site / "python" / "site-packages.zip").write_bytes(b"zip")
    (site / "python" / "ext.wasm.gz").write_bytes(b"gz")
    (site / "index.html").write_text("<!doctype html>")
    stored = {"python/ext.wasm": "python/ext.wasm.gz"}
    manifest = build_site.write_manifest(site, {"trainmem_version": "0.1.0", "stored_compressed": stored})
    assert sorted(manifest["cache_files"]) == ["index.html", "python/ext.wasm.gz", "python/site-packages.zip", "sw.js"]
    assert manifest["stored_compressed"] == stored


def test_the_early_script_is_allowed_by_its_hash_only_where_it_is_inlined():
    # The hash-source of an empty script, as every browser computes it (CSP Level 2's example digest).
    assert build_site.inline_script_source("") == "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='"
    early = build_site.EARLY_BOOT.read_text(encoding="utf-8")
    page = "<head><script>@EARLY_BOOT@</script></head>"
    csp = build_site.page_csp(page, early)
    assert f"script-src 'self' 'wasm-unsafe-eval' {build_site.inline_script_source(early)};" in csp
    assert "unsafe-inline" not in csp
    assert build_site.page_csp("<head></head>", early) == build_site.CONTENT_SECURITY_POLICY


def test_the_calculator_starts_its_worker_before_any_other_script():
    html = (ROOT / "web" / "index.html").read_text(encoding="utf-8")
    head = html[: html.index("</head>")]
    early = head.index("<script>@EARLY_BOOT@</script>")
    assert early < head.index("<script src=") and early < head.index('<script type="module"')
    assert head.index('id="engine-config"') < early  # the script reads the engine's configuration


def test_webassembly_is_stored_compressed_reproducibly(tmp_path):
    import gzip

    site = tmp_path / "site"
    (site / "pyodide").mkdir(parents=True)
    wasm = b"\0asm\1\0\0\0" + bytes(range(256)) * 64
    (site / "pyodide" / "pyodide.asm.wasm").write_bytes(wasm)
    (site / "pyodide" / "python_stdlib.zip").write_bytes(b"zip")
    assert build_site.store_compressed(site) == {"pyodide/pyodide.asm.wasm": "pyodide/pyodide.asm.wasm.gz"}
    stored = (site / "pyodide" / "pyodide.asm.wasm.gz").read_bytes()
    assert sorted(p.name for p in (site / "pyodide").iterdir()) == ["pyodide.asm.wasm.gz", "python_stdlib.zip"]
    assert gzip.decompress(stored) == wasm and len(stored) < len(wasm) / 4
    assert stored[4:8] == b"\0\0\0\0"  # gzip's mtime field: 0, so the same input gives the same bytes
    (site / "pyodide" / "pyodide.asm.wasm").write_bytes(wasm)
    build_site.store_compressed(site)
    assert (site / "pyodide" / "pyodide.asm.wasm.gz").read_bytes() == stored


@pytest.mark.skipif(sys.platform == "emscripten", reason="a server thread: Pyodide has no threads")
def test_the_local_server_sends_a_gz_file_as_it_is(tmp_path):
    """As a static host (GitHub Pages) sends a .gz: its bytes, no Content-Encoding, never compressed again."""
    import gzip
    import threading
    import urllib.request
    from functools import partial
    from http.server import ThreadingHTTPServer

    stored = gzip.compress(b"\0asm" + bytes(4096), mtime=0)
    (tmp_path / "x.wasm.gz").write_bytes(stored)
    (tmp_path / "a.js").write_text("let a = 1;\n" * 100)
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(build_site.SiteHandler, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        request = urllib.request.Request(base + "x.wasm.gz", headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request) as response:
            assert response.headers["Content-Type"] == "application/gzip"
            assert response.headers.get("Content-Encoding") is None
            assert response.read() == stored
        request = urllib.request.Request(base + "a.js", headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request) as response:  # text is still compressed on the fly
            assert response.headers["Content-Encoding"] == "gzip"
    finally:
        server.shutdown()
        server.server_close()


def test_the_python_snapshot_is_named_by_the_files_its_memory_depends_on(tmp_path):
    site = tmp_path / "site"
    imported = ("python/site-packages.zip", "python/pydantic_core._pydantic_core.wasm", "py/trainmem_web.py")
    for name in (*build_site.SNAPSHOT_INPUTS, *imported, "index.html", "js/main.js"):
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(name.encode())
    assert build_site.snapshot_inputs(site) == [*build_site.SNAPSHOT_INPUTS, *sorted(imported)]
    first = build_site.python_snapshot(site)
    assert first["url"].startswith("python/snapshot-") and first["url"].endswith(".bin")
    # The page's own scripts do not change Python's memory.
    for name in ("index.html", "js/main.js"):
        (site / name).write_bytes(b"changed")
    assert build_site.python_snapshot(site) == first
    # Pyodide's runtime, its loader, the standard library and the worker (loadPyodide's options) do,
    # and so does what the snapshot has imported: the bundle, pydantic-core's library, the page's module.
    assert {"pyodide/pyodide.asm.wasm", "pyodide/pyodide.mjs", "pyodide/python_stdlib.zip", "js/worker.js"} <= set(
        build_site.SNAPSHOT_INPUTS)
    seen = {first["url"]}
    for name in build_site.snapshot_inputs(site):
        (site / name).write_bytes(b"another build of " + name.encode())
        seen.add(build_site.python_snapshot(site)["url"])
    assert len(seen) == 1 + len(build_site.SNAPSHOT_INPUTS) + len(imported)

#!/usr/bin/env python3
"""Assemble the static web calculator in ``_site/``, and optionally serve it.

    python build_site.py            # build _site/
    python build_site.py --serve    # build, then serve on http://127.0.0.1:8000 (PORT or --port)
    python build_site.py --serve --no-build

From a clean checkout, touching the network only through the package registries:
  1. ``npm ci`` in web/ (Pyodide, Chart.js and its annotation plugin, linkedom for the pre-render)
     when web/node_modules is missing or older than web/package-lock.json;
  2. builds the trainmem wheel from this checkout;
  3. downloads the wheels Pyodide loads, pinned with hashes in web/pyodide-requirements.txt,
     with pip (cached in .cache/pyodide-wheels/), and builds a py3-none-any wheel of each
     pure-Python package pinned as an sdist in web/pyodide-sdists.txt (PyYAML);
  4. copies Pyodide's core files and the charting library out of web/node_modules;
  5. compiles Pyodide's standard library and those wheels to Python 3.14 bytecode with
     Pyodide's own interpreter under Node (web/tools/precompile.mjs), so that the browser does
     not compile Python source on every visit (seconds on a small machine), then bundles them
     for the page (python/: every pure-Python file in one zip that the worker puts on sys.path,
     and pydantic-core's WebAssembly library as a .wasm it compiles while Pyodide loads); the
     wheels themselves go to .cache/site-wheels/ for the Node tests (tests/pyodide), not to _site;
  6. computes the default setup's report with CPython (the same web/py/trainmem_web.py the
     browser runs) and renders it into the HTML (web/tools/prerender.mjs), so the first paint
     shows a real result before Pyodide has loaded;
  7. stores the WebAssembly files gzip-compressed (X.wasm as X.wasm.gz: store_compressed; the
     worker decompresses them as they download, web/js/stored.js);
  8. writes the build's version into the service worker (sw.js: the site works offline after the
     first visit, one cache per build) and manifest.json: the sha256 and size of every file.
Nothing on the page is loaded from a CDN: everything it fetches is a file of _site/.
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent
WEB = ROOT / "web"
NODE_MODULES = WEB / "node_modules"
CACHE = ROOT / ".cache" / "pyodide-wheels"
# The wheels of the latest build (bytecode and all), out of the site: the page loads python/,
# made from exactly these (bundle_python); tests/pyodide runs them under Node.
SITE_WHEELS = ROOT / ".cache" / "site-wheels"

# The setup the page opens with (and pre-renders): a common full fine-tune on one node.
DEFAULT_SETUP = {
    "model": {"preset": "llama-3.1-8b"},
    "micro_batch_size": 1,
    "sequence_length": 4096,
    "activation_checkpointing": "full",
    "parallelism": {"num_gpus": 8, "strategy": "zero", "zero_stage": 2},
    "gpu": "h100-sxm-80gb",
}

# Setups the import measurement runs through the page's bridge (measure_imports.mjs): every
# kind of model input, fine-tuning method, strategy and optimizer family, and invalid ones.
IMPORT_CASES = [
    DEFAULT_SETUP,
    {"model": {"preset": "mixtral-8x7b"}, "finetuning": {"method": "qlora"}, "optimizer": {"name": "paged-adamw-8bit"},
     "parallelism": {"num_gpus": 8, "strategy": "fsdp"}, "gpu": {"memory_gib": 48}},
    {"model": {"preset": "gpt2"}, "finetuning": {"method": "lora", "lora": {"target_modules": "all-linear"}},
     "optimizer": {"name": "adafactor"}, "precision": "fp32", "attention": "eager", "gradient_accumulation_steps": 4},
    {"model": {"hf_config": {"model_type": "qwen2", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
                             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}},
     "parallelism": {"num_gpus": 8, "tensor_parallel_size": 2, "pipeline_parallel_size": 2, "sequence_parallel": True}},
    {"model": {"num_parameters": 1_000_000_000}, "optimizer": {"name": "lion"}},
    {"model": {"preset": "no-such-model"}, "micro_batch_size": 0},
    {"model": {"preset": "llama-3-8b"}, "parallelism": {"num_gpus": 3, "tensor_parallel_size": 2}},
]

# Trainer files the import measurement reads through the bridge (read_files), one set per reader:
# YAML and JSON, a linked DeepSpeed config with "auto" values, and a file that does not parse.
_DS_AUTO = json.dumps({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}},
                       "bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto",
                       "gradient_accumulation_steps": "auto"})
TRAINER_FILE_CASES = [
    {"axolotl.yaml": "base_model: meta-llama/Llama-3.1-8B\nadapter: qlora\nload_in_4bit: true\nlora_r: 16\n"
                     "lora_target_linear: true\nmicro_batch_size: 2\nsequence_len: 2048\nsample_packing: true\n"
                     "bf16: auto\ngradient_checkpointing: true\ndeepspeed: ds.json\n", "ds.json": _DS_AUTO},
    {"sft.json": json.dumps({"model_name_or_path": "Qwen/Qwen2.5-7B", "per_device_train_batch_size": 4, "bf16": True,
                             "optim": "adamw_torch_fused", "gradient_checkpointing": True, "max_length": 2048,
                             "packing": True, "use_liger_kernel": True})},
    {"lf.yaml": "model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct\nstage: sft\nfinetuning_type: lora\n"
                "lora_target: all\nlora_rank: 8\ncutoff_len: 2048\nper_device_train_batch_size: 1\n"
                "gradient_accumulation_steps: 8\nbf16: true\nquantization_bit: 4\n"},
    {"accelerate.yaml": "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nmixed_precision: bf16\n"
                        "num_processes: 8\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n  fsdp_version: 2\n"},
    {"adapter_config.json": json.dumps({"peft_type": "LORA", "r": 32, "target_modules": ["q_proj", "v_proj"],
                                        "lora_dropout": 0.05, "use_dora": True})},
    {"ds.json": _DS_AUTO},
    {"broken.yaml": "a: [1, 2\n"},
]

# Pyodide's core: the files loadPyodide() fetches (no packages from its CDN index are used). Not
# pyodide-lock.json: the worker passes the lock's `info` inline (lockFileContents), so nothing
# fetches it (pyodide.mjs initializeConfiguration reads indexURL + "pyodide-lock.json" only
# when lockFileContents is not given).
PYODIDE_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip")
PYODIDE_PLATFORM = ("--platform", "pyemscripten_2026_0_wasm32", "--python-version", "3.14", "--implementation", "cp", "--abi", "cp314")
VENDOR_FILES = {
    "chart.umd.min.js": "chart.js/dist/chart.umd.min.js",
    "chartjs-plugin-annotation.min.js": "chartjs-plugin-annotation/dist/chartjs-plugin-annotation.min.js",
}
STATIC = ("index.html", "embed.html", "favicon.svg", "sw.js", "css", "js", "py")
SERVICE_WORKER = "sw.js"  # its @SITE_VERSION@ becomes the build's version (see stamp_service_worker)

# Only this site's own origin; Pyodide's WebAssembly needs 'wasm-unsafe-eval' to compile.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self' 'wasm-unsafe-eval'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "worker-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
    ]
)


def log(message: str) -> None:
    print(f"build_site: {message}", flush=True)


def run(command: list[str], cwd: Path = ROOT) -> None:
    subprocess.run(command, cwd=cwd, check=True)


# --------------------------------------------------------------------------- inputs


def _installed_matches_lock(marker: Path, lock: Path) -> bool:
    """True when npm's record of what it installed (node_modules/.package-lock.json) has every
    package of the lockfile at its version and integrity. Compared by content, not by file times:
    a fresh checkout's lockfile is newer than an installed tree, and `npm ci` on a node_modules
    that is a symlink empties the folder it points to."""
    try:
        wanted = {k: v for k, v in json.loads(lock.read_text())["packages"].items() if k}
        installed = json.loads(marker.read_text())["packages"]
    except (OSError, ValueError, KeyError):
        return False
    return all(
        installed.get(name, {}).get("version") == entry.get("version")
        and installed.get(name, {}).get("integrity") == entry.get("integrity")
        for name, entry in wanted.items()
    )


def ensure_node_modules() -> None:
    """`npm ci` when node_modules is missing or does not hold what the lockfile pins."""
    marker = NODE_MODULES / ".package-lock.json"
    lock = WEB / "package-lock.json"
    if _installed_matches_lock(marker, lock):
        return
    log("npm ci (web/)")
    run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=WEB)


def build_trainmem_wheel(destination: Path) -> Path:
    """The trainmem wheel from this checkout (no build isolation when setuptools is at hand)."""
    with tempfile.TemporaryDirectory() as scratch:
        command = [sys.executable, "-m", "build", "--wheel", "--outdir", scratch]
        try:
            import setuptools  # noqa: F401

            command += ["--no-isolation", "--skip-dependency-check"]
        except ImportError:
            pass
        built = subprocess.run(command + [str(ROOT)], cwd=ROOT, capture_output=True, text=True)
        if built.returncode:
            sys.stderr.write(built.stdout + built.stderr)
            raise SystemExit("build_site: building the trainmem wheel failed")
        (wheel,) = Path(scratch).glob("trainmem-*.whl")
        return Path(shutil.copy2(wheel, destination))


def pinned_hashes() -> set[str]:
    hashes = set()
    for line in (WEB / "pyodide-requirements.txt").read_text().splitlines():
        hashes.update(part.split(":", 1)[1] for part in line.split() if part.startswith("--hash=sha256:"))
    return hashes


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pyodide_wheels() -> list[Path]:
    """The pinned wheels for Pyodide, from the cache or downloaded with pip (hash-checked)."""
    wanted = pinned_hashes()
    cached = {sha256(path): path for path in CACHE.glob("*.whl")} if CACHE.exists() else {}
    if not wanted <= cached.keys():
        log("pip download (pinned Pyodide wheels)")
        CACHE.mkdir(parents=True, exist_ok=True)
        run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
             "--only-binary=:all:", *PYODIDE_PLATFORM, "--require-hashes",
             "-r", str(WEB / "pyodide-requirements.txt"), "-d", str(CACHE)]
        )
        cached = {sha256(path): path for path in CACHE.glob("*.whl")}
    missing = wanted - cached.keys()
    if missing:
        raise SystemExit(f"build_site: wheels with these hashes are missing after download: {sorted(missing)}")
    return sorted(cached[digest] for digest in wanted)


SDIST_PINS = WEB / "pyodide-sdists.txt"
# The pure-Python package inside each pinned sdist: (distribution name, folder in the sdist, import name).
SDIST_PACKAGES = {"pyyaml": ("PyYAML", "lib/yaml", "yaml")}
EPOCH = (1980, 1, 1, 0, 0, 0)


def pinned_sdists() -> list[tuple[str, str, str]]:
    """(name, version, sha256) of each sdist pin."""
    pins = []
    for line in SDIST_PINS.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            requirement, *options = line.split()
            name, version = requirement.split("==")
            digest = next(o.split(":", 1)[1] for o in options if o.startswith("--hash=sha256:"))
            pins.append((name.lower(), version, digest))
    return pins


def _record_hash(data: bytes) -> str:
    import base64

    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_from_sdist(sdist: Path, name: str, version: str, destination: Path) -> Path:
    """A py3-none-any wheel of the pure-Python package of an sdist (its license included), byte-for-byte reproducible."""
    import tarfile
    import zipfile

    distribution, folder, package = SDIST_PACKAGES[name]
    files: dict[str, bytes] = {}
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/", 1)
            inside = parts[1] if len(parts) > 1 else ""
            if member.isfile() and inside.startswith(folder + "/") and inside.endswith(".py"):
                files[f"{package}/{inside[len(folder) + 1:]}"] = tar.extractfile(member).read()
            elif member.isfile() and inside == "LICENSE":
                files[f"{distribution}-{version}.dist-info/LICENSE"] = tar.extractfile(member).read()
    if f"{package}/__init__.py" not in files:
        raise SystemExit(f"build_site: {sdist.name} has no {folder}/__init__.py")
    info = f"{distribution}-{version}.dist-info"
    files[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n"
                                 f"Summary: {distribution}'s pure-Python package, built from its sdist by trainmem's build_site.py\n"
                                 "License: MIT\n").encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: trainmem build_site.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in sorted(files.items()))
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    wheel = destination / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in sorted(files.items()):
            entry = zipfile.ZipInfo(path, date_time=EPOCH)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, data)
    return wheel


def pure_python_wheels(destination: Path) -> list[Path]:
    """Build the wheels of the pinned sdists (downloaded with pip, hash-checked, cached)."""
    folder = CACHE / "sdists"
    pins = pinned_sdists()
    cached = {sha256(path): path for path in folder.glob("*.tar.gz")} if folder.exists() else {}
    if not {digest for *_, digest in pins} <= cached.keys():
        log("pip download (pinned sdists of pure-Python packages)")
        folder.mkdir(parents=True, exist_ok=True)
        run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
             "--no-binary=:all:", "--no-build-isolation", "--require-hashes", "-r", str(SDIST_PINS), "-d", str(folder)])
        cached = {sha256(path): path for path in folder.glob("*.tar.gz")}
    wheels = []
    for name, version, digest in pins:
        if digest not in cached:
            raise SystemExit(f"build_site: the sdist of {name}=={version} with sha256 {digest} is missing after download")
        wheels.append(wheel_from_sdist(cached[digest], name, version, destination))
    return wheels


# --------------------------------------------------------------------------- the page's Python bundle


# Where the page's Python code is served from (issue 14, start-up): one zip of every pure-Python
# file of the wheels, put on sys.path as it is (zipimport), and each WebAssembly extension as a
# .wasm file of its own (a static host serves application/wasm compressed, and the worker compiles
# it while Pyodide's runtime loads). The wheels go to SITE_WHEELS for the Node tests, out of the site.
PYTHON_FOLDER = "python"
PYTHON_ZIP = f"{PYTHON_FOLDER}/site-packages.zip"
# Inside a wheel, files nothing running imports: typing stubs, their marker, software bills of materials.
UNUSED_IN_BROWSER = (".pyi", "/py.typed")
UNUSED_FOLDERS_IN_BROWSER = ("/sboms/",)
# Files the page never reads (issue 14, size; prefixes): the measured corpora, which only
# `trainmem validate` reads (trainmem/validate.py, trainmem/inference/validate.py), and pydantic's
# mypy plugin (a type checker's, never imported at run time).
UNUSED_FILES_IN_BROWSER = ("trainmem/data/corpus", "pydantic/mypy.")


def _page_needs(name: str, files: dict[str, bytes]) -> bool:
    """False for a module's source when its bytecode is in the bundle too: zipimport runs the .pyc
    (an unchecked-hash pyc, PEP 552, precompile.mjs) and the source would only give tracebacks
    their lines. The wheels keep their sources (tests/pyodide runs the core's tests on them)."""
    return not (name.endswith(".py") and f"{name}c" in files)


def _metadata_headers(data: bytes) -> bytes:
    """A METADATA file's headers without its description (the body after the first blank line:
    the core metadata specification): importlib.metadata reads names and versions from the
    headers; the description is trainmem's whole README."""
    return data.split(b"\n\n", 1)[0] + b"\n"


def _legacy_pyc_name(name: str) -> str:
    """pkg/__pycache__/mod.cpython-314.pyc -> pkg/mod.pyc: zipimport reads a module's bytecode only
    from beside its source (Lib/zipimport.py, _zip_searchorder), never from __pycache__."""
    folder, _, file = name.rpartition("/__pycache__/")
    return f"{folder}/{file.split('.', 1)[0]}.pyc"


def _extension_module_name(name: str) -> str:
    """pydantic_core/_pydantic_core.cpython-314-wasm32-emscripten.so -> pydantic_core._pydantic_core."""
    folder, _, file = name.rpartition("/")
    return ".".join([*filter(None, folder.split("/")), file.split(".", 1)[0]])


def bundle_python(site: Path, wheels: list[Path]) -> dict:
    """Write site/python/: the pure-Python files of the (precompiled) wheels as one zip, and each
    extension module (.so, WebAssembly) as python/<module>.wasm. Returns what the page's worker
    needs: {"zip": url, "native": [{"url", "path" (under site-packages), "module"}]}."""
    import zipfile

    folder = site / PYTHON_FOLDER
    folder.mkdir(exist_ok=True)
    files: dict[str, bytes] = {}
    native = []
    for wheel in sorted(wheels):
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if (name.endswith("/") or name.endswith(UNUSED_IN_BROWSER) or name.startswith(UNUSED_FILES_IN_BROWSER)
                        or any(f in name for f in UNUSED_FOLDERS_IN_BROWSER)):
                    continue
                data = archive.read(name)
                if name.endswith(".so"):
                    module = _extension_module_name(name)
                    url = f"{PYTHON_FOLDER}/{module}.wasm"
                    (site / url).write_bytes(data)
                    native.append({"url": url, "path": name, "module": module})
                    continue
                if name.endswith(".dist-info/METADATA"):
                    data = _metadata_headers(data)
                files[_legacy_pyc_name(name) if "/__pycache__/" in name else name] = data
    files = {name: data for name, data in files.items() if _page_needs(name, files)}
    with zipfile.ZipFile(site / PYTHON_ZIP, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as bundle:
        for name, data in sorted(files.items()):
            entry = zipfile.ZipInfo(name, date_time=EPOCH)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = 0o644 << 16
            bundle.writestr(entry, data)
    lock_info = json.loads((NODE_MODULES / "pyodide" / "pyodide-lock.json").read_text())["info"]
    return {"zip": PYTHON_ZIP, "native": native, "lock_info": lock_info}


# A memory snapshot of Pyodide made in the browser with trainmem imported (issue 14, repeat visits:
# web/js/snapshot.js) holds Python's state as these files left it: the runtime and its loader, the
# standard library's zip (the zipimporter's directory of it is in that memory), the worker, which
# sets loadPyodide's options and loads the libraries, and (snapshot_inputs) the bundle, the
# extension libraries and the page's Python modules, imported before it is made. The cache entry's
# URL carries their hash, so a snapshot is restored only into the runtime and code that made it.
SNAPSHOT_INPUTS = tuple(f"pyodide/{name}" for name in PYODIDE_FILES) + ("js/worker.js", "js/snapshot.js")


def snapshot_inputs(site: Path) -> list[str]:
    """SNAPSHOT_INPUTS, then the bundle and libraries under python/ and the modules under py/ (sorted)."""
    imported = sorted(p.relative_to(site).as_posix() for pattern in (f"{PYTHON_FOLDER}/*.zip", f"{PYTHON_FOLDER}/*.wasm", "py/*.py")
                      for p in site.glob(pattern))
    return [*SNAPSHOT_INPUTS, *imported]


def python_snapshot(site: Path) -> dict:
    """The worker's snapshot configuration: {"url": the cache entry's URL, under python/}."""
    digest = hashlib.sha256()
    for name in snapshot_inputs(site):
        digest.update(f"{name}\0{sha256(site / name)}\n".encode())
    return {"url": f"{PYTHON_FOLDER}/snapshot-{digest.hexdigest()[:16]}.bin"}


# --------------------------------------------------------------------------- stored compressed


# The WebAssembly files are stored gzip-compressed (issue 14, size): X.wasm is written as X.wasm.gz
# and the worker decompresses it with the browser's DecompressionStream (web/js/stored.js) into a
# Response of type application/wasm that it compiles as it arrives. A static host may or may not
# compress application/wasm on the fly (GitHub Pages' documentation does not promise it); a .gz
# file it serves as it is (application/gzip, no Content-Encoding), so the download is small
# whatever the host does, and the site is smaller on disk. gzip level 9, mtime 0 and no file name
# in the header: the same bytes in give the same bytes out.
STORED_COMPRESSED_SUFFIXES = (".wasm",)
STORED_SUFFIX = ".gz"


def store_compressed(site: Path) -> dict[str, str]:
    """Replace each .wasm of the site by its .wasm.gz; returns {original path: stored path}."""
    import gzip

    stored = {}
    for path in sorted(p for p in site.rglob("*") if p.is_file() and p.name.endswith(STORED_COMPRESSED_SUFFIXES)):
        target = path.with_name(path.name + STORED_SUFFIX)
        target.write_bytes(gzip.compress(path.read_bytes(), compresslevel=9, mtime=0))
        path.unlink()
        stored[path.relative_to(site).as_posix()] = target.relative_to(site).as_posix()
    return stored


# --------------------------------------------------------------------------- page data


def page_data(wheels: list[str], python_modules: list[str], python: dict | None = None) -> dict:
    """Computed with CPython from this checkout: catalogs, schema, defaults, the default report."""
    sys.path[:0] = [str(ROOT / "core"), str(WEB / "py")]
    import trainmem_web  # web/py: the same module the browser runs

    from trainmem.setup import Setup

    data = trainmem_web.page_data(DEFAULT_SETUP)
    default_model = DEFAULT_SETUP["model"]
    data["core_defaults"] = Setup.model_validate({"model": default_model}).model_dump(mode="json")
    data["wheels"] = wheels
    data["python_modules"] = python_modules
    data["python"] = python
    return data


def script_json(value: object) -> str:
    """JSON safe inside <script type="application/json">: "<" is escaped, so no tag can close it."""
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c")


# --------------------------------------------------------------------------- build


def copy_tree_files(source: Path, destination: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, destination, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)


def site_files(site: Path, leave_out: tuple[str, ...] = ("manifest.json",)) -> dict[str, dict]:
    files = {}
    for path in sorted(p for p in site.rglob("*") if p.is_file()):
        relative = path.relative_to(site).as_posix()
        if relative not in leave_out:
            files[relative] = {"sha256": sha256(path), "bytes": path.stat().st_size}
    return files


def stamp_service_worker(site: Path) -> str:
    """Write the build's version into sw.js: a hash of every other file, so any change is a new cache."""
    listing = json.dumps(site_files(site, ("manifest.json", SERVICE_WORKER)), sort_keys=True)
    version = hashlib.sha256(listing.encode()).hexdigest()[:16]
    template = (WEB / SERVICE_WORKER).read_text(encoding="utf-8")
    (site / SERVICE_WORKER).write_text(template.replace("@SITE_VERSION@", version), encoding="utf-8")
    return version


def write_manifest(site: Path, data: dict) -> dict:
    """manifest.json: the version of this build (the service worker's cache) and every file's sha256 and size."""
    version = stamp_service_worker(site)
    files = site_files(site)
    manifest = {
        "site_version": version,
        "trainmem_version": data["trainmem_version"],
        "pyodide": json.loads((NODE_MODULES / "pyodide" / "package.json").read_text())["version"],
        "total_bytes": sum(entry["bytes"] for entry in files.values()),
        "files": files,
        # Files stored compressed (store_compressed): the service worker caches each decompressed
        # under its original path too, where the browser's WebAssembly code cache can keep it.
        "stored_compressed": data.get("stored_compressed", {}),
        # The page's Python bundle (bundle_python), for a runner that loads the site as the page does.
        "python": data.get("python"),
        # What the service worker caches: every file of the site (the page fetches each of them).
        "cache_files": list(files),
    }
    (site / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


# web/js/early.js starts Python's worker after the first frame: inlined into the page's head (where the page
# has the placeholder) after the pre-render, and allowed by its sha256 in the page's CSP.
EARLY_BOOT = WEB / "js" / "early.js"
EARLY_BOOT_PLACEHOLDER = "@EARLY_BOOT@"


def inline_script_source(text: str) -> str:
    """A CSP source allowing exactly this inline script (CSP Level 2 hash-source)."""
    import base64

    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def page_csp(html: str, early_boot: str) -> str:
    """The site's CSP, plus the early script's hash on a page that inlines it."""
    if EARLY_BOOT_PLACEHOLDER not in html:
        return CONTENT_SECURITY_POLICY
    return CONTENT_SECURITY_POLICY.replace("script-src 'self' 'wasm-unsafe-eval'",
                                           f"script-src 'self' 'wasm-unsafe-eval' {inline_script_source(early_boot)}")


def build(site: Path) -> dict:
    ensure_node_modules()
    staging = site.with_name(site.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)

    for name in STATIC:
        copy_tree_files(WEB / name, staging / name)
    (staging / "pyodide").mkdir()
    for name in PYODIDE_FILES:
        shutil.copy2(NODE_MODULES / "pyodide" / name, staging / "pyodide" / name)
    (staging / "vendor").mkdir()
    for name, source in VENDOR_FILES.items():
        shutil.copy2(NODE_MODULES / source, staging / "vendor" / name)

    wheels_dir = staging / "wheels"
    wheels_dir.mkdir()
    log("building the trainmem wheel")
    wheels = [build_trainmem_wheel(wheels_dir).name]
    for wheel in pyodide_wheels():
        wheels.append(Path(shutil.copy2(wheel, wheels_dir / wheel.name)).name)
    wheels += [wheel.name for wheel in pure_python_wheels(wheels_dir)]
    with tempfile.TemporaryDirectory() as scratch:
        cases, keep = Path(scratch) / "cases.json", Path(scratch) / "keep.json"
        cases.write_text(json.dumps({"setups": IMPORT_CASES, "trainer_files": TRAINER_FILE_CASES}))
        log("measuring which standard-library modules the page imports (Pyodide under Node)")
        run(["node", str(WEB / "tools" / "measure_imports.mjs"), str(staging), str(cases), str(keep)])
        log("compiling the standard library and the wheels to Python 3.14 bytecode (Pyodide under Node)")
        run(["node", str(WEB / "tools" / "precompile.mjs"), str(staging), str(keep)])
    python_modules = sorted(f"py/{p.name}" for p in (staging / "py").glob("*.py"))
    log("bundling the wheels' Python files into one zip for the page (python/)")
    python = bundle_python(staging, [wheels_dir / name for name in wheels])
    python["snapshot"] = python_snapshot(staging)

    log("computing the default setup with CPython")
    data = page_data(sorted(wheels), python_modules, python)
    early_boot = EARLY_BOOT.read_text(encoding="utf-8")
    for page in ("index.html", "embed.html"):
        path = staging / page
        html = path.read_text(encoding="utf-8")
        html = html.replace("@CSP@", page_csp(html, early_boot)).replace("@VERSION@", data["trainmem_version"])
        html = html.replace("@APP_DATA@", script_json(data))
        engine_config = {"wheels": data["wheels"], "python_modules": data["python_modules"], "python": python}
        html = html.replace("@ENGINE_CONFIG@", script_json(engine_config))
        path.write_text(html, encoding="utf-8")
    log("pre-rendering the default result into the HTML")
    run(["node", str(WEB / "tools" / "prerender.mjs"), str(staging)])
    for page in ("index.html", "embed.html"):  # after the pre-render, which re-serializes the HTML
        path = staging / page
        path.write_text(path.read_text(encoding="utf-8").replace(EARLY_BOOT_PLACEHOLDER, early_boot), encoding="utf-8")

    log("storing the WebAssembly files gzip-compressed (.wasm.gz)")
    stored = store_compressed(staging)
    log(f"the wheels, for the Node tests: {SITE_WHEELS.relative_to(ROOT)}/ (not in the site)")
    shutil.rmtree(SITE_WHEELS, ignore_errors=True)
    SITE_WHEELS.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(wheels_dir, SITE_WHEELS)
    manifest = write_manifest(staging, {**data, "stored_compressed": stored})
    shutil.rmtree(site, ignore_errors=True)
    staging.rename(site)
    log(f"{site.relative_to(ROOT) if site.is_relative_to(ROOT) else site}: {len(manifest['files'])} files, "
        f"{manifest['total_bytes'] / 2**20:.1f} MiB")
    return manifest


def is_stale(site: Path) -> bool:
    """True when the site is missing or older than a file it is built from (core, web, the pins)."""
    manifest = site / "manifest.json"
    if not manifest.exists():
        return True
    built = manifest.stat().st_mtime
    sources = [ROOT / "pyproject.toml", ROOT / "build_site.py", *(ROOT / "core" / "trainmem").rglob("*"), *(
        path for path in WEB.rglob("*") if "node_modules" not in path.parts)]
    return any(path.is_file() and path.stat().st_mtime > built for path in sources)


# --------------------------------------------------------------------------- serve


# Types a static host such as GitHub Pages sends gzip-compressed (assumed: the figures of
# benchmarks/bench_site.py count these bytes); zips and the .wasm.gz files (store_compressed)
# are compressed already and are sent as they are, as application/gzip, as such a host sends a .gz.
COMPRESSED_TYPES = ("text/", "application/javascript", "application/json", "application/wasm", "image/svg+xml")


class SiteHandler(http.server.SimpleHTTPRequestHandler):
    """Static files with the types Pyodide needs (.mjs as JavaScript, .wasm streaming-compiled),
    gzip-compressed for a client that accepts it, as a static host compresses them."""

    _gzip_cache: dict[tuple[str, float], bytes] = {}

    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".js": "text/javascript",
        ".mjs": "text/javascript",
        ".wasm": "application/wasm",
        ".json": "application/json",
        ".svg": "image/svg+xml",
        ".whl": "application/zip",
        ".zip": "application/zip",
        ".gz": "application/gzip",  # as it is: no Content-Encoding (mimetypes would say wasm + gzip)
        ".md": "text/markdown",
    }

    def send_head(self):  # type: ignore[override]  (http.server's own name)
        path = self.translate_path(self.path)
        accepts = "gzip" in self.headers.get("Accept-Encoding", "")
        content_type = self.guess_type(path)
        if not (accepts and os.path.isfile(path) and content_type.startswith(COMPRESSED_TYPES) and "Range" not in self.headers):
            return super().send_head()
        key = (path, os.stat(path).st_mtime)
        body = self._gzip_cache.get(key)
        if body is None:
            import gzip

            with open(path, "rb") as file:
                body = gzip.compress(file.read(), compresslevel=6, mtime=0)
            self._gzip_cache[key] = body
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Vary", "Accept-Encoding")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        import io

        return io.BytesIO(body)

    def end_headers(self) -> None:
        # Revalidate every time (cheap 304s), so a rebuilt site is never stale in a browser.
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's name)
        if os.environ.get("BUILD_SITE_LOG"):
            super().log_message(format, *args)


def serve(site: Path, port: int) -> None:
    handler = partial(SiteHandler, directory=str(site))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        log(f"serving {site} on http://127.0.0.1:{server.server_address[1]}/ (Ctrl+C to stop)")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_site", help="output folder (default: _site)")
    parser.add_argument("--serve", action="store_true", help="serve the site on 127.0.0.1 after building it")
    parser.add_argument("--no-build", action="store_true", help="serve the existing site without rebuilding")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    args = parser.parse_args(argv)
    site = args.out.resolve()
    if not args.no_build:
        build(site)
    if args.serve:
        serve(site, args.port)


if __name__ == "__main__":
    main()

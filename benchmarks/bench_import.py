"""Benchmark (not a test): the page's Python start-up — ``import trainmem_web`` and the first
compute of the page's default setup (``compute(setup_json, False)``, as the worker's first call) —
under CPython and, with a built site, in Pyodide under Node, each in fresh processes.

    python benchmarks/bench_import.py [--runs 5] [--site _site] [--no-pyodide]

CPython runs with bytecode already compiled (a private ``PYTHONPYCACHEPREFIX``, warmed first) and
``PYDANTIC_DISABLE_PLUGINS`` as the page's worker sets it. Pyodide: the built site's runtime and
standard library and its wheels except trainmem; this checkout's ``core/trainmem`` and
``web/py/trainmem_web.py``, compiled to bytecode by Pyodide (benchmarks/bench_pyodide_import.mjs).
Each figure is the median of the runs: wall-clock seconds and this process's CPU seconds (on a
loaded machine the CPU seconds are the steadier figure).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from build_site import DEFAULT_SETUP  # noqa: E402

_CPYTHON_RUN = """
import json, sys, time
setup_json = sys.argv[1]
t0, c0 = time.perf_counter(), time.process_time()
import trainmem_web
t1, c1 = time.perf_counter(), time.process_time()
answer = json.loads(trainmem_web.compute(setup_json, False))
t2, c2 = time.perf_counter(), time.process_time()
assert answer["ok"], answer
print(json.dumps({"import_s": t1 - t0, "first_compute_s": t2 - t1, "import_cpu_s": c1 - c0,
                  "first_compute_cpu_s": c2 - c1, "modules": len(sys.modules)}))
"""


def _median(runs: list[dict]) -> dict:
    return {key: round(statistics.median(run[key] for run in runs), 3) for key in runs[0]}


def cpython(runs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="trainmem-bench-pyc-") as cache:
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'core'}{os.pathsep}{ROOT / 'web' / 'py'}",
               "PYTHONPYCACHEPREFIX": cache, "PYDANTIC_DISABLE_PLUGINS": "__all__"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        command = [sys.executable, "-c", _CPYTHON_RUN, json.dumps(DEFAULT_SETUP)]
        subprocess.run(command, env=env, check=True, capture_output=True)  # compiles the bytecode
        results = [json.loads(subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout)
                   for _ in range(runs)]
    return _median(results)


def pyodide(runs: int, site: Path) -> dict:
    script = ROOT / "benchmarks" / "bench_pyodide_import.mjs"
    with tempfile.TemporaryDirectory(prefix="trainmem-bench-pyodide-") as temporary:
        sources = Path(temporary) / "sources"
        shutil.copytree(ROOT / "core" / "trainmem", sources / "trainmem",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "corpus*.jsonl"))
        shutil.copy(ROOT / "web" / "py" / "trainmem_web.py", sources / "trainmem_web.py")
        setup = Path(temporary) / "setup.json"
        setup.write_text(json.dumps(DEFAULT_SETUP))
        subprocess.run(["node", str(script), "compile", str(site), str(sources)], check=True)
        results = []
        for _ in range(runs):
            out = subprocess.run(["node", str(script), "measure", str(site), str(sources), str(setup)],
                                 check=True, capture_output=True, text=True).stdout
            results.append(json.loads(out.strip().splitlines()[-1]))
    return _median(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--site", type=Path, default=ROOT / "_site", help="a built site (build_site.py)")
    parser.add_argument("--no-pyodide", action="store_true")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    print("CPython", json.dumps(cpython(args.runs)))
    if not args.no_pyodide:
        print("Pyodide", json.dumps(pyodide(args.runs, args.site)))
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

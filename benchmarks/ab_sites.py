#!/usr/bin/env python3
"""Two built sites compared cold load by cold load, interleaved (a benchmark, not a test).

    python benchmarks/ab_sites.py OLD_SITE NEW_SITE [--rounds 3]

On a machine shared with other work the load changes from minute to minute, so a comparison of two
builds measured one after the other says little: this runs benchmarks/bench_site.py on A, then B, then
A, ... (--rounds each, one cold and one warm load and one recompute per run) and prints, per figure,
the min and median of each site, the median cold run's stages, and the load average at each run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent / "bench_site.py"
FIGURES = ("prerendered_s", "interactive_cold_s", "first_answer_cold_s", "interactive_warm_s", "interactive_service_worker_s",
           "download_mb")


def one_run(site: Path) -> dict:
    load = os.getloadavg()[0]
    answer = subprocess.run([sys.executable, str(BENCH), "--site", str(site), "--runs", "1", "--recomputes", "1", "--json"],
                            check=True, capture_output=True, text=True)
    result = json.loads(answer.stdout)
    result["load_before"] = load
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sites", type=Path, nargs=2, help="the two built sites (A, B)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {"A": [], "B": []}
    for round_index in range(args.rounds):
        for label, site in zip("AB", args.sites):
            result = one_run(site)
            runs[label].append(result)
            print(f"round {round_index + 1} {label}: interactive {result['interactive_cold_s']['median']:.3f} s, "
                  f"paint {result['prerendered_s']['median']:.3f} s, load {result['load_before']:.1f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    for label, site in zip("AB", args.sites):
        print(f"{label} = {site}")
        for figure in FIGURES:
            if not all(figure in run for run in runs[label]):
                continue
            values = sorted(run[figure]["median"] for run in runs[label])
            print(f"  {figure:<22} min {values[0]:7.3f}  median {statistics.median(values):7.3f}  ({', '.join(f'{v:.3f}' for v in values)})")
        middle = sorted(runs[label], key=lambda run: run["interactive_cold_s"]["median"])[len(runs[label]) // 2]
        stages = sorted(middle["stages_cold_s"].items(), key=lambda kv: kv[1])
        print("  median run's stages: " + ", ".join(f"{name} {seconds:.2f}" for name, seconds in stages))
        print("  load averages: " + ", ".join(f"{run['load_before']:.1f}" for run in runs[label]))


if __name__ == "__main__":
    main()

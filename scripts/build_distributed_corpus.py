"""Regenerate the distributed corpus from the case list in scripts/distributed_cases.py.

    python scripts/build_distributed_corpus.py                # every case -> core/trainmem/data/corpus_distributed.jsonl
    python scripts/build_distributed_corpus.py --only ID ...  # re-measure some cases, keep the others
    python scripts/build_distributed_corpus.py --list

Each case launches its own ranks (gloo over 127.0.0.1, see trainmem.measure.distributed) and
writes one line per rank, ids ``<case>-rank<N>``. Needs the ``measure`` extra, and
``deepspeed==0.19.*`` for the ZeRO cases (DS_ACCELERATOR=cpu is set for the ranks).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from distributed_cases import DISTRIBUTED_CASES, OUTSIDE_THE_CORPUS  # noqa: E402


DEFAULT_OUTPUT = ROOT / "core" / "trainmem" / "data" / "corpus_distributed.jsonl"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="ID", help="measure only these cases")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--list", action="store_true", help="list the case ids")
    parser.add_argument("--one", metavar="ID", help=argparse.SUPPRESS)  # internal: measure one case, print its lines
    arguments = parser.parse_args(argv)
    by_id = {case["id"]: case for case in DISTRIBUTED_CASES + OUTSIDE_THE_CORPUS}
    if arguments.list:
        print("\n".join(by_id))
        return 0
    if arguments.one:
        from trainmem.measure.corpus import dump_measurement
        from trainmem.measure.distributed import measure_distributed

        case = by_id[arguments.one]
        for measurement in measure_distributed(case["setup"], case_id=case["id"], description=case["description"]):
            print("MEASUREMENT " + dump_measurement(measurement))
        return 0
    selected = arguments.only or [case["id"] for case in DISTRIBUTED_CASES]
    unknown = [case_id for case_id in selected if case_id not in by_id]
    if unknown:
        print(f"unknown case ids: {', '.join(unknown)}", file=sys.stderr)
        return 2
    # Each case runs in a fresh interpreter, and this process keeps the records as text: a long run
    # survives changes to the code it measures.
    kept = _read_lines(arguments.output)
    started = time.time()
    for number, case_id in enumerate(selected, start=1):
        result = subprocess.run(
            [sys.executable, __file__, "--one", case_id], capture_output=True, text=True, check=False
        )
        lines = [line[len("MEASUREMENT ") :] for line in result.stdout.splitlines() if line.startswith("MEASUREMENT ")]
        if result.returncode or not lines:
            print(f"[{number}/{len(selected)}] {case_id}: FAILED\n{result.stderr[-3000:]}", flush=True)
            continue
        kept = {key: value for key, value in kept.items() if not key.startswith(case_id + "-rank")}
        kept.update({json.loads(line)["id"]: line for line in lines})
        arguments.output.write_text("".join(kept[key] + "\n" for key in sorted(kept)), encoding="utf-8")
        peaks = ", ".join(f"{json.loads(line)['peak_allocated_bytes']:,}" for line in lines)
        print(f"[{number}/{len(selected)}] {case_id}: peaks {peaks} B ({time.time() - started:.0f} s)", flush=True)
    print(f"wrote {len(kept)} rank records to {arguments.output}")
    return 0


def _read_lines(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    return {json.loads(line)["id"]: line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}


if __name__ == "__main__":
    raise SystemExit(main())

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
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from distributed_cases import DISTRIBUTED_CASES  # noqa: E402

from trainmem.measure.corpus import load_corpus, write_corpus  # noqa: E402

DEFAULT_OUTPUT = ROOT / "core" / "trainmem" / "data" / "corpus_distributed.jsonl"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="ID", help="measure only these cases")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--list", action="store_true", help="list the case ids")
    arguments = parser.parse_args(argv)
    by_id = {case["id"]: case for case in DISTRIBUTED_CASES}
    if arguments.list:
        print("\n".join(by_id))
        return 0
    selected = arguments.only or list(by_id)
    unknown = [case_id for case_id in selected if case_id not in by_id]
    if unknown:
        print(f"unknown case ids: {', '.join(unknown)}", file=sys.stderr)
        return 2
    from trainmem.measure.distributed import measure_distributed

    kept = {m.id: m for m in load_corpus(arguments.output)} if arguments.output.exists() else {}
    started = time.time()
    for number, case_id in enumerate(selected, start=1):
        case = by_id[case_id]
        ranks = measure_distributed(case["setup"], case_id=case_id, description=case["description"])
        kept = {key: value for key, value in kept.items() if not key.startswith(case_id + "-rank")}
        kept.update({m.id: m for m in ranks})
        write_corpus(kept.values(), arguments.output)  # after every case: a long run keeps what it measured
        peaks = ", ".join(f"{m.peak_allocated_bytes:,}" for m in ranks)
        print(f"[{number}/{len(selected)}] {case_id}: peaks {peaks} B ({time.time() - started:.0f} s)", flush=True)
    print(f"wrote {len(kept)} rank records to {arguments.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

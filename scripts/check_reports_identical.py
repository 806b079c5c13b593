"""Hash every answer the core and the page's bridge give, to check that a change kept them byte-identical.

    python scripts/check_reports_identical.py --write /tmp/before.json   # on the old checkout
    python scripts/check_reports_identical.py --against /tmp/before.json # on the new one: exit 1 on a difference

What is hashed (SHA-256 of the text, one entry per case):

* ``corpus``: ``trainmem.estimate(setup).model_dump_json()`` for every setup of the training corpus files;
* ``page``: the bridge (``web/py/trainmem_web.py``) on build_site.py's ``IMPORT_CASES`` (``compute`` with
  and without suggestions, ``architecture``, ``model_inputs``), its ``TRAINER_FILE_CASES``
  (``read_files``), every ``write_file`` format, ``markdown``, ``catalogs`` and the Setup JSON schema;
* ``varied``: ``compute`` on seeded setups from benchmarks/fuzz_setups.py, valid-looking and hostile
  (errors are answers too), every tenth with suggestions;
* ``cli_errors``: the messages of unsupported model types and presets (they list the supported ones);
* ``presets``: ``compute`` with suggestions of every preset on its own (``{"model": name}``);
* ``generation``: the ``generate`` phase (trainmem.inference) of every case of ``corpus_generation.jsonl``.

``--first-only`` hashes the default setup's compute alone: run it in a fresh process to check the
answer of a cold start, with nothing imported before it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "core"))
sys.path.insert(0, str(ROOT / "web" / "py"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

CORPUS_FILES = ("corpus.jsonl", "corpus_distributed.jsonl")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def first_compute() -> dict[str, str]:
    import trainmem_web
    from build_site import DEFAULT_SETUP

    return {"page/first-compute": _sha(trainmem_web.compute(json.dumps(DEFAULT_SETUP), False))}


def corpus() -> dict[str, str]:
    import trainmem

    hashes = {}
    for name in CORPUS_FILES:
        for line in (ROOT / "core" / "trainmem" / "data" / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                case = json.loads(line)
                hashes[f"corpus/{name}/{case['id']}"] = _sha(trainmem.estimate(case["setup"]).model_dump_json())
    return hashes


def page() -> dict[str, str]:
    import trainmem_web
    from build_site import IMPORT_CASES, TRAINER_FILE_CASES

    hashes = {}
    for index, setup in enumerate(IMPORT_CASES):
        text = json.dumps(setup)
        for suggestions in (False, True):
            answer = trainmem_web.compute(text, suggestions)
            hashes[f"page/compute/{index}/{suggestions}"] = _sha(answer)
            if suggestions and json.loads(answer)["ok"]:
                hashes[f"page/markdown/{index}"] = _sha(trainmem_web.markdown(json.dumps(json.loads(answer)["report"])))
        model = json.dumps(setup.get("model"))
        hashes[f"page/architecture/{index}"] = _sha(trainmem_web.architecture(model))
        hashes[f"page/model_inputs/{index}"] = _sha(trainmem_web.model_inputs(model))
    form = json.dumps(IMPORT_CASES[0])
    for index, files in enumerate(TRAINER_FILE_CASES):
        hashes[f"page/read_files/{index}"] = _sha(trainmem_web.read_files(json.dumps(files), form))
    for file_format in trainmem_web.file_formats():
        hashes[f"page/write_file/{file_format['format']}"] = _sha(trainmem_web.write_file(form, file_format["format"]))
    hashes["page/catalogs"] = _sha(json.dumps(trainmem_web.catalogs()))
    hashes["page/schema"] = _sha(json.dumps(trainmem_web.Setup.model_json_schema()))
    return hashes


def varied(count: int, seed: int) -> dict[str, str]:
    import fuzz_setups
    import trainmem_web

    rng = random.Random(seed)
    hashes = {}
    for index in range(count):
        case = fuzz_setups.valid_looking(rng) if index % 2 == 0 else fuzz_setups.hostile(rng)
        text = fuzz_setups._json_text(case)
        hashes[f"varied/{seed}/{index}"] = _sha(trainmem_web.compute(text, index % 10 == 0))
    return hashes


def cli_errors() -> dict[str, str]:
    import trainmem_web

    hashes = {}
    for index, model in enumerate([{"hf_config": {"model_type": "no-such-family"}}, {"preset": "no-such-preset"},
                                   {"hf_config": {"model_type": "internlm2"}},
                                   {"hf_config": {"model_type": "llava", "text_config": {"model_type": "nope"}}}]):
        hashes[f"errors/{index}"] = _sha(trainmem_web.compute(json.dumps({"model": model}), False))
    return hashes


def presets() -> dict[str, str]:
    import trainmem_web
    from trainmem.catalogs import presets as preset_catalog

    return {
        f"presets/{name}": _sha(trainmem_web.compute(json.dumps({"model": name}), True)) for name in sorted(preset_catalog())
    }


def generation() -> dict[str, str]:
    """The phase each measured generation case predicts (trainmem.inference.validate.predict), field by field."""
    from trainmem.inference.generation import hf_generation_phase
    from trainmem.inference.validate import load_generation_corpus
    from trainmem.plan import Plan
    from trainmem.setup import Setup

    hashes = {}
    for measurement in load_generation_corpus():
        case = measurement.case
        phase = hf_generation_phase(
            Plan(Setup.model_validate(case.setup_dict())), case.batch_size, case.prompt_tokens, case.completion_tokens,
            do_sample=case.do_sample, top_k=case.generation_kwargs.get("top_k", 50) if case.do_sample else None,
        )
        hashes[f"generation/{case.id}"] = _sha(repr(phase))
    return hashes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="write the hashes to this JSON file")
    parser.add_argument("--against", type=Path, help="compare with hashes written before; exit 1 on a difference")
    parser.add_argument("--varied", type=int, default=400, help="how many seeded fuzz setups (default 400)")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--first-only", action="store_true", help="only the default setup's first compute")
    args = parser.parse_args()
    hashes = first_compute()
    if not args.first_only:
        hashes |= corpus() | page() | varied(args.varied, args.seed) | cli_errors() | presets() | generation()
    groups: dict[str, list[str]] = {}
    for key in sorted(hashes):
        groups.setdefault(key.split("/")[0], []).append(hashes[key])
    for group, values in groups.items():
        print(f"{group}: {len(values)} answers, sha256 of all {_sha(''.join(values))[:16]}")
    if args.write:
        args.write.write_text(json.dumps(hashes, indent=0, sort_keys=True))
    if args.against:
        before = json.loads(args.against.read_text())
        if args.first_only:
            before = {key: value for key, value in before.items() if key in hashes}
        differ = sorted(key for key in before.keys() | hashes.keys() if before.get(key) != hashes.get(key))
        for key in differ[:20]:
            print(f"differs: {key}")
        print(f"{len(hashes)} answers compared: {len(differ)} differ")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

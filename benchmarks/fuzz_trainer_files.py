"""Fuzz the trainer-file readers with the real files of tests/data/trainer_files, one key at a time.

Every YAML/JSON file there (DeepSpeed, Accelerate, Axolotl, TRL and TrainingArguments, LLaMA-Factory, PEFT,
torchtune, verl) is parsed, and each key path it holds (nested keys too) gets, alone, each of

* a value of another type: ``null``, a string, ``true``, a list, an object, NaN, ±infinity, 0, −1, 2⁶³,
  a float, a string that looks like a number (``"1e400"``), a string of hydra interpolation (``${a.b}``);
* the key removed;

and each file gets text mutations: a YAML alias bomb ("billion laughs"), nesting 200 levels deep, a repeated
key, a Python tag (``!!python/object/apply``), the literals ``.nan``/``.inf``/``1e400``, a byte-order mark, a
NUL byte. Each verl launch script (``.sh``) has each ``key=value`` override given odd quoting (unbalanced
quotes, ``$(...)``, ``\\``, ``=`` in the value, a lone ``'``) and huge or non-finite values.

A case goes through the files' path of ``trainmem estimate FILE`` (``inputs.read_texts``, then the estimate of
the Setup, suggestions off) and through the page's bridge (``trainmem_web.read_files``). It ends as

* **setup** / **report**: read (and estimated);
* **refused**: one printable line (the CLI's ``trainmem: error: ...``; the bridge's ``ok: false``);
* **crash**: any other exception, a refusal of several lines, a bridge answer that is not its JSON or that
  says "internal error".

    python benchmarks/fuzz_trainer_files.py                 # every case
    python benchmarks/fuzz_trainer_files.py --sample 300 --seed 1

Exit status 1 when a case crashed. tests/test_fuzz_trainer_files.py runs a seeded sample (and ``-m slow``
every case).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT / "core", ROOT / "web" / "py"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import trainmem_web  # noqa: E402
import yaml  # noqa: E402

import trainmem  # noqa: E402
from trainmem import inputs  # noqa: E402

DATA = ROOT / "tests" / "data" / "trainer_files"
MODEL = {"model": {"preset": "qwen2.5-0.5b"}, "micro_batch_size": 1, "sequence_length": 128}
"""The overrides every case is read with: files that name a Hub checkpoint get a preset (nothing is fetched)."""

VALUES: list[tuple[str, Any]] = [
    ("null", None), ("string", "abc"), ("true", True), ("false", False), ("list", [1, "a"]), ("object", {"x": 1}),
    ("zero", 0), ("minus one", -1), ("2**63", 2**63), ("float", 0.37), ("1e400 string", "1e400"),
    ("nan string", "nan"), ("interpolation", "${a.b}"), ("empty", ""),
]
NON_FINITE: list[tuple[str, str]] = [("nan", ".nan"), ("inf", ".inf"), ("-inf", "-.inf"), ("1e400", "1e400")]
"""YAML literals (JSON has none: ``parse_json_text`` refuses NaN/Infinity)."""

OVERRIDE_VALUES = [
    "'unbalanced", '"unbalanced', "$(rm -rf /)", "a\\\\b", "x=y=z", "'", '""', "1e400", "nan", "-inf", str(2**80),
    "[1,2", "{a:", "${oc.env:HOME}", "null", "~", "[]", "{}", "'1' '2'",
]


@dataclass(frozen=True)
class Case:
    file: str
    what: str
    make: Any  # () -> the mutated text: built when the case runs (thousands of YAML dumps are slow)

    @property
    def text(self) -> str:
        return self.make()

    @property
    def label(self) -> str:
        return f"{self.file} {self.what}"


def _fixed_text(text: str):
    return lambda: text


def files() -> list[Path]:
    return sorted(p for p in DATA.rglob("*") if p.suffix in (".yaml", ".yml", ".json", ".sh"))


def _key_paths(data: Any, prefix: tuple = ()) -> Iterator[tuple]:
    if isinstance(data, dict):
        for key, child in data.items():
            yield prefix + (key,)
            yield from _key_paths(child, prefix + (key,))
    elif isinstance(data, list):
        for index, child in enumerate(data[:2]):
            yield from _key_paths(child, prefix + (index,))


def _dump(path: Path, document: Any) -> str:
    if path.suffix == ".json":
        return json.dumps(document)
    return yaml.dump(document, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)


def _set(document: Any, key_path: tuple, value: Any, drop: bool = False) -> Any:
    mutated = copy.deepcopy(document)
    parent = mutated
    for part in key_path[:-1]:
        parent = parent[part]
    if drop:
        if isinstance(parent, dict):
            parent.pop(key_path[-1], None)
        else:
            parent.pop(key_path[-1])
    else:
        parent[key_path[-1]] = copy.deepcopy(value)
    return mutated


def _label(key_path: tuple) -> str:
    return ".".join(str(part) for part in key_path)


def key_cases(path: Path) -> Iterator[Case]:
    name = path.relative_to(DATA).as_posix()
    document = yaml.safe_load(path.read_text())
    if not isinstance(document, dict):
        return
    for key_path in _key_paths(document):
        yield Case(name, f"{_label(key_path)} removed",
                   lambda key_path=key_path: _dump(path, _set(document, key_path, None, drop=True)))
        for label, value in VALUES:
            yield Case(name, f"{_label(key_path)} = {label}",
                       lambda key_path=key_path, value=value: _dump(path, _set(document, key_path, value)))
        if path.suffix != ".json":
            for label, literal in NON_FINITE:
                yield Case(name, f"{_label(key_path)} = {label} literal",
                           lambda key_path=key_path, literal=literal: _with_literal(path, document, key_path, literal))


def _with_literal(path: Path, document: Any, key_path: tuple, literal: str) -> str:
    marker = "__TRAINMEM_FUZZ__"
    return _dump(path, _set(document, key_path, marker)).replace(f"'{marker}'", literal).replace(marker, literal)


def text_cases(path: Path) -> Iterator[Case]:
    name = path.relative_to(DATA).as_posix()
    text = path.read_text()
    if path.suffix == ".sh":
        yield from script_cases(path)
        return
    if path.suffix == ".json":
        body = text.strip()
        yield Case(name, "nested 200 deep", _fixed_text('{"a": ' * 200 + "1" + "}" * 200))
        yield Case(name, "repeated key", _fixed_text(body[:-1].rstrip() + ', "__dup": 1, "__dup": 2}' if body.endswith("}") else body))
        yield Case(name, "first key repeated", _fixed_text("{" + body[1:].split(",", 1)[0] + "," + body[1:]))
        yield Case(name, "NaN literal", _fixed_text(body.replace(": ", ": NaN, \"__x\": ", 1)))
        yield Case(name, "1e400", _fixed_text(body.replace(": ", ": 1e400, \"__y\": ", 1)))
    else:
        bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
        )
        yield Case(name, "alias bomb", _fixed_text(bomb + text))
        yield Case(name, "alias bomb as a value", _fixed_text(text + "\n" + bomb.replace("a: &a", "zz_bomb: &a")))
        yield Case(name, "nested 200 deep", _fixed_text(text + "\nzz_deep: " + "[" * 200 + "]" * 200 + "\n"))
        first = next((line for line in text.splitlines() if line and not line.startswith((" ", "#", "-"))), "")
        yield Case(name, "first key repeated", _fixed_text(text + "\n" + first + "\n"))
        yield Case(name, "python tag", _fixed_text("!!python/object/apply:os.system ['true']\n" + text))
        yield Case(name, "python tag as a value", _fixed_text(text + "\nzz_tag: !!python/object/apply:os.getcwd []\n"))
        yield Case(name, "anchor merge", _fixed_text("base: &base {x: 1}\n" + text + "\nzz_merge: {<<: *base}\n"))
        yield Case(name, "tabs", _fixed_text(text.replace("  ", "\t", 1)))
    yield Case(name, "byte-order mark", _fixed_text("\ufeff" + text))
    yield Case(name, "NUL byte", _fixed_text(text + "\x00"))
    yield Case(name, "lone surrogate", _fixed_text(text.replace("e", "\ud800", 1)))
    yield Case(name, "empty", _fixed_text(""))


def script_cases(path: Path) -> Iterator[Case]:
    name = path.relative_to(DATA).as_posix()
    lines = path.read_text().splitlines(keepends=True)
    indices = [i for i, line in enumerate(lines) if "=" in line and "." in line.split("=", 1)[0]]
    for index in indices:
        key = lines[index].split("=", 1)[0]
        for value in OVERRIDE_VALUES:
            mutated = list(lines)
            mutated[index] = f"{key}={value} \\\n"
            yield Case(name, f"{key.strip()}={value}", _fixed_text("".join(mutated)))
        mutated = list(lines)
        mutated[index] = " \\\n"
        yield Case(name, f"{key.strip()} removed", _fixed_text("".join(mutated)))


def all_cases() -> list[Case]:
    cases: list[Case] = []
    for path in files():
        if path.suffix != ".sh":
            cases += key_cases(path)
        cases += text_cases(path)
    return cases


def sample_cases(count: int, seed: int) -> list[Case]:
    cases = all_cases()
    return random.Random(seed).sample(cases, min(count, len(cases)))


# --------------------------------------------------------------------------- running a case


@dataclass
class Outcome:
    case: Case
    api: str  # setup | report | refused | crash
    bridge: str  # setup | refused | crash
    detail: str = ""


def _one_line(message: str) -> bool:
    return bool(message) and "\n" not in message and message.isprintable()


def _file_name(case: Case) -> str:
    return Path(case.file).name


def run_api(case: Case, estimate: bool = True) -> tuple[str, str]:
    from pydantic import ValidationError

    from trainmem.errors import one_line

    try:
        setup, _keys = inputs.read_texts({_file_name(case): case.text}, overrides=MODEL)
        if not estimate:
            return "setup", ""
        trainmem.estimate(setup, suggestions=False)
    except (RecursionError, MemoryError) as error:
        return "crash", f"{type(error).__name__}"
    except ValueError as error:
        message = one_line(error) if isinstance(error, ValidationError) else str(error)
        return ("refused", message) if _one_line(message) else ("crash", f"refusal not one line: {message!r}")
    except Exception as error:  # noqa: BLE001 - the bug this fuzz looks for
        return "crash", f"{type(error).__name__}: {error}"
    return "report", ""


def run_bridge(case: Case) -> tuple[str, str]:
    answer_text = trainmem_web.read_files(json.dumps({_file_name(case): case.text}), json.dumps(MODEL))
    try:
        answer = json.loads(answer_text)
    except ValueError:
        return "crash", f"not JSON: {answer_text[:200]!r}"
    if answer.get("ok"):
        return "setup", ""
    errors = answer.get("errors") or []
    messages = [str(error.get("message", "")) for error in errors if isinstance(error, dict)]
    if not messages:
        return "crash", f"ok false without errors: {answer_text[:200]!r}"
    for message in messages:
        if "internal error" in message or not _one_line(message):
            return "crash", f"bridge: {message[:300]!r}"
    return "refused", messages[0]


def run_case(case: Case, estimate: bool = True) -> Outcome:
    api, api_detail = run_api(case, estimate)
    bridge, bridge_detail = run_bridge(case)
    detail = api_detail if api == "crash" else bridge_detail if bridge == "crash" else ""
    return Outcome(case, api, bridge, detail)


def fuzz(cases: list[Case], estimate: bool = True) -> list[Outcome]:
    return [run_case(case, estimate) for case in cases]


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    return {
        "cases": len(outcomes),
        "files": len({o.case.file for o in outcomes}),
        "api": dict(sorted(Counter(o.api for o in outcomes).items())),
        "bridge": dict(sorted(Counter(o.bridge for o in outcomes).items())),
        "crashes": [f"{o.case.label}: {o.detail}" for o in outcomes if "crash" in (o.api, o.bridge)],
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=0, help="run this many cases drawn with --seed (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-estimate", action="store_true", help="read the files only (faster)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--data", type=Path, help="the folder of real files (default tests/data/trainer_files)")
    args = parser.parse_args(argv)
    if args.data is not None:
        global DATA
        DATA = args.data.resolve()
    cases = sample_cases(args.sample, args.seed) if args.sample else all_cases()
    result = summary(fuzz(cases, estimate=not args.no_estimate))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['cases']} cases over {result['files']} files: api {result['api']}, bridge {result['bridge']}")
        for line in result["crashes"]:
            print("  " + line[:400])
    return 1 if result["crashes"] else 0


if __name__ == "__main__":
    sys.exit(main())

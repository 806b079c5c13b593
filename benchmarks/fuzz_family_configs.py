"""Fuzz every family's config.json reader one field at a time, and check what it accepts against transformers.

Each seed is a small config of tests/test_families.py (``FAMILY_CONFIGS``, one or more per decoder family) or
of the encoder tests. The fields a family's reader consults are found by reading the seed through a mapping that
records every key asked for; each such field (present in the seed or not) is then mutated alone:

* **wrong types**: a string, ``true``/``false``, a list, an object, ``null``, NaN, ±infinity, a float for an
  integer (``64.0``, ``64.5``);
* **bad sizes**: 0, −1, the negated value, 2⁶³, 10³⁰, the value ± 1 and 2·value + 1 (a head count that no longer
  divides the hidden size, more key/value heads than heads, a top-k above the expert count, Mamba heads that do
  not divide), fractions out of (0, 1] for ``partial_rotary_factor``-like floats;
* **lists and patterns**: one entry more or less than the layers, an unknown entry, entries of the wrong type
  (``layer_types``, ``no_rope_layers``, ``mlp_only_layers``, Nemotron-H's ``hybrid_override_pattern``);
* **a missing key**.

Each mutated config goes through ``trainmem.estimate`` (micro-batch 1, 32 tokens, CPU). The outcome is

* **report**, **refused** (a ``ValueError`` whose message is one printable line naming a field), or
* **crash**: any other exception, or a refusal of several lines.

With ``--oracle`` (needs torch and transformers), every *report* is checked against transformers 5.24: the
mutated config is built with ``AutoConfig.for_model`` and ``AutoModelForCausalLM.from_config`` on the meta
device. **silent** is an estimate of a model transformers cannot build (its configuration class or the model
raises), or whose parameter count differs from the model transformers builds: a number nobody could measure.

    python benchmarks/fuzz_family_configs.py                  # every mutation of every seed, no oracle
    python benchmarks/fuzz_family_configs.py --oracle         # and each report against transformers
    python benchmarks/fuzz_family_configs.py --sample 300 --seed 1

Exit status 1 when a case crashed (or, with ``--oracle``, was silent). tests/test_fuzz_family_configs.py runs a
seeded sample in the default suite and the whole sweep under ``-m slow``.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import sys
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT / "core", ROOT / "tests", ROOT / "scripts"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import trainmem  # noqa: E402
from trainmem.models import FAMILIES, architecture_from_hf_config  # noqa: E402

ESTIMATE_SETUP = {"micro_batch_size": 1, "sequence_length": 32, "runtime": {"device": "cpu"}}
_DROP = object()


def seed_configs() -> dict[str, dict]:
    """The small configs of the family tests, by name: decoders (with a transformers oracle) and encoders."""
    from test_families import FAMILY_CONFIGS

    seeds = {name: copy.deepcopy(config) for name, config in FAMILY_CONFIGS.items()}
    try:
        from test_encoders import SMALL as ENCODERS
    except ImportError:  # pragma: no cover - the encoder tests need nothing extra
        ENCODERS = {}
    for name, config in ENCODERS.items():
        seeds.setdefault(f"encoder:{name}", copy.deepcopy(config))
    return seeds


class _Recording(dict):
    """A dict that records every key a reader asks for (``get``, ``in``, ``[]``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked: set[str] = set()

    def get(self, key: Any, default: Any = None) -> Any:
        self.asked.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.asked.add(key)  # type: ignore[arg-type]
        return super().__contains__(key)

    def __getitem__(self, key: Any) -> Any:
        self.asked.add(key)
        return super().__getitem__(key)


def read_fields(config: Mapping[str, Any]) -> set[str]:
    """The config keys the family's reader asks for when it reads ``config``."""
    recording = _Recording(config)
    try:
        architecture_from_hf_config(recording)
    except ValueError:
        pass
    return {key for key in recording.asked if isinstance(key, str)}


def consulted_fields(config: Mapping[str, Any]) -> list[str]:
    """The keys to mutate: those the reader asks for and those the seed has (sorted; ``model_type`` left out)."""
    return sorted(key for key in read_fields(config) | set(config) if isinstance(key, str) and key != "model_type")


# --------------------------------------------------------------------------- mutations

WRONG_TYPES: list[tuple[str, Any]] = [
    ("null", None),
    ("string", "64"),
    ("true", True),
    ("false", False),
    ("list", [1]),
    ("object", {"a": 1}),
    ("nan", math.nan),
    ("inf", math.inf),
    ("-inf", -math.inf),
]


def _integer_mutations(value: int) -> list[tuple[str, Any]]:
    return [
        ("zero", 0), ("minus one", -1), ("negated", -value), ("float", float(value)), ("half", value + 0.5),
        ("2**63", 2**63), ("1e30", 10**30), ("plus one", value + 1), ("minus one more", value - 1),
        ("odd double", 2 * value + 1), ("2**20", 2**20),
    ]


def _float_mutations(value: float) -> list[tuple[str, Any]]:
    return [
        ("zero", 0.0), ("negative", -0.5), ("above one", 1.5), ("tiny", 1e-12), ("huge", 1e308), ("integer", 1),
        ("third", 1 / 3),
    ]


def _list_mutations(value: list, layers: int) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [("empty", []), ("one more", value + value[-1:]), ("one less", value[:-1]),
                                  ("strings", [str(item) for item in value])]
    if value:
        out += [("unknown entry", ["nonsense"] + value[1:]), ("null entry", [None] + value[1:]),
                ("float entry", [1.5] + value[1:]), ("huge entry", [2**40] + value[1:]),
                ("negative entry", [-1] + value[1:]), ("nested", [value])]
    else:
        out.append(("per layer", list(range(layers))))
    return out


def _string_mutations(value: str) -> list[tuple[str, Any]]:
    return [("empty", ""), ("unknown", "nonsense"), ("one more", value + value[-1:] if value else "M"),
            ("one less", value[:-1]), ("unknown char", "Z" + value[1:]), ("control", "\x00\x07"), ("integer", 3)]


# Values a field the seed leaves out may take: each kind of value a reader could read it as.
ABSENT_VALUES: list[tuple[str, Any]] = [
    ("set 0", 0), ("set 1", 1), ("set 3", 3), ("set -1", -1), ("set 2**63", 2**63), ("set 0.5", 0.5),
    ("set 1.5", 1.5), ("set true", True), ("set string", "full_attention"), ("set list", [0, 1]),
    ("set object", {"type": "x"}), ("set nan", math.nan),
]


def mutations(config: Mapping[str, Any], field: str) -> Iterator[tuple[str, Any]]:
    """(label, new value) for one field; ``_DROP`` removes the key."""
    layers = config.get("num_hidden_layers") if isinstance(config.get("num_hidden_layers"), int) else 3
    if field not in config:
        yield from ABSENT_VALUES
        return
    value = config[field]
    yield ("missing", _DROP)
    yield from WRONG_TYPES
    if isinstance(value, bool):
        yield ("integer 1", 1)
        yield ("string true", "true")
    elif isinstance(value, int):
        yield from _integer_mutations(value)
    elif isinstance(value, float):
        yield from _float_mutations(value)
    elif isinstance(value, list):
        yield from _list_mutations(value, layers)
    elif isinstance(value, str):
        yield from _string_mutations(value)
    elif isinstance(value, dict):
        yield ("empty object", {})
        for key in list(value)[:4]:
            for label, bad in WRONG_TYPES[:6]:
                yield (f"{key} {label}", {**value, key: bad})


@dataclass(frozen=True)
class Case:
    seed: str
    field: str
    mutation: str
    config: dict
    read: bool = True
    """Whether the family's reader reads ``field`` (a field it ignores cannot change a number)."""

    @property
    def label(self) -> str:
        return f"{self.seed} {self.field} {self.mutation}"


def all_cases(seeds: Optional[Mapping[str, dict]] = None) -> list[Case]:
    """Every mutation of every consulted field of every seed, in a fixed order."""
    seeds = seed_configs() if seeds is None else seeds
    cases = []
    for name, config in seeds.items():
        read = read_fields(config)
        for field in consulted_fields(config):
            for label, value in mutations(config, field):
                mutated = copy.deepcopy(config)
                if value is _DROP:
                    mutated.pop(field, None)
                else:
                    mutated[field] = copy.deepcopy(value)
                cases.append(Case(name, field, label, mutated, field in read))
    return cases


def sample_cases(count: int, seed: int) -> list[Case]:
    cases = all_cases()
    return random.Random(seed).sample(cases, min(count, len(cases)))


# --------------------------------------------------------------------------- running a case


@dataclass
class Outcome:
    case: Case
    kind: str  # report | refused | late | crash | silent
    detail: str = ""
    num_parameters: Optional[int] = None


def _one_line(message: str) -> bool:
    return bool(message) and "\n" not in message and message.isprintable()


def run_case(case: Case) -> Outcome:
    """``refused`` when the Setup is refused in one line; ``late`` when the Setup is taken but the estimate then
    raises a one-line ValueError (the CLI still prints one line, but the page's form would not have flagged it)."""
    from pydantic import ValidationError

    from trainmem.errors import one_line
    from trainmem.setup import Setup

    setup = {"model": {"hf_config": case.config}, **ESTIMATE_SETUP}
    if case.seed.startswith("encoder:"):
        setup["task"] = "sequence_classification"
    stage = "setup"
    try:
        validated = Setup.model_validate(setup)
        stage = "estimate"
        report = trainmem.estimate(validated, suggestions=False)
    except ValueError as error:
        message = one_line(error) if isinstance(error, ValidationError) else str(error)
        if not _one_line(message):
            return Outcome(case, "crash", f"refusal not one line: {message!r}")
        return Outcome(case, "refused" if stage == "setup" else "late", message)
    except Exception as error:  # noqa: BLE001 - any other exception is the bug this fuzz looks for
        return Outcome(case, "crash", f"{type(error).__name__} ({stage}): {error}")
    return Outcome(case, "report", num_parameters=report.num_parameters)


def transformers_count(config: Mapping[str, Any]) -> int:
    """Parameters of the model transformers builds from ``config`` on the meta device (raises what it raises)."""
    import torch
    import transformers

    from trainmem.measure.causal_lm_classes import register_causal_lms

    register_causal_lms()  # Mistral4ForCausalLM is not in AutoModelForCausalLM's mapping
    fields = copy.deepcopy(dict(config))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(hf_config)
    return sum(p.numel() for p in model.parameters())


def check_against_transformers(outcome: Outcome) -> Outcome:
    """A report of a model transformers cannot build, or of another parameter count, becomes *silent*.

    Two refusals of transformers are not counted as silent: a field the reader does not read (token ids: the
    estimate cannot depend on it), and ``null`` for a field whose class default trainmem reads instead
    (transformers' strict classes refuse None for a plain ``int`` field, or fail on it later): *lenient*."""
    if outcome.kind != "report" or outcome.case.seed.startswith("encoder:"):
        return outcome
    try:
        expected = transformers_count(outcome.case.config)
    except Exception as error:  # noqa: BLE001 - whatever transformers refuses with
        text = " ".join(str(error).split())[:240]
        detail = f"transformers refuses: {type(error).__name__}: {text}"
        if not outcome.case.read:
            return Outcome(outcome.case, "unread", detail)
        if outcome.case.mutation == "null":
            return Outcome(outcome.case, "lenient", detail)
        return Outcome(outcome.case, "silent", detail)
    if expected != outcome.num_parameters:
        return Outcome(outcome.case, "silent", f"{outcome.num_parameters:,} parameters, transformers builds {expected:,}")
    return outcome


def fuzz(cases: list[Case], oracle: bool = False, progress: Optional[Callable[[int], None]] = None) -> list[Outcome]:
    outcomes = []
    for index, case in enumerate(cases):
        outcome = run_case(case)
        if oracle:
            outcome = check_against_transformers(outcome)
        outcomes.append(outcome)
        if progress is not None:
            progress(index)
    return outcomes


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    kinds = Counter(outcome.kind for outcome in outcomes)
    return {
        "cases": len(outcomes),
        "seeds": len({outcome.case.seed for outcome in outcomes}),
        "outcomes": dict(sorted(kinds.items())),
        "crashes": [f"{o.case.label}: {o.detail}" for o in outcomes if o.kind == "crash"],
        "late": [f"{o.case.label}: {o.detail}" for o in outcomes if o.kind == "late"],
        "silent": [f"{o.case.label}: {o.detail}" for o in outcomes if o.kind == "silent"],
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=0, help="run this many cases drawn with --seed (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--oracle", action="store_true", help="check each report against transformers on meta")
    parser.add_argument("--family", action="append", default=[], help="only seeds of these model types")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    cases = sample_cases(args.sample, args.seed) if args.sample else all_cases()
    if args.family:
        cases = [case for case in cases if case.config.get("model_type") in args.family]
    outcomes = fuzz(cases, oracle=args.oracle)
    result = summary(outcomes)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['cases']} cases over {result['seeds']} seeds: {result['outcomes']}")
        for line in result["crashes"] + result["late"] + result["silent"]:
            print("  " + line)
    return 1 if result["crashes"] or result["silent"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""Fuzz the input boundary: generated setups, half valid-looking, half hostile mutations.

Each case goes through the Python API (``trainmem.estimate``) and the web page's bridge
(``web/py/trainmem_web.py``, as JSON text, the way the page's worker calls it). A case ends in
one of:

* **report**: an estimate; its text and JSON render, the JSON round-trips, and the report is
  self-consistent (breakdown total = peak; the timeline's peak is its maximum);
* **rejected**: ``pydantic.ValidationError`` from the API (every message one printable line that
  names a field) and ``ok: false`` from the bridge (every error one line);
* **crash**: any other exception, a report that fails those checks, or a bridge answer that is not
  the JSON it promises;
* **hang**: a case that took more than ``--bound-seconds`` (1 s) of CPU time, or that was still
  running after ``--interrupt-seconds`` (10 s) of wall time (a blocked read, a loop). CPU time,
  not wall time, is bounded so that a busy machine does not turn slow cases into hangs; the
  slowest wall time is reported too.

    python benchmarks/fuzz_setups.py                 # 400 cases (what tests/test_fuzz_setups.py runs)
    python benchmarks/fuzz_setups.py --full          # 100,000 cases, the figures in the README
    python benchmarks/fuzz_setups.py --cases 5000 --seed 7 --json

Exit status 1 when any case crashed or hung (the first few are printed with their setup).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, get_args

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "core"))
sys.path.insert(0, str(ROOT / "web" / "py"))

import trainmem_web  # noqa: E402
from pydantic import ValidationError  # noqa: E402

import trainmem  # noqa: E402
from trainmem.field_paths import setup_field_paths  # noqa: E402
from trainmem.catalogs import gpus, optimizers, presets  # noqa: E402
from trainmem.errors import format_validation_error, one_line  # noqa: E402
from trainmem.render import render_report  # noqa: E402
from trainmem.setup import Precision  # noqa: E402

FULL_CASES = 100_000
DEFAULT_CASES = 400

PRECISIONS = list(get_args(Precision))  # every recipe, in the order Setup declares them
MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "c_attn", "qkv_proj"]


# --------------------------------------------------------------------------- valid-looking setups


def _architecture(rng: random.Random) -> dict[str, Any]:
    heads = rng.choice([2, 4, 8, 12, 16, 32])
    head_dim = rng.choice([16, 32, 64, 128])
    arch: dict[str, Any] = {
        "vocab_size": rng.choice([256, 1000, 32000, 50257, 128256]),
        "hidden_size": heads * head_dim,
        "num_hidden_layers": rng.choice([1, 2, 4, 12, 32]),
        "num_attention_heads": heads,
        "num_key_value_heads": rng.choice([h for h in (1, 2, 4, 8, heads) if heads % h == 0]),
        "intermediate_size": rng.choice([64, 256, 1000, 4096, 11008]),
    }
    if rng.random() < 0.3:
        experts = rng.choice([2, 4, 8, 60])
        arch.update(num_experts=experts, num_experts_per_tok=rng.randint(1, min(experts, 4)))
        if rng.random() < 0.3:
            arch.update(shared_expert_intermediate_size=rng.choice([128, 5632]), shared_expert_gate=True)
    if rng.random() < 0.2:
        arch.update(mlp="plain", norm="layernorm", position_embedding="learned", attention_dropout=0.1)
    return arch


def _model(rng: random.Random) -> Any:
    roll = rng.random()
    names = sorted(presets())
    if roll < 0.45:
        return rng.choice(names)
    if roll < 0.65:
        config = dict(presets()[rng.choice(names)].config)
        if rng.random() < 0.5:
            config["num_hidden_layers"] = rng.choice([1, 2, 4])
        return {"hf_config": config}
    if roll < 0.9:
        return {"architecture": _architecture(rng)}
    return {"num_parameters": rng.choice([10**6, 124_000_000, 7 * 10**9, 70 * 10**9])}


def _parallelism(rng: random.Random) -> dict[str, Any]:
    if rng.random() < 0.35:
        return {}
    num_gpus = rng.choice([1, 2, 4, 8, 16, 64])
    out: dict[str, Any] = {"num_gpus": num_gpus}
    strategy = rng.choice(["ddp", "zero", "fsdp"])
    out["strategy"] = strategy
    if strategy == "zero":
        out["zero_stage"] = rng.randint(0, 3)
        if out["zero_stage"] == 3 and rng.random() < 0.3:
            out["offload_parameters"] = True
    if strategy == "fsdp":
        out["fsdp_sharding_strategy"] = rng.choice(["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"])
    if strategy != "ddp" and rng.random() < 0.2:
        out["offload_optimizer"] = True
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "context_parallel_size", "expert_parallel_size"):
        if rng.random() < 0.2:
            out[name] = rng.choice([1, 2, 4, 8])
    if out.get("tensor_parallel_size", 1) > 1 and rng.random() < 0.5:
        out["sequence_parallel"] = True
    return out


def _finetuning(rng: random.Random) -> dict[str, Any]:
    method = rng.choice(["full", "full", "lora", "qlora"])
    if method == "full":
        return (
            {"frozen": rng.sample(["embeddings", "attention", "mlp", "norms", "lm_head", "layers:0-0"], 1)}
            if (rng.random() < 0.2)
            else {}
        )
    lora: dict[str, Any] = {"r": rng.choice([1, 8, 16, 64, 256])}
    if rng.random() < 0.5:
        lora["target_modules"] = "all-linear" if rng.random() < 0.5 else rng.sample(MODULES, rng.randint(1, 3))
    if rng.random() < 0.2:
        lora["lora_dropout"] = 0.05
    return {"method": method, "lora": lora}


def valid_looking(rng: random.Random) -> dict[str, Any]:
    setup: dict[str, Any] = {"model": _model(rng)}
    choices = {
        "micro_batch_size": lambda: rng.choice([1, 2, 3, 4, 8, 16]),
        "sequence_length": lambda: rng.choice([64, 128, 512, 1024, 2048, 4096]),
        "gradient_accumulation_steps": lambda: rng.choice([1, 2, 4, 8]),
        "precision": lambda: rng.choice(PRECISIONS),
        "optimizer": lambda: rng.choice(sorted(optimizers())),
        "activation_checkpointing": lambda: rng.choice(["none", "selective", "full"]),
        "attention": lambda: rng.choice(["sdpa", "flash_attention_2", "eager", "sdpa-math"]),
        "loss": lambda: rng.choice(["standard", "chunked"]),
        "loss_chunks": lambda: rng.choice([1, 4, 8, 16]),
        "parallelism": lambda: _parallelism(rng),
        "finetuning": lambda: _finetuning(rng),
        "gpu": lambda: rng.choice(sorted(gpus())) if rng.random() < 0.8 else {"memory_gib": rng.choice([8, 24, 80.5])},
        "headroom_fraction": lambda: rng.choice([0.0, 0.05, 0.1, 0.2]),
        "runtime": lambda: {"device": rng.choice(["cuda", "cpu"])},
    }
    for name, make in choices.items():
        if rng.random() < 0.5:
            setup[name] = make()
    return setup


# --------------------------------------------------------------------------- hostile mutations


@dataclass(frozen=True)
class Deep:
    """A value nested ``depth`` levels deep (built without recursion; written as JSON text directly)."""

    depth: int
    kind: str = "list"

    def build(self) -> Any:
        inner: Any = 1
        for _ in range(self.depth):
            inner = [inner] if self.kind == "list" else {"a": inner}
        return inner

    def text(self) -> str:
        if self.kind == "list":
            return "[" * self.depth + "1" + "]" * self.depth
        return '{"a":' * self.depth + "1" + "}" * self.depth


HOSTILE_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    -(2**63),
    2**31,
    2**63,
    10**30,
    10**300,
    10**400,
    1e308,
    -1e308,
    math.inf,
    -math.inf,
    math.nan,
    0.5,
    3.0,
    5e-324,
    "",
    " ",
    "4",
    "768",
    "1e3",
    "true",
    "false",
    "null",
    "inf",
    "NaN",
    "\ud800",
    "a\nb",
    "\x00",
    "\u202e",
    "<script>alert(1)</script>",
    "../../etc/passwd",
    "/dev/zero",
    "x" * 5000,
    "layers:0-99999999",
    "layers:5-2",
    "all-linear",
    [],
    [1],
    ["q_proj", "\ud800"],
    [None],
    {},
    {"a": 1},
    {"memory_gib": math.inf},
    {"preset": "gpt2", "num_parameters": 1},
    Deep(40),
    Deep(300),
    Deep(100_000),
    Deep(300, "dict"),
]
HF_FIELDS = [
    "model_type",
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "head_dim",
    "tie_word_embeddings",
    "attention_dropout",
    "n_embd",
    "n_head",
    "n_layer",
    "n_inner",
    "num_local_experts",
    "num_experts_per_tok",
    "text_config",
    "max_position_embeddings",
    "final_logit_softcapping",
]
# Every Setup field, read from the models (trainmem.field_paths), so new fields are fuzzed too; plus a
# key no model has.
SETUP_PATHS = setup_field_paths() + ["an_unknown_field"]
ARCHITECTURE_HOSTILE_SIZES = [0, 3, 7, 10**6, 10**9, 2**40, 10**300]


def _fresh(value: Any) -> Any:
    """A copy of a hostile value: the catalogue's dicts and lists must never be shared (a later
    mutation would change the catalogue, or make a case contain itself)."""
    return copy.deepcopy(value) if isinstance(value, (dict, list)) else value


def _set(setup: dict[str, Any], path: str, value: Any) -> None:
    value = _fresh(value)
    node = setup
    keys = path.split(".")
    for key in keys[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[keys[-1]] = value


def hostile(rng: random.Random) -> Any:
    """A valid-looking setup with one to three hostile changes, or a hostile document outright."""
    roll = rng.random()
    if roll < 0.03:
        return _fresh(rng.choice(HOSTILE_VALUES))  # not even an object
    setup = valid_looking(rng)
    for _ in range(rng.randint(1, 3)):
        kind = rng.random()
        if kind < 0.5:
            _set(setup, rng.choice(SETUP_PATHS), rng.choice(HOSTILE_VALUES))
        elif kind < 0.7:  # a config.json with wrong-typed or absurd fields
            config = dict(presets()[rng.choice(sorted(presets()))].config)
            config[rng.choice(HF_FIELDS)] = _fresh(rng.choice(HOSTILE_VALUES + ARCHITECTURE_HOSTILE_SIZES))
            setup["model"] = {"hf_config": config}
        elif kind < 0.85:  # an explicit architecture with absurd sizes
            arch = _architecture(rng)
            arch[rng.choice(list(arch))] = _fresh(rng.choice(ARCHITECTURE_HOSTILE_SIZES + HOSTILE_VALUES[:20]))
            setup["model"] = {"architecture": arch}
        else:  # parallel degrees that do not divide the model
            _set(setup, "parallelism.num_gpus", 4096)
            name = rng.choice(["tensor", "pipeline", "context", "expert"])
            _set(setup, f"parallelism.{name}_parallel_size", rng.choice([3, 5, 64, 4096]))
    return setup


# --------------------------------------------------------------------------- running a case


class _Interrupted(Exception):
    pass


def _alarm(signum, frame):  # noqa: ANN001
    raise _Interrupted()


def _materialise(value: Any) -> Any:
    """The Python value of a case (Deep markers built), without recursion."""
    if isinstance(value, Deep):
        return value.build()
    if isinstance(value, dict):
        return {k: _materialise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_materialise(v) for v in value]
    return value


def _shown(case: Any) -> str:
    """The start of a case's JSON text, for a report line."""
    try:
        return _json_text(case)[:400]
    except (RecursionError, TypeError, ValueError):
        return repr(case)[:400]


def _json_text(value: Any) -> str:
    """The JSON text of a case as a hostile page or hand-edited link could send it: NaN and Infinity
    as literals, lone surrogates as escapes, Deep values written out directly."""
    markers: dict[str, str] = {}

    def encode(item: Any) -> Any:
        if isinstance(item, Deep):
            key = f"__deep_{len(markers)}__"
            markers[key] = item.text()
            return key
        if isinstance(item, dict):
            return {k: encode(v) for k, v in item.items()}
        if isinstance(item, list):
            return [encode(v) for v in item]
        return item

    text = json.dumps(encode(value))
    for key, deep in markers.items():
        text = text.replace(json.dumps(key), deep)
    return text


@dataclass
class Outcome:
    kind: str  # report | rejected | crash | hang
    seconds: float  # wall time
    detail: str = ""
    cpu_seconds: float = 0.0


def _check_report(report: trainmem.Report) -> Optional[str]:
    """None when the report is sound; otherwise what is wrong."""
    text = render_report(report)
    text.encode("utf-8")
    dumped = report.model_dump_json()
    if trainmem.Report.model_validate_json(dumped) != report:
        return "the JSON report does not round-trip"
    if report.breakdown.total != report.peak_total_bytes:
        return "breakdown total differs from the peak"
    if not report.peak_total_bytes >= report.peak_allocated_bytes > 0:
        return "peak total below peak allocated, or no memory at all"
    for rank in report.ranks:
        t = rank.timeline
        totals = [sum(c) for c in zip(t.parameters, t.gradients, t.optimizer_states, t.activations, t.overhead)]
        if max(totals) != totals[t.peak_index] or totals[t.peak_index] != rank.peak_allocated_bytes:
            return "the timeline's peak is not its maximum"
    return None


def _one_line(message: str) -> bool:
    return bool(message) and "\n" not in message and "\r" not in message and message.isprintable()


def run_api(case: Any, suggestions: bool) -> Outcome:
    start = time.perf_counter()
    try:
        report = trainmem.estimate(_materialise(case), suggestions=suggestions)
        problem = _check_report(report)
        kind, detail = ("crash", problem) if problem else ("report", "")
    except ValidationError as error:
        message = one_line(error)
        pairs = format_validation_error(error)
        ok = _one_line(message) and bool(pairs) and all(path and _one_line(text) for path, text in pairs)
        kind, detail = ("rejected", message) if ok else ("crash", f"rejection not one line naming a field: {message!r}")
    except _Interrupted:
        kind, detail = "hang", "interrupted"
    except Exception as error:  # noqa: BLE001 - the point of the fuzz
        kind, detail = "crash", f"{type(error).__name__}: {error}"[:500]
    return Outcome(kind, time.perf_counter() - start, detail)


def run_bridge(case: Any, suggestions: bool) -> Outcome:
    start = time.perf_counter()
    try:
        try:
            text = _json_text(case)
        except (ValueError, TypeError):
            text = repr(case)  # not JSON-encodable: the bridge gets the junk text
        answer = json.loads(trainmem_web.compute(text, suggestions))
        if answer.get("ok") is True:
            kind, detail = "report", ""
        elif (
            answer.get("ok") is False
            and answer["errors"]
            and all(_one_line(e["message"]) and isinstance(e["path"], str) for e in answer["errors"])
        ):
            messages = "; ".join(f"{e['path'] or 'setup'}: {e['message']}" for e in answer["errors"])
            kind, detail = ("crash", messages) if "internal error" in messages else ("rejected", messages)
        else:
            kind, detail = "crash", f"unexpected answer {str(answer)[:300]}"
    except _Interrupted:
        kind, detail = "hang", "interrupted"
    except Exception as error:  # noqa: BLE001
        kind, detail = "crash", f"{type(error).__name__}: {error}"[:500]
    return Outcome(kind, time.perf_counter() - start, detail)


@dataclass
class Figures:
    cases: int = 0
    valid_looking: int = 0
    hostile: int = 0
    outcomes: Counter = field(default_factory=Counter)
    slowest_seconds: float = 0.0
    slowest_cpu_seconds: float = 0.0
    slowest_case: str = ""
    failures: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


def fuzz(cases: int, seed: int, bound_seconds: float, interrupt_seconds: float, suggestions_every: int) -> Figures:
    rng = random.Random(seed)
    figures = Figures()
    previous = signal.signal(signal.SIGALRM, _alarm) if hasattr(signal, "SIGALRM") else None
    started = time.perf_counter()
    try:
        for index in range(cases):
            is_hostile = index % 2 == 1
            case = hostile(rng) if is_hostile else valid_looking(rng)
            figures.cases += 1
            figures.hostile += is_hostile
            figures.valid_looking += not is_hostile
            suggestions = suggestions_every > 0 and index % suggestions_every == 0
            for shell, runner in (("api", run_api), ("bridge", run_bridge)):
                if previous is not None:
                    signal.setitimer(signal.ITIMER_REAL, interrupt_seconds)
                cpu_start = time.process_time()
                try:
                    outcome = runner(case, suggestions)
                finally:
                    if previous is not None:
                        signal.setitimer(signal.ITIMER_REAL, 0)
                outcome.cpu_seconds = time.process_time() - cpu_start
                if outcome.kind != "hang" and outcome.cpu_seconds > bound_seconds:
                    outcome = Outcome("hang", outcome.seconds, f"took {outcome.cpu_seconds:.2f} s of CPU time")
                figures.outcomes[(shell, "hostile" if is_hostile else "valid", outcome.kind)] += 1
                figures.slowest_seconds = max(figures.slowest_seconds, outcome.seconds)
                if outcome.cpu_seconds > figures.slowest_cpu_seconds:
                    figures.slowest_cpu_seconds = outcome.cpu_seconds
                    figures.slowest_case = f"#{index} {shell}: {_shown(case)[:300]}"
                if outcome.kind in ("crash", "hang") and len(figures.failures) < 50:
                    figures.failures.append(
                        {
                            "index": index,
                            "shell": shell,
                            "kind": outcome.kind,
                            "detail": outcome.detail,
                            "case": _shown(case),
                        }
                    )
    finally:
        if previous is not None:
            signal.signal(signal.SIGALRM, previous)
    figures.seconds = time.perf_counter() - started
    return figures


def count(figures: Figures, kind: str, shell: Optional[str] = None, group: Optional[str] = None) -> int:
    return sum(
        n
        for (s, g, k), n in figures.outcomes.items()
        if k == kind and (shell is None or s == shell) and (group is None or g == group)
    )


def summary(figures: Figures) -> dict[str, Any]:
    table = {
        shell: {
            group: {kind: count(figures, kind, shell, group) for kind in ("report", "rejected", "crash", "hang")}
            for group in ("valid", "hostile")
        }
        for shell in ("api", "bridge")
    }
    return {
        "cases": figures.cases,
        "valid_looking": figures.valid_looking,
        "hostile": figures.hostile,
        "crashes": count(figures, "crash"),
        "hangs": count(figures, "hang"),
        "slowest_case_seconds": round(figures.slowest_seconds, 3),
        "slowest_case_cpu_seconds": round(figures.slowest_cpu_seconds, 3),
        "slowest_case": figures.slowest_case,
        "total_seconds": round(figures.seconds, 1),
        "outcomes": table,
        "failures": figures.failures,
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=DEFAULT_CASES)
    parser.add_argument("--full", action="store_true", help=f"{FULL_CASES:,} cases")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bound-seconds", type=float, default=1.0, help="a case using more CPU time is a hang")
    parser.add_argument("--interrupt-seconds", type=float, default=10.0, help="a case is stopped after this wall time")
    parser.add_argument(
        "--suggestions-every", type=int, default=10, help="every Nth case also computes suggestions (0: never)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    cases = FULL_CASES if args.full else args.cases
    figures = fuzz(cases, args.seed, args.bound_seconds, args.interrupt_seconds, args.suggestions_every)
    result = summary(figures)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{result['cases']:,} cases ({result['valid_looking']:,} valid-looking, {result['hostile']:,} hostile), "
            f"each through the API and the page bridge, in {result['total_seconds']:.0f} s"
        )
        for shell, groups in result["outcomes"].items():
            for group, kinds in groups.items():
                print(f"  {shell:<6} {group:<7} " + "  ".join(f"{k} {v:>6,}" for k, v in kinds.items()))
        print(
            f"crashes {result['crashes']}, hangs over {args.bound_seconds:g} s {result['hangs']}, slowest case "
            f"{result['slowest_case_cpu_seconds']:.3f} s CPU ({result['slowest_case_seconds']:.3f} s wall)"
        )
        for failure in result["failures"][:10]:
            print(
                f"  #{failure['index']} {failure['shell']} {failure['kind']}: {failure['detail']}\n    {failure['case']}"
            )
    return 1 if result["crashes"] or result["hangs"] else 0


if __name__ == "__main__":
    raise SystemExit(main())

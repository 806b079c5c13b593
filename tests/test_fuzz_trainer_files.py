"""The fuzz of the trainer-file readers (benchmarks/fuzz_trainer_files.py): every real file of
tests/data/trainer_files with one key given a value of another type or removed, and text mutations (alias bombs,
deep nesting, repeated keys, Python tags, non-finite literals, odd quoting of hydra overrides). Through the files'
path of ``trainmem estimate FILE`` and the page's bridge, each case is read or refused in one line, never another
exception. The default suite runs a seeded sample; ``-m slow`` every case (about 75,000).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "fuzz_trainer_files.py"


def _fuzz_module():
    spec = importlib.util.spec_from_file_location("fuzz_trainer_files", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


fuzz = _fuzz_module()


def test_every_reader_kind_has_files_in_the_fuzz():
    names = {path.relative_to(fuzz.DATA).parts[0] for path in fuzz.files()}
    assert {"deepspeed", "accelerate", "axolotl", "trl", "llamafactory", "peft", "torchtune", "verl"} <= names


def test_a_seeded_sample_of_mutated_trainer_files_is_read_or_refused_in_one_line():
    result = fuzz.summary(fuzz.fuzz(fuzz.sample_cases(120, seed=0), estimate=False))
    assert result["crashes"] == []
    assert result["api"].get("refused", 0) > 0


def test_structural_mutations_of_each_kind_of_file():
    """The text mutations of one file of each format: alias bomb, nesting, tags, literals, quoting."""
    picked = {"axolotl/deepspeed_configs/zero2.json", "axolotl/lora-1b.yml", "verl/examples/grpo_trainer/run_qwen2-7b.sh"}
    cases = [case for path in fuzz.files() if path.relative_to(fuzz.DATA).as_posix() in picked
             for case in fuzz.text_cases(path)]
    assert len(cases) > 20
    result = fuzz.summary(fuzz.fuzz(cases, estimate=False))
    assert result["crashes"] == []


@pytest.mark.slow
def test_every_mutation_of_every_trainer_file():
    result = fuzz.summary(fuzz.fuzz(fuzz.all_cases()))
    assert result["crashes"] == []


def test_a_yaml_alias_bomb_is_refused_in_one_line_not_expanded():
    """Nine aliases of nine aliases, eight deep: 9⁹ values once expanded (the reader walked them for minutes)."""
    from trainmem import inputs
    from trainmem.files import MAX_DOCUMENT_VALUES, parse_yaml_text

    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
    )
    with pytest.raises(ValueError, match=f"more than {MAX_DOCUMENT_VALUES:,} values"):
        parse_yaml_text(bomb, "bomb.yaml")
    with pytest.raises(ValueError, match="values"):
        inputs.read_texts({"train.yaml": "base_model: x\n" + bomb})
    assert parse_yaml_text("a: &a [1, 2]\nb: *a\n", "ok.yaml") == {"a": [1, 2], "b": [1, 2]}

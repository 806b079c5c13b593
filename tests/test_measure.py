"""trainmem.measure on real PyTorch: the tracker, fake-vs-real agreement, reproducing the corpus.

Marked ``torch``: skipped when torch, transformers or peft are missing. Models here are
tiny (two layers, a 512-token vocabulary) so the whole module runs in well under a
minute on two cores; the billion-parameter shapes run on fake tensors.
"""

from __future__ import annotations

import json
from importlib.metadata import version

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from small_models import TINY_LLAMA  # noqa: E402

from trainmem.measure.cli import main as measure_main  # noqa: E402
from trainmem.measure.corpus import dump_measurement, load_corpus, measurement_differences  # noqa: E402
from trainmem.measure.events import ROLE_AUTOCAST_WEIGHT_COPY  # noqa: E402
from trainmem.measure.record import Measurement  # noqa: E402
from trainmem.measure.runner import measure  # noqa: E402
from trainmem.measure.tracker import StorageTracker  # noqa: E402

pytestmark = pytest.mark.torch

TINY_GPT2 = {"model_type": "gpt2", "vocab_size": 512, "n_positions": 128, "n_embd": 64, "n_layer": 2, "n_head": 4}


def tiny_setup(config: dict, **fields) -> dict:
    return {
        "model": {"hf_config": config},
        "micro_batch_size": 2,
        "sequence_length": 32,
        "runtime": {"device": "cpu"},
        **fields,
    }


# ---------------------------------------------------------------------- the tracker


def test_views_share_one_storage_and_frees_are_seen():
    tracker = StorageTracker()
    with tracker:
        base = torch.empty(1000)
        view = base.view(10, 100)
        part = base[:10]
        assert tracker.index_of(view) == tracker.index_of(part) == tracker.index_of(base)
        other = torch.empty(250, dtype=torch.float16)
        del base, view, part, other
    allocated = [event for event in tracker.events if event[0] == 0]
    freed = [event for event in tracker.events if event[0] == 1]
    assert [event[2] for event in allocated] == [4000, 500]
    assert sorted(event[2] for event in freed) == [500, 4000]


def test_a_resize_is_counted_at_the_new_size():
    tracker = StorageTracker()
    with tracker:
        tensor = torch.empty(0)
        tensor.resize_(256)
    assert tracker.storages[tracker.index_of(tensor)].nbytes == 1024


def test_autocast_copies_of_weights_are_tagged():
    linear = torch.nn.Linear(16, 16)
    tracker = StorageTracker(autocast_recipe=True)
    for parameter in linear.parameters():
        tracker.register(parameter, "parameter")
    tracker.mark("forward", "forward", 1)
    with tracker, torch.autocast("cpu", dtype=torch.bfloat16):
        linear(torch.randn(4, 16))
    copies = [info for info in tracker.storages if info.role == ROLE_AUTOCAST_WEIGHT_COPY]
    assert sorted(info.nbytes for info in copies) == [32, 512]


def test_fake_tensors_are_counted_without_memory():
    from torch._subclasses.fake_tensor import FakeTensorMode

    tracker = StorageTracker()
    with FakeTensorMode(), tracker:
        huge = torch.empty(4 * 1024**3, dtype=torch.bfloat16)  # 8 GiB, on paper
        huge.mul_(2)
    assert tracker.storages[0].nbytes == 8 * 1024**3


# ---------------------------------------------------------------------- fake and real agree

AGREEMENT_CASES = {
    "gpt2-fp32-adamw-sdpa": tiny_setup(TINY_GPT2, precision="fp32", attention="sdpa"),
    "gpt2-ampbf16-eager-ckpt": tiny_setup(
        TINY_GPT2, precision="amp-bf16", attention="eager", activation_checkpointing="full"
    ),
    "gpt2-bf16-lora-momentum": tiny_setup(
        TINY_GPT2,
        precision="bf16-pure",
        optimizer="sgd-momentum",
        finetuning={"method": "lora", "lora": {"r": 4, "target_modules": ["c_attn"]}},
    ),
    "llama-fp32-foreach-ga2": tiny_setup(
        TINY_LLAMA, optimizer={"name": "adamw", "implementation": "foreach"}, gradient_accumulation_steps=2
    ),
    "llama-ampbf16-lora-all-ckpt-adafactor": tiny_setup(
        TINY_LLAMA,
        precision="amp-bf16",
        optimizer="adafactor",
        activation_checkpointing="full",
        finetuning={"method": "lora", "lora": {"r": 4, "target_modules": "all-linear", "lora_dropout": 0.1}},
    ),
    "llama-bf16-fused-eager": tiny_setup(
        TINY_LLAMA, precision="bf16-pure", attention="eager", optimizer={"name": "adam", "implementation": "fused"}
    ),
    "llama-fp32-sgd-math": tiny_setup(TINY_LLAMA, optimizer="sgd", attention="sdpa-math"),
}


@pytest.mark.parametrize("name", sorted(AGREEMENT_CASES))
def test_fake_and_real_runs_agree_to_the_byte(name):
    real = measure(AGREEMENT_CASES[name], fake=False)
    fake = measure(AGREEMENT_CASES[name], fake=True)
    assert real.environment.fake is False and fake.environment.fake is True
    differences = [line for line in measurement_differences(real, fake) if not line.startswith("environment.fake")]
    assert differences == []
    assert real.untracked_input_bytes == 0
    assert real.start_bytes == real.end_bytes
    assert real.notes == []


def test_measuring_twice_gives_identical_numbers():
    setup = AGREEMENT_CASES["llama-ampbf16-lora-all-ckpt-adafactor"]
    assert measurement_differences(measure(setup), measure(setup)) == []


# ---------------------------------------------------------------------- what a measurement records


def test_the_recorded_setup_names_the_kernels_that_ran():
    gpt2 = measure(AGREEMENT_CASES["gpt2-fp32-adamw-sdpa"], fake=True)
    assert gpt2.kernels.attention == "sdpa-math"  # attention dropout 0.1: CPU SDPA falls back to math
    assert gpt2.setup.attention == "sdpa-math"
    assert gpt2.setup.optimizer.implementation == "for-loop"  # torch's CPU default, made explicit
    llama = measure(tiny_setup(TINY_LLAMA), fake=True)
    assert llama.kernels.attention == "sdpa"
    assert llama.kernels.attention_ops == ["aten._scaled_dot_product_flash_attention_for_cpu"]


def test_the_breakdown_at_the_peak_adds_up():
    result = measure(tiny_setup(TINY_LLAMA, precision="amp-bf16"), fake=True)
    assert result.breakdown.total == result.peak_allocated_bytes
    assert max(peak.bytes for peak in result.phase_peaks.values()) == result.peak_allocated_bytes
    assert result.parts["parameters/autocast_weight_copies"] > 0
    # AdamW keeps two fp32 moments per trainable parameter (plus a 4-byte step per tensor)
    tensors = 2 * 9 + 3  # per layer 2 norms + 7 projections; the final norm, embeddings and head
    assert result.breakdown.optimizer_states == 8 * result.num_trainable_parameters + 4 * tensors


def test_a_seven_billion_parameter_step_runs_on_fake_tensors():
    result = measure(
        {
            "model": "llama-2-7b",
            "micro_batch_size": 1,
            "sequence_length": 512,
            "precision": "bf16-pure",
            "optimizer": "sgd",
            "finetuning": {"method": "lora", "lora": {"r": 8}},
            "runtime": {"device": "cpu"},
        },
        fake=True,
    )
    assert result.num_parameters > 6.7e9
    assert result.breakdown.parameters >= 2 * 6.7e9


def test_setups_that_cannot_be_replayed_are_refused():
    with pytest.raises(ValueError, match="num_gpus"):
        measure({**tiny_setup(TINY_LLAMA), "parallelism": {"num_gpus": 2}}, fake=True)
    with pytest.raises(ValueError, match="precision"):
        measure(tiny_setup(TINY_LLAMA, precision="bf16-master-weights"), fake=True)


# ---------------------------------------------------------------------- the CLI


def test_cli_measures_a_setup_and_appends_it_to_a_file(tmp_path, capsys):
    output = tmp_path / "out.jsonl"
    setup = json.dumps(tiny_setup(TINY_GPT2))
    assert measure_main([setup, "--fake", "--json", "--id", "tiny", "--output", str(output)]) == 0
    printed = Measurement.model_validate_json(capsys.readouterr().out)
    assert printed.id == "tiny"
    assert load_corpus(output)[0] == printed


def test_cli_rechecks_a_corpus_case(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(dump_measurement(measure(tiny_setup(TINY_LLAMA), fake=True, case_id="tiny")) + "\n")
    assert measure_main(["--case", "tiny", "--corpus", str(corpus)]) == 0
    assert "reproduces the committed measurement exactly" in capsys.readouterr().out


# ---------------------------------------------------------------------- the committed corpus reproduces

RECHECKED_CASES = [
    "gpt2-12m-fp32-adamw-b1-s128",
    "llama-14m-fp32-adamw-b1-s128",
    "llama-14m-ampbf16-lora-attn-b2-s256",
    "llama2-7b-ampbf16-lora-attn-b1-s4096-fake",
]


@pytest.mark.parametrize("case_id", RECHECKED_CASES)
def test_re_measuring_a_corpus_case_reproduces_it_exactly(case_id):
    committed = {case.id: case for case in load_corpus()}[case_id]
    environment = committed.environment
    installed = {"torch": torch.__version__, "transformers": version("transformers"), "peft": version("peft")}
    recorded = {"torch": environment.torch, "transformers": environment.transformers, "peft": environment.peft}
    if installed != recorded:
        pytest.skip(f"corpus measured with {recorded}, installed {installed}")
    fresh = measure(
        committed.setup,
        fake=environment.fake,
        seed=environment.seed,
        warmup_steps=environment.warmup_steps,
        case_id=committed.id,
    )
    assert measurement_differences(committed, fresh) == []

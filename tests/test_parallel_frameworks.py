"""Framework rules of trainmem.parallel, each checked on its own (the measured checks are in
tests/test_validation_distributed.py)."""

from __future__ import annotations

import pytest
from small_models import LLAMA_7M as LLAMA

import trainmem
from trainmem.cli import main

LAYER_FP32_BYTES = 4 * (2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 688 + 2 * 256)
ROOT_FP32_BYTES = 4 * (2 * 8000 * 256 + 256)


def estimate(**parallelism):
    setup = {
        "model": {"hf_config": LLAMA},
        "micro_batch_size": 2,
        "sequence_length": 128,
        "precision": parallelism.pop("precision", "fp32"),
        "optimizer": {"name": "adamw", "implementation": "for-loop"},
        "parallelism": {"num_gpus": 2, **parallelism},
        "runtime": {"device": "cpu"},
    }
    return trainmem.estimate(setup, suggestions=False)


def part(report, name):
    return sum(p.bytes for p in report.parts if p.name == name)


def test_fsdp2_keeps_the_root_unit_unsharded_and_prefetches_the_last_layer():
    report = estimate(strategy="fsdp")
    assert report.peak.label == "loss backward"
    assert part(report, "FSDP root unit (unsharded)") == ROOT_FP32_BYTES
    assert part(report, "gathered weights") == LAYER_FP32_BYTES


def test_fsdp2_without_resharding_keeps_every_layer_until_its_backward():
    report = estimate(strategy="fsdp", fsdp_reshard_after_forward=False)
    assert part(report, "unsharded layers kept for backward") == 4 * LAYER_FP32_BYTES
    assert part(report, "gathered weights") == 0


def test_fsdp2_mixed_precision_gathers_in_bf16():
    report = estimate(strategy="fsdp", precision="bf16-mixed", fsdp_reduce_dtype="fp32")
    assert part(report, "FSDP root unit (unsharded)") == ROOT_FP32_BYTES // 2


def bucket_at_its_moment(report):
    timeline = report.timeline
    return timeline.overhead[timeline.labels.index("reduce bucket")]


@pytest.mark.parametrize("stage", [1, 2])
def test_zero_1_and_2_allocate_the_reduce_bucket_at_its_configured_size(stage):
    report = estimate(strategy="zero", zero_stage=stage)
    assert part(report, "ZeRO reduce bucket") == 500_000_000 * 4  # 2 GB for a 7M-parameter model
    smaller = estimate(strategy="zero", zero_stage=stage, zero_reduce_bucket_size=1_000_000)
    assert bucket_at_its_moment(smaller) == 4_000_000
    overlapped = estimate(strategy="zero", zero_stage=stage, zero_reduce_bucket_size=1_000_000, zero_overlap_comm=True)
    assert bucket_at_its_moment(overlapped) == 8_000_000
    assert report.timeline.overhead[report.timeline.phases.index("optimizer")] < 500_000_000 * 4  # freed by then


def test_zero_keeps_an_fp32_partition_of_an_fp32_model():
    report = estimate(strategy="zero", zero_stage=2)
    assert part(report, "master weights") == report.num_parameters * 4 // 2


def test_dtensor_tp_computes_the_loss_over_the_whole_vocabulary():
    dtensor = estimate(tensor_parallel_size=2, tensor_parallel_flavor="dtensor")
    megatron = estimate(tensor_parallel_size=2, tensor_parallel_flavor="megatron")
    logits_fp32 = 2 * 128 * 8000 * 4
    assert part(dtensor, "logits and loss temporaries") == 2 * logits_fp32
    assert part(megatron, "logits and loss temporaries") == logits_fp32


def _gradients_at_the_update(report) -> int:
    timeline = report.ranks[0].timeline
    return timeline.gradients[timeline.phases.index("optimizer")]


def test_dtensor_tp_embedding_gradient_is_the_whole_vocabulary_megatrons_the_rank_slice():
    """DTensor keeps the embedding's gradient Replicate (``_redistribute_backward`` turns the MaskPartial's
    backward into Replicate, and ``embedding_dense_backward`` runs all-replicate): vocab x hidden on every rank,
    measured (tp-dtensor-llama-7m-fp32-w2: 18,097,152 B of gradients at the update). Megatron's
    VocabParallelEmbedding makes the rank's slice."""
    dtensor = estimate(tensor_parallel_size=2, tensor_parallel_flavor="dtensor")
    megatron = estimate(tensor_parallel_size=2, tensor_parallel_flavor="megatron")
    weights = dtensor.ranks[0].timeline.parameters[0] - 256  # less the rotary buffers
    vocab_slice = 8000 // 2 * 256 * 4
    assert _gradients_at_the_update(dtensor) == weights + vocab_slice == 18_097_152
    assert _gradients_at_the_update(megatron) == weights


def test_dtensor_sequence_parallel_saves_the_gathered_block_inputs():
    """PrepareModuleInput all-gathers each sub-block's input and q/k/v, gate/up save it whole; Megatron saves the
    sequence shard and gathers it again in backward: one hidden state (b x s x h) more per sub-block than the shard."""
    dtensor = estimate(tensor_parallel_size=2, tensor_parallel_flavor="dtensor", sequence_parallel=True)
    megatron = estimate(tensor_parallel_size=2, tensor_parallel_flavor="megatron", sequence_parallel=True)
    hidden_state = 2 * 128 * 256 * 4
    per_layer_extra = 2 * hidden_state // 2  # two sub-blocks, each the whole input instead of half of it

    def one_layer(report) -> int:
        timeline = report.ranks[0].timeline
        return timeline.activations[timeline.labels.index("layer 2 forward")] - timeline.activations[
            timeline.labels.index("layer 1 forward")
        ]

    assert one_layer(dtensor) - one_layer(megatron) == per_layer_extra
    assert one_layer(dtensor) == 2_853_888  # measured, tp-dtensor-sp-llama-7m-fp32-w2


def test_host_ram_counts_the_model_load_per_rank_and_the_offloaded_states():
    setup = {
        "model": {"preset": "llama-2-13b"},
        "micro_batch_size": 1,
        "sequence_length": 2048,
        "parallelism": {"num_gpus": 8, "zero_stage": 3, "offload_optimizer": True, "host_ram_gib_per_node": 128},
    }
    every_rank = trainmem.estimate(setup, suggestions=False).host
    weights_bf16 = 13_015_864_320 * 2
    assert every_rank.ranks_per_node == 8
    assert {p.name: p.bytes for p in every_rank.load_parts}["model load"] == 8 * weights_bf16
    parts = {p.name: p.bytes for p in every_rank.steady_parts}
    offloaded = sum(nbytes for name, nbytes in parts.items() if name.startswith("offloaded "))
    assert offloaded >= 12 * 13_015_864_320  # master weights and Adam states, at least, for the node
    # ZeRO-3 offload keeps the bf16 gradient partition and its fp32 copy on the host too (stage3.py).
    assert parts["offloaded fp32 gradient partition"] == 8 * (13_015_864_320 // 8) * 4
    assert every_rank.fits is False and "does not fit" in every_rank.message
    sharded = trainmem.estimate(
        {**setup, "parallelism": {**setup["parallelism"], "model_load": "sharded"}}, suggestions=False
    ).host
    assert {p.name: p.bytes for p in sharded.load_parts}["model load"] == weights_bf16
    nvme = trainmem.estimate(
        {**setup, "parallelism": {**setup["parallelism"], "offload_device": "nvme"}}, suggestions=False
    ).host
    assert nvme.nvme_bytes == offloaded
    assert not any(p.name.startswith("offloaded ") for p in nvme.steady_parts)


def test_the_text_report_shows_host_ram_when_offloading(capsys):
    argv = ["estimate", "--preset", "llama-2-7b", "--gpus", "8", "--zero", "3", "--offload-optimizer"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Host RAM per node (8 ranks)" in out and "model load" in out


@pytest.mark.parametrize(("pipeline", "virtual"), [(4, 2), (8, 5), (4, 5)])  # v divides the L/p layers of a stage
def test_interleaved_first_stage_holds_korthikanti_factor_of_the_layers(pipeline, virtual):
    """Korthikanti et al. 2022, 4.2.3: the first stage of an interleaved schedule holds
    L × (1 + (p − 1)/(p·v)) layers' activations (L without interleaving)."""
    base = {
        "model": {"preset": "llama-2-13b"},
        "micro_batch_size": 1,
        "sequence_length": 2048,
        "gradient_accumulation_steps": 16,
        "parallelism": {"num_gpus": pipeline, "pipeline_parallel_size": pipeline},
    }
    plain = trainmem.estimate(base, suggestions=False)
    interleaved = trainmem.estimate(
        {**base, "parallelism": {**base["parallelism"], "pipeline_virtual_stages": virtual}}, suggestions=False
    )
    own = 40 // pipeline
    per_layer = part(plain.ranks[0], "earlier micro-batches in flight") / ((pipeline - 1) * own)
    held = part(interleaved.ranks[0], "earlier micro-batches in flight")
    assert (held + own * per_layer) / (40 * per_layer) == pytest.approx(1 + (pipeline - 1) / (pipeline * virtual))


def test_new_parallel_fields_refuse_what_they_cannot_mean():
    with pytest.raises(ValueError, match="pipeline_virtual_stages"):
        trainmem.estimate({"model": {"preset": "gpt2"}, "parallelism": {"pipeline_virtual_stages": 2}})
    with pytest.raises(ValueError, match="offload_device"):
        trainmem.estimate({"model": {"preset": "gpt2"}, "parallelism": {"num_gpus": 2, "offload_device": "nvme"}})
    with pytest.raises(ValueError, match="offload_optimizer"):
        trainmem.estimate(
            {"model": {"preset": "gpt2"}, "parallelism": {"num_gpus": 2, "strategy": "megatron", "offload_optimizer": True}}
        )


def test_megatron_distributed_optimizer_shards_only_main_params_and_states():
    report = trainmem.estimate(
        {"model": {"num_parameters": 10**9}, "precision": "bf16-mixed", "optimizer": "adam",
         "parallelism": {"num_gpus": 8, "strategy": "megatron"}},
        suggestions=False,
    )
    assert report.resolved.precision_recipe == "bf16-master-weights-fp32-grads"
    assert "ZeRO reduce bucket" not in {p.name for p in report.parts}


def test_fsdp1_shards_a_unit_as_one_flat_parameter():
    """FlatParamHandle.shard: the unit's tensors end to end, cut into equal chunks; a rank's view of a tensor is
    its part of the chunk. The 7M Llama's root unit (embedding, final norm, head) on 2 ranks: each rank holds one
    whole 8000 x 256 matrix and half the norm."""
    from trainmem.parallel.fsdp import flat_shard_views

    assert flat_shard_views([2_048_000, 256, 2_048_000], 2) == [[2_048_000, 128, 0], [0, 128, 2_048_000]]
    assert flat_shard_views([5, 5], 3) == [[4, 0], [1, 3], [0, 2]]  # chunks of ceil(10 / 3) = 4, the last padded


@pytest.mark.parametrize("shards", [1, 2, 3, 7, 64])
def test_fsdp1_representative_ranks_show_every_distinct_set_of_views(shards):
    """The optimizer's temporaries are taken over the representative ranks only (a 262,144-rank run would
    otherwise lay out every rank); between them they hold every combination of views that any rank holds."""
    from trainmem.parallel.fsdp import flat_shard_views, representative_ranks

    units = [[2_048_000, 256, 2_048_000], [65_536, 32_768, 32_768, 65_536, 176_128, 176_128, 176_128, 256, 256]]

    def combined(ranks):
        per_unit = [flat_shard_views(numels, shards, ranks) for numels in units]
        return {tuple(v for unit in per_unit for v in unit[i]) for i in range(len(ranks))}

    assert combined(representative_ranks(units, shards)) == combined(list(range(shards)))


# ---------------------------------------------------------------------------- PEFT LoRA under the frameworks

LORA = {"method": "lora", "lora": {"r": 16}}
ADAPTER_NUMEL_PER_LAYER = 16 * (256 + 256) + 16 * (256 + 128)  # q_proj and v_proj (peft's Llama default)


def estimate_lora(**parallelism):
    setup = {
        "model": {"hf_config": LLAMA},
        "micro_batch_size": 2,
        "sequence_length": 128,
        "precision": parallelism.pop("precision", "fp32"),
        "optimizer": {"name": "adamw", "implementation": parallelism.pop("implementation", "for-loop")},
        "parallelism": {"num_gpus": 2, **parallelism},
        "finetuning": LORA,
        "runtime": {"device": "cpu"},
    }
    return trainmem.estimate(setup, suggestions=False)


def test_fsdp1_lora_keeps_a_gradient_shard_of_every_layers_whole_flat_parameter():
    """FSDP1 use_orig_params: the frozen base and the adapters share a layer's FlatParameter, which gets a gradient of
    every element (measured: fsdp1-llama-7m-fp32-lora-w2, 5,918,720 B at the update, 4 layers × 1,479,680); FSDP2
    shards each parameter by itself, and only the adapters get gradients."""
    unit_numel = LAYER_FP32_BYTES // 4 + ADAPTER_NUMEL_PER_LAYER
    fsdp1 = estimate_lora(strategy="fsdp", fsdp_version=1)
    assert _gradients_at_the_update(fsdp1) == 4 * unit_numel * 4 // 2 == 5_918_720
    fsdp2 = estimate_lora(strategy="fsdp", fsdp_version=2)
    assert _gradients_at_the_update(fsdp2) == 4 * ADAPTER_NUMEL_PER_LAYER * 4 // 2


def test_fsdp1_lora_layers_save_what_a_full_fine_tune_saves():
    """The frozen weights are views of a FlatParameter that requires grad, so each layer saves a full fine-tune's
    activations plus the adapters' own r-wide intermediates (measured: 5,216,256 B per layer in forward, against
    5,183,488 for the full fine-tune and 3,725,312 under FSDP2)."""

    def per_layer(report):
        timeline = report.ranks[0].timeline
        return timeline.activations[timeline.labels.index("layer 1 forward")] - timeline.activations[
            timeline.labels.index("layer 0 forward")
        ]

    assert per_layer(estimate_lora(strategy="fsdp", fsdp_version=1)) == 5_216_256
    assert per_layer(estimate_lora(strategy="fsdp", fsdp_version=2)) == 3_725_312


def test_fsdp1_lora_optimizer_states_follow_the_rank_that_holds_the_adapters():
    """A layer's adapters sit in the first half of its FlatParameter (after q_proj and v_proj), so rank 0's chunk holds
    every adapter element and its AdamW states: 57,344 × 8 B and 16 step counters (measured on rank 0; rank 1 holds
    none and is 0.6% lighter)."""
    report = estimate_lora(strategy="fsdp", fsdp_version=1)
    assert part(report, "optimizer states") == 4 * ADAPTER_NUMEL_PER_LAYER * 8 + 16 * 4 == 458_816


def test_fsdp1_full_fine_tuning_keeps_its_gradient_shard():
    """The LoRA rule leaves full fine-tuning as measured (fsdp1-llama-7m-fp32-w2: the whole model's shard)."""
    assert _gradients_at_the_update(estimate(strategy="fsdp", fsdp_version=1)) == 13_996_544


@pytest.mark.parametrize("implementation", ["foreach", "fused"])
def test_dtensor_tp_without_sequence_parallel_refuses_foreach_and_fused_optimizers(implementation):
    """torch.optim groups the plain norms with the DTensor weights; DTensor's dispatcher refuses the mixed
    _foreach_/_fused_ lists on every device (measured on gloo: both raise)."""
    from pydantic import ValidationError

    from trainmem.errors import one_line

    def tp(**parallelism):
        setup = {
            "model": {"hf_config": LLAMA},
            "optimizer": {"name": "adamw", "implementation": implementation},
            "parallelism": {"num_gpus": 2, "tensor_parallel_size": 2, **parallelism},
        }
        return trainmem.estimate(setup, suggestions=False)

    with pytest.raises(ValidationError, match="DTensor") as raised:
        tp(tensor_parallel_flavor="dtensor")
    assert one_line(raised.value).startswith(f"optimizer.implementation: {implementation!r} cannot run")
    tp(tensor_parallel_flavor="dtensor", sequence_parallel=True)  # every parameter a DTensor: foreach runs
    tp(tensor_parallel_flavor="megatron")


def test_dtensor_tp_without_sequence_parallel_on_cuda_refuses_torchs_default_too():
    from pydantic import ValidationError

    setup = {"model": {"hf_config": LLAMA}, "parallelism": {"num_gpus": 2, "tensor_parallel_size": 2, "tensor_parallel_flavor": "dtensor"}}
    with pytest.raises(ValidationError, match="unset"):
        trainmem.estimate(setup, suggestions=False)
    setup["runtime"] = {"device": "cpu"}  # torch.optim's CPU default is the for-loop
    trainmem.estimate(setup, suggestions=False)


def test_the_cli_names_the_optimizer_field_for_dtensor_tp_with_foreach(tmp_path, capsys):
    setup = {
        "model": {"hf_config": LLAMA},
        "optimizer": {"name": "adamw", "implementation": "foreach"},
        "parallelism": {"num_gpus": 2, "tensor_parallel_size": 2, "tensor_parallel_flavor": "dtensor"},
    }
    path = tmp_path / "setup.json"
    path.write_text(__import__("json").dumps(setup), encoding="utf-8")
    assert main(["estimate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trainmem: error: optimizer.implementation: 'foreach' cannot run")


def test_fsdp2_outside_dtensor_tp_is_not_refused_a_foreach_optimizer():
    """fully_shard makes the norms DTensors too, so torch.optim's lists are not mixed."""
    setup = {
        "model": {"hf_config": LLAMA},
        "optimizer": {"name": "adamw", "implementation": "foreach"},
        "parallelism": {"num_gpus": 4, "strategy": "fsdp", "tensor_parallel_size": 2, "tensor_parallel_flavor": "dtensor"},
    }
    assert trainmem.estimate(setup, suggestions=False).peak_allocated_bytes > 0

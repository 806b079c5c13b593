"""Qwen3-Next (hybrid Gated DeltaNet + gated attention, MoE), Cohere and Falcon: config reading, layer kinds, PEFT and
bitsandbytes rules, and the Gated DeltaNet's saved tensors against a real forward (torch-marked)."""

from __future__ import annotations

import json

import pytest

from trainmem import estimate
from trainmem.errors import FieldError
from trainmem.inventory import build_inventory
from trainmem.lora_targets import resolve_lora_targets
from trainmem.models import architecture_from_hf_config, family_for
from trainmem.setup import LoRAConfig

SMALL = {
    "model_type": "qwen3_next", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 8,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48, "num_experts": 4, "num_experts_per_tok": 2,
    "pad_token_id": 0,
}


def test_default_layer_types_put_full_attention_on_every_fourth_layer():
    arch = architecture_from_hf_config({**SMALL, "num_hidden_layers": 8})
    kinds = arch.layer_kinds()
    assert [kind.indices for kind in kinds] == [(0, 1, 2, 4, 5, 6), (3, 7)]
    assert kinds[0].architecture.layer_linear_attention and not kinds[1].architecture.layer_linear_attention
    assert any("Gated DeltaNet" in note for note in arch.not_counted)


def test_layer_types_and_dense_layers_split_the_kinds():
    config = {**SMALL, "layer_types": ["full_attention", "linear_attention", "linear_attention", "full_attention"],
              "mlp_only_layers": [1]}
    kinds = architecture_from_hf_config(config).layer_kinds()
    signature = [(k.indices, k.architecture.layer_linear_attention, k.architecture.is_moe) for k in kinds]
    assert signature == [((0, 3), False, True), ((1,), True, False), ((2,), True, True)]


@pytest.mark.parametrize(
    ("update", "field"),
    [
        ({"layer_types": ["linear_attention"]}, "layer_types"),
        ({"layer_types": ["linear_attention", "mamba", "full_attention", "full_attention"]}, "layer_types"),
        ({"linear_num_value_heads": 3}, "linear_num_value_heads"),
        ({"linear_key_head_dim": "128"}, "linear_key_head_dim"),
    ],
)
def test_bad_fields_are_named(update, field):
    with pytest.raises(FieldError) as error:
        architecture_from_hf_config({**SMALL, **update})
    assert error.value.field == field


def test_lora_all_linear_adapts_the_delta_net_projections_router_and_experts():
    arch = architecture_from_hf_config(SMALL)
    inventory = build_inventory(arch)
    targets = resolve_lora_targets(LoRAConfig(r=8, target_modules="all-linear"), family_for(arch), inventory)
    adapted = {adapter.module for group in inventory.layer_groups for adapter in targets.adapters_of(group)}
    assert {"linear_attn.in_proj_qkvz", "linear_attn.in_proj_ba", "linear_attn.out_proj", "self_attn.q_proj"} <= adapted
    assert "mlp.gate" in adapted and any(module.startswith("mlp.experts") for module in adapted)
    assert "linear_attn.conv1d" not in adapted


def test_bitsandbytes_quantises_linear_layers_not_the_conv_or_the_experts():
    arch = architecture_from_hf_config(SMALL)
    family = family_for(arch)
    linear_group = build_inventory(arch).layer_groups[0]
    quantized = {t.name for t in linear_group.tensors if family.quantized_by_bitsandbytes(t)}
    assert "linear_attn.in_proj_qkvz.weight" in quantized and "linear_attn.out_proj.weight" in quantized
    assert not quantized & {"linear_attn.conv1d.weight", "linear_attn.A_log", "mlp.experts.gate_up_proj", "mlp.gate.weight"}


def test_preset_estimates_and_states_the_cpu_kernel_assumption():
    report = estimate({"model": {"preset": "qwen3-next-80b-a3b"}, "micro_batch_size": 1, "sequence_length": 1024,
                       "precision": "bf16-pure", "finetuning": {"method": "lora", "lora": {"target_modules": "all-linear"}}})
    assert report.peak_allocated_bytes > 0
    assert "Gated DeltaNet" in json.dumps(report.model_dump(mode="json"))


def test_tensor_parallel_delta_net_is_refused_in_one_line():
    """Refused when the setup is read (trainmem.setup check_divisibility), before any trace runs."""
    from pydantic import ValidationError

    from trainmem.errors import format_validation_error
    from trainmem.setup import Setup

    setup = {"model": {"hf_config": SMALL}, "micro_batch_size": 1, "sequence_length": 64,
             "parallelism": {"num_gpus": 2, "tensor_parallel_size": 2}}
    with pytest.raises(ValidationError) as error:
        Setup.model_validate(setup)
    [(path, message)] = format_validation_error(error.value)
    assert path == "parallelism.tensor_parallel_size" and "Gated DeltaNet" in message


# ---------------------------------------------------------------------------- against a real forward


def _saved_bytes_of_layer(config: dict, layer_index: int, batch: int, seq: int, dtype_name: str) -> int:
    """Unique storages autograd saves in one decoder layer's forward (parameters excluded)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    fields = dict(config)
    hf_config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields, use_cache=False)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_config, attn_implementation="sdpa")
    if dtype_name == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def unpack(tensor):
        """Counted when backward reads it: a tensor saved by a graph the forward already dropped (the
        delta rule's final state) is never read, and its memory may have been reused."""
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved.setdefault(storage.data_ptr(), storage.nbytes())
        return tensor

    layers = next(m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == hf_config.num_hidden_layers)
    layer = layers[layer_index]
    hooks = torch.autograd.graph.saved_tensors_hooks(lambda tensor: tensor, unpack)
    layer.register_forward_pre_hook(lambda *args: hooks.__enter__())
    layer.register_forward_hook(lambda *args: hooks.__exit__(None, None, None))
    ids = torch.randint(3, hf_config.vocab_size, (batch, seq))
    model(input_ids=ids, labels=ids).loss.backward()
    return sum(saved.values())


def _traced_saved_bytes(config: dict, kind: int, batch: int, seq: int, precision: str) -> int:
    from trainmem import simulate
    from trainmem.layers import Trainability, trace_layer
    from trainmem.plan import Plan
    from trainmem.setup import Setup

    setup = Setup.model_validate({"model": {"hf_config": config}, "micro_batch_size": batch, "sequence_length": seq,
                                  "precision": precision, "runtime": {"device": "cpu"}})
    plan = Plan(setup)
    group = plan.inventory.layer_groups[kind]
    trace = trace_layer(group.architecture, simulate._shape(plan, group.architecture),
                        simulate._kernels(plan, selective=False), Trainability(plan.module_trains, plan.has_adapter), True)
    return trace.saved_activation_bytes + trace.saved_weight_copy_bytes


@pytest.mark.torch
@pytest.mark.parametrize(("precision", "dtype_name", "seq"), [("fp32", "fp32", 160), ("bf16-pure", "bf16", 128)])
def test_delta_net_layer_saves_what_torch_saves(precision, dtype_name, seq):
    """The Gated DeltaNet layer (norm, mixer, MoE) on the tape against autograd's saved tensors: equal
    but for the 16-byte int32 offsets of ``_grouped_mm`` (a padded sequence in the fp32 case)."""
    measured = _saved_bytes_of_layer(SMALL, 0, 2, seq, dtype_name)
    traced = _traced_saved_bytes(SMALL, 0, 2, seq, precision)
    assert abs(traced - measured) <= 64 + 0.002 * measured


def test_internlm2_is_refused_in_one_line_saying_it_is_remote_code():
    with pytest.raises(FieldError) as error:
        architecture_from_hf_config({"model_type": "internlm2", "hidden_size": 4096})
    assert error.value.field == "model_type"
    assert "remote code" in str(error.value) and "\n" not in str(error.value)


OTHER_FAMILIES = {
    "cohere": {"model_type": "cohere", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 96,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "use_qk_norm": True},
    "falcon-multi-query": {"model_type": "falcon", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 2,
                           "num_attention_heads": 4, "multi_query": True, "parallel_attn": True},
    "falcon-new-architecture": {"model_type": "falcon", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "num_kv_heads": 2, "new_decoder_architecture": True},
}


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(OTHER_FAMILIES))
def test_cohere_and_falcon_layers_save_what_torch_saves(name):
    """Equal but for RoPE's cos and sin, which the tape counts once for all layers (external)."""
    config, seq = OTHER_FAMILIES[name], 64
    measured = _saved_bytes_of_layer(config, 0, 2, seq, "fp32")
    traced = _traced_saved_bytes(config, 0, 2, seq, "fp32")
    rotary_tables = 2 * seq * (64 // 4) * 4
    assert abs(traced + rotary_tables - measured) <= 64

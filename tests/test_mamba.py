"""The Mamba-2 mixer (trainmem/models/mamba2_mixer.py) and the state-space hybrids that use it.

* torch-marked: what transformers 5.24's CPU path of the mixer (``GraniteMoeHybridMambaLayer.forward``: the
  causal conv fallback, ``mamba2_chunk_scan``, the gated RMSNorm) saves for backward, storage by storage
  (``torch.autograd.graph.saved_tensors_hooks``), against the tape's replay, in fp32, pure bf16 and AMP,
  with the sequence a multiple of the chunk or padded to it, one or several B/C groups;
* config reading: Granite 4.0's ``layer_types`` and ``mamba_*`` fields, Nemotron-H's
  ``hybrid_override_pattern``; bad values are one FieldError naming the field;
* PEFT's refusal of LoRA on a Mamba model's ``out_proj`` / ``conv1d`` (nemotron_h) as one line;
* the CUDA path (mamba_ssm's fused kernel, assumed) saves less than the CPU path and the report says so.
"""

from __future__ import annotations

import pytest

import trainmem
from trainmem.errors import FieldError
from trainmem.layers import LayerKernels, LayerShape, Trainability
from trainmem.models import architecture_from_hf_config, family_for
from trainmem.setup import Setup
from trainmem.tape import Tape

HIDDEN = 64


def mixer_config(groups: int) -> dict:
    return dict(
        model_type="granitemoehybrid", vocab_size=128, hidden_size=HIDDEN, num_hidden_layers=1, num_attention_heads=4,
        layer_types=["mamba"], mamba_n_heads=4, mamba_d_head=32, mamba_d_state=16, mamba_n_groups=groups,
        mamba_chunk_size=32,
    )


def tape_saved_bytes(config: dict, recipe: str, batch: int, seq: int) -> int:
    """The tape's replay of one mixer: saved activations and weight casts, the fp32 input excluded."""
    kind = architecture_from_hf_config(config).layer_kinds()[0].architecture
    shape = LayerShape(batch=batch, seq=seq, kv_seq=seq, heads=4, kv_heads=4, head_dim=16, hidden=HIDDEN,
                       intermediate=kind.intermediate_size, stream_tokens=batch * seq)
    autocast = "bf16" if recipe == "amp" else None
    dtype = "bf16" if recipe == "bf16" else "fp32"
    kernels = LayerKernels(device="cpu", autocast=autocast, weight_dtype=dtype, stream_dtype=dtype, attention="fused")
    trainability = Trainability(trains=lambda module: True, has_adapter=lambda module: False)
    tape = Tape(device="cpu", autocast=autocast)
    x = tape.new(batch * seq * HIDDEN, dtype, True)
    family_for(kind).program()(kind, shape, kernels, trainability, tape).mamba2_mixer(x)
    saved = tape.saved_bytes(("activation", "weight_copy"))
    return saved - (x.nbytes if x.storage in tape.saved_storages else 0)


def torch_saved_bytes(config: dict, recipe: str, batch: int, seq: int) -> int:
    """What autograd keeps for one mixer's backward: unique storages, parameters and the input excluded."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.granitemoehybrid.modeling_granitemoehybrid import GraniteMoeHybridMambaLayer

    fields = dict(config)
    hf_config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    torch.manual_seed(0)
    layer = GraniteMoeHybridMambaLayer(hf_config, 0).train()
    dtype = torch.bfloat16 if recipe == "bf16" else torch.float32
    layer = layer.to(dtype)
    x = torch.randn(batch, seq, HIDDEN, dtype=dtype, requires_grad=True)
    saved: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        saved.setdefault(storage.data_ptr(), storage.nbytes())
        return tensor

    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=recipe == "amp")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), autocast:
        out = layer(x)
    excluded = {p.untyped_storage().data_ptr() for p in layer.parameters()} | {x.untyped_storage().data_ptr()}
    total = sum(nbytes for pointer, nbytes in saved.items() if pointer not in excluded)
    del out
    return total


@pytest.mark.torch
@pytest.mark.parametrize(
    "recipe, seq, groups",
    [("fp32", 64, 1), ("bf16", 64, 1), ("amp", 64, 1), ("fp32", 50, 2), ("amp", 50, 2), ("fp32", 100, 4)],
)
def test_mixer_saves_what_torch_saves(recipe, seq, groups):
    config = mixer_config(groups)
    assert tape_saved_bytes(config, recipe, 2, seq) == torch_saved_bytes(config, recipe, 2, seq)


# ---------------------------------------------------------------------------- config reading

GRANITE = {
    "model_type": "granitemoehybrid", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 32, "shared_intermediate_size": 48,
    "num_local_experts": 4, "num_experts_per_tok": 2, "mamba_n_heads": 8, "mamba_d_state": 16,
    "layer_types": ["mamba", "attention", "mamba", "mamba"],
}
NEMOTRON = {
    "model_type": "nemotron_h", "vocab_size": 512, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "intermediate_size": 96, "mamba_num_heads": 8, "mamba_head_dim": 16, "ssm_state_size": 16,
    "n_groups": 2, "chunk_size": 32, "hybrid_override_pattern": "M-M*-M",
}


def test_granite_layer_types_make_mamba_and_attention_kinds():
    arch = architecture_from_hf_config(GRANITE)
    assert arch.linear_attention_layers == (0, 2, 3)
    assert arch.mamba.head_dim == 16  # "auto": mamba_expand (2) * hidden_size / mamba_n_heads
    assert arch.mamba.conv_dim == 8 * 16 + 2 * 16
    assert [kind.indices for kind in arch.layer_kinds()] == [(0, 2, 3), (1,)]
    assert family_for(arch).rotary_tables_bytes(arch, 128, 4) == []  # position_embedding_type None: NoPE


def test_granite_dense_uses_the_shared_mlp_width():
    arch = architecture_from_hf_config({**GRANITE, "num_local_experts": 0})
    assert not arch.is_moe and arch.intermediate_size == 48


@pytest.mark.parametrize(
    "update, field",
    [
        ({"layer_types": ["mamba"] * 3}, "layer_types"),
        ({"layer_types": ["mamba", "attention", "conv", "mamba"]}, "layer_types"),
        ({"mamba_n_heads": 6}, "mamba_n_heads"),
        ({"mamba_n_groups": 3}, "mamba_n_groups"),
        ({"mamba_d_state": "128"}, "mamba_d_state"),
        ({"position_embedding_type": 1}, "position_embedding_type"),
    ],
)
def test_granite_bad_fields_are_named(update, field):
    with pytest.raises(FieldError) as error:
        architecture_from_hf_config({**GRANITE, **update})
    assert error.value.field.endswith(field)


def test_nemotron_pattern_makes_three_block_kinds():
    arch = architecture_from_hf_config(NEMOTRON)
    assert arch.num_hidden_layers == 6
    assert arch.linear_attention_layers == (0, 2, 5)
    assert arch.mlp_only_layers == (1, 4)
    kinds = {kind.indices: kind.architecture for kind in arch.layer_kinds()}
    assert kinds[(1, 4)].layer_mlp_only and kinds[(0, 2, 5)].layer_linear_attention
    assert not arch.tie_word_embeddings


@pytest.mark.parametrize(
    "update, field",
    [
        ({"hybrid_override_pattern": "M-E*"}, "hybrid_override_pattern"),
        ({"hybrid_override_pattern": "M-X"}, "hybrid_override_pattern"),
        ({"hybrid_override_pattern": 3}, "hybrid_override_pattern"),
        ({"n_groups": 3}, "n_groups"),
        ({"mamba_hidden_act": "gelu"}, "mamba_hidden_act"),
        ({"layers_block_type": ["linear_attention", "sparse"]}, "layers_block_type"),
    ],
)
def test_nemotron_bad_fields_are_named(update, field):
    with pytest.raises(FieldError) as error:
        architecture_from_hf_config({**NEMOTRON, **update})
    assert error.value.field.endswith(field)


def test_nemotron_all_linear_lora_is_refused_as_peft_does():
    setup = {"model": {"hf_config": NEMOTRON}, "finetuning": {"method": "lora", "lora": {"target_modules": "all-linear"}}}
    with pytest.raises(ValueError, match="PEFT refuses LoRA on out_proj"):
        Setup.model_validate(setup)
    setup["finetuning"]["lora"]["target_modules"] = ["in_proj", "q_proj", "v_proj", "up_proj"]
    Setup.model_validate(setup)


# ---------------------------------------------------------------------------- the CUDA assumption


def test_cuda_assumes_the_fused_kernel_and_says_so():
    base = {"model": {"hf_config": {**GRANITE, "hidden_size": 256, "mamba_d_state": 64}}, "micro_batch_size": 2,
            "sequence_length": 512, "precision": "bf16-pure"}
    cpu = trainmem.estimate({**base, "runtime": {"device": "cpu"}})
    cuda = trainmem.estimate({**base, "runtime": {"device": "cuda"}})
    assert cuda.peak_allocated_bytes < cpu.peak_allocated_bytes
    assert any("mamba_ssm" in warning and "not measured" in warning for warning in cuda.warnings)


def test_the_inference_cache_of_mamba_layers_is_refused_not_miscounted():
    from trainmem.inference.kv_cache import layer_cache_shapes

    for config in (GRANITE, NEMOTRON):
        with pytest.raises(FieldError, match="not modelled yet"):
            layer_cache_shapes(architecture_from_hf_config(config))


def test_a_split_mamba_mixer_is_refused_when_the_setup_is_read():
    """Tensor and sequence parallelism of the Mamba-2 layers: one line naming the field, at validation."""
    from pydantic import ValidationError

    from trainmem.errors import format_validation_error
    from trainmem.setup import Setup

    base = {"model": {"preset": "nemotron-h-8b"}, "micro_batch_size": 1, "sequence_length": 64}
    for parallelism, field in (
        ({"num_gpus": 2, "strategy": "fsdp", "tensor_parallel_size": 2}, "parallelism.tensor_parallel_size"),
    ):
        with pytest.raises(ValidationError) as error:
            Setup.model_validate({**base, "parallelism": parallelism})
        [(path, message)] = format_validation_error(error.value)
        assert path == field and "Mamba-2" in message and "\n" not in message

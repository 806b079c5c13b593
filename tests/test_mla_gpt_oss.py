"""DeepSeek-V2/V3 (multi-head latent attention), Kimi-K2 configs and gpt-oss: reading, bad input, layer programs.

Counts against transformers and PEFT are in tests/test_families.py (FAMILY_CONFIGS); the measured
steps are corpus cases (scripts/corpus_cases.py: deepseek*, gptoss*).
"""

from __future__ import annotations

import pytest

import trainmem
from trainmem.errors import FieldError
from trainmem.inventory import build_inventory
from trainmem.models import architecture_from_hf_config, supported_model_types

DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "vocab_size": 1024, "hidden_size": 128, "intermediate_size": 256,
    "moe_intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "n_routed_experts": 8,
    "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2, "n_shared_experts": 1, "first_k_dense_replace": 1,
    "q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
}
GPT_OSS = {
    "model_type": "gpt_oss", "vocab_size": 1024, "hidden_size": 128, "intermediate_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "num_local_experts": 4,
    "num_experts_per_tok": 2,
}


def _setup(config: dict, **extra) -> dict:
    return {"model": {"hf_config": config}, "micro_batch_size": 2, "sequence_length": 64, "runtime": {"device": "cpu"}, **extra}


def test_deepseek_v3_reads_mla_dense_first_layers_and_shared_experts():
    arch = architecture_from_hf_config(DEEPSEEK_V3)
    assert arch.is_mla and arch.qk_head_dim == 24 and arch.head_dim == 8  # head_dim = qk_rope_head_dim
    assert arch.dense_layers == (0,) and arch.shared_expert_intermediate_size == 64
    assert arch.router_scoring == "sigmoid" and arch.rope_layout == "interleaved"
    assert any("multi-token-prediction" in note for note in arch.not_counted)  # DeepseekV3Config: num_mtp_layers 1
    names = {t.name for group in build_inventory(arch).layer_groups for t in group.tensors}
    assert {"self_attn.q_a_proj.weight", "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_b_proj.weight",
            "mlp.shared_experts.gate_proj.weight", "mlp.gate.weight", "mlp.experts.gate_up_proj"} <= names


def test_deepseek_without_q_lora_rank_has_a_plain_q_proj():
    arch = architecture_from_hf_config({**DEEPSEEK_V3, "q_lora_rank": None, "num_nextn_predict_layers": 0})
    names = {t.name for group in build_inventory(arch).layer_groups for t in group.tensors}
    assert "self_attn.q_proj.weight" in names and "self_attn.q_a_proj.weight" not in names
    assert arch.not_counted == ()


def test_kimi_k2_is_read_as_deepseek_v3():
    arch = architecture_from_hf_config({**DEEPSEEK_V3, "model_type": "kimi_k2"})
    assert arch.model_type == "deepseek_v3"
    assert "kimi_k2" in supported_model_types()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"kv_lora_rank": 256}, "kv_lora_rank"),
        ({"num_experts_per_tok": 9}, "num_experts_per_tok"),
        ({"n_group": 3}, "n_group"),
        ({"topk_group": 5}, "topk_group"),
        ({"qk_rope_head_dim": 7}, "qk_rope_head_dim"),
        ({"v_head_dim": "16"}, "v_head_dim"),
    ],
)
def test_impossible_deepseek_values_name_their_field(change, field):
    with pytest.raises(FieldError) as error:
        architecture_from_hf_config({**DEEPSEEK_V3, **change})
    assert error.value.field == field


def test_gpt_oss_reads_sinks_biases_and_experts():
    arch = architecture_from_hf_config(GPT_OSS)
    assert arch.attention_sinks and arch.attention_qkv_bias and arch.expert_bias and arch.router_bias
    names = {t.name for group in build_inventory(arch).layer_groups for t in group.tensors}
    assert {"self_attn.sinks", "mlp.router.bias", "mlp.experts.gate_up_proj_bias", "mlp.experts.down_proj_bias"} <= names
    assert any("MXFP4" in note for note in arch.not_counted)


def test_gpt_oss_experts_per_token_alias_and_bad_value():
    config = {k: v for k, v in GPT_OSS.items() if k != "num_experts_per_tok"}
    assert architecture_from_hf_config({**config, "experts_per_token": 3}).num_experts_per_tok == 3
    with pytest.raises(FieldError) as error:
        architecture_from_hf_config({**GPT_OSS, "num_experts_per_tok": 5})
    assert error.value.field == "num_experts_per_tok"


def test_gpt_oss_sdpa_on_cpu_is_refused_in_one_line():
    from pydantic import ValidationError

    from trainmem.errors import format_validation_error

    with pytest.raises(ValidationError) as error:
        trainmem.estimate(_setup(GPT_OSS, attention="sdpa"), suggestions=False)
    problems = dict(format_validation_error(error.value))
    assert "eager" in problems["attention"]


@pytest.mark.parametrize("precision", ["fp32", "amp-bf16", "bf16-pure"])
@pytest.mark.parametrize("attention", ["sdpa", "eager", "sdpa-math"])
def test_deepseek_estimates_run_for_every_kernel(precision, attention):
    for config in (DEEPSEEK_V3, {**DEEPSEEK_V3, "model_type": "deepseek_v2", "q_lora_rank": None}):
        report = trainmem.estimate(_setup(config, precision=precision, attention=attention), suggestions=False)
        assert report.peak_allocated_bytes > 0


def test_deepseek_cuda_fused_attention_saves_no_score_matrix():
    """On CUDA the fused kernel keeps no s×s tensor: a longer sequence grows the activations linearly."""
    def peak(seq: int) -> int:
        setup = {**_setup(DEEPSEEK_V3, precision="amp-bf16"), "sequence_length": seq, "runtime": {"device": "cuda"}}
        return trainmem.estimate(setup, suggestions=False).peak_allocated_bytes

    fused_growth = peak(2048) - peak(1024)
    eager_setup = lambda seq: {**_setup(DEEPSEEK_V3, precision="amp-bf16", attention="eager"), "sequence_length": seq,
                               "runtime": {"device": "cuda"}}
    eager_growth = (trainmem.estimate(eager_setup(2048), suggestions=False).peak_allocated_bytes
                    - trainmem.estimate(eager_setup(1024), suggestions=False).peak_allocated_bytes)
    assert 0 < fused_growth < eager_growth


def test_gpt_oss_eager_estimate_and_lora_all_linear_adapts_attention_only():
    report = trainmem.estimate(
        _setup(GPT_OSS, attention="eager", finetuning={"method": "lora", "lora": {"r": 8, "target_modules": "all-linear"}}),
        suggestions=False,
    )
    h, q, kv, r, layers = 128, 4 * 32, 2 * 32, 8, 2
    per_layer = r * ((h + q) + 2 * (h + kv) + (q + h))
    assert report.num_trainable_parameters == per_layer * layers


KIMI_K2 = {  # moonshotai/Kimi-K2-Instruct config.json (remote code: model_type kimi_k2), shape fields
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "vocab_size": 163840, "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 64,
    "num_key_value_heads": 64, "n_shared_experts": 1, "n_routed_experts": 384, "routed_scaling_factor": 2.827,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
    "topk_method": "noaux_tc", "n_group": 1, "topk_group": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
    "norm_topk_prob": True, "scoring_func": "sigmoid", "num_nextn_predict_layers": 0, "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
}
KIMI_K2_PARAMETERS = 1_026_408_209_408
"""DeepseekV3ForCausalLM built from these fields on the meta device (transformers 5.24); the card says 1T."""


def test_kimi_k2_counts_as_transformers_builds_it():
    assert build_inventory(architecture_from_hf_config(KIMI_K2)).num_parameters == KIMI_K2_PARAMETERS


@pytest.mark.torch
def test_kimi_k2_count_on_the_meta_device():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    fields = {k: v for k, v in KIMI_K2.items() if k not in ("architectures", "model_type")}
    config = transformers.AutoConfig.for_model("deepseek_v3", **fields)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert sum(p.numel() for p in model.parameters()) == KIMI_K2_PARAMETERS


def test_gpt_oss_names_the_attention_it_cannot_run():
    from trainmem.models import FAMILIES

    family = FAMILIES["gpt_oss"]
    assert family.unsupported_attention("sdpa", "cpu") and family.unsupported_attention("sdpa-math", "cpu")
    assert family.unsupported_attention("eager", "cpu") is None
    assert family.unsupported_attention("sdpa", "cuda") is None  # a flash kernel with s_aux
    assert family.unsupported_attention("sdpa-math", "cuda")
    assert FAMILIES["deepseek_v3"].unsupported_attention("sdpa", "cpu") is None


def test_gpt_oss_fp32_sdpa_on_cuda_is_refused_in_one_line():
    """The sinks' flash kernel takes bf16/fp16 only: fp32 compute on CUDA is a Setup error naming
    attention (it used to escape from the simulation, found by the fuzz)."""
    from pydantic import ValidationError

    from trainmem.errors import format_validation_error

    setup = {**_setup(GPT_OSS, attention="sdpa", precision="fp32"), "runtime": {"device": "cuda"}}
    with pytest.raises(ValidationError) as error:
        trainmem.estimate(setup, suggestions=False)
    problems = dict(format_validation_error(error.value))
    assert "bf16/fp16" in problems["attention"]
    bf16 = {**_setup(GPT_OSS, attention="sdpa", precision="amp-bf16"), "runtime": {"device": "cuda"}}
    assert trainmem.estimate(bf16, suggestions=True).peak_allocated_bytes > 0

"""vLLM's start-up arithmetic (trainmem.inference.vllm) against figures vLLM printed for named models and GPUs.

Each case cites the public log it comes from. vLLM prints GiB with two decimals, so a budget read from a
log is known to ±0.005 GiB; block and token counts that follow from it are compared exactly where the log
gives the budget, and within that rounding where it gives only the result.
"""

import math

import pytest

from trainmem.errors import FieldError
from trainmem.inference.kv_cache import kv_cache_bytes
from trainmem.inference.vllm import (
    kv_cache_layout,
    requested_bytes,
    vllm_colocated_bytes,
    vllm_memory,
    vllm_sleep_host_bytes,
)
from trainmem.models import architecture_from_hf_config
from trainmem.catalogs import presets

GIB = 1 << 30

QWEN3_14B = {  # Qwen/Qwen3-14B config.json
    "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 5120, "intermediate_size": 17408,
    "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
    "max_position_embeddings": 40960, "tie_word_embeddings": False,
}


def preset_arch(name):
    return architecture_from_hf_config(presets()[name].config)


def test_qwen3_14b_blocks_tokens_and_concurrency_from_the_available_memory():
    """LMCache/LMCache#1739 (vLLM V1 log, Qwen3-14B on one GPU): "Available KV cache memory: 6.51 GiB",
    "GPU KV cache size: 42,656 tokens", "Maximum concurrency for 32,768 tokens per request: 1.30x"."""
    arch = architecture_from_hf_config(QWEN3_14B)
    result = vllm_memory(
        arch, "bf16", 80 * GIB, 0.9, max_model_len=32768, available_kv_cache_bytes=int(6.51 * GIB),
        weights_bytes=1, activation_peak_bytes=1,
    )
    assert result.kv_cache_tokens == 42_656
    assert round(result.max_concurrency, 2) == 1.30
    assert result.num_gpu_blocks == 2666


def test_llama_3_1_8b_on_an_rtx_3090_budget_blocks_and_concurrency():
    """vllm-project/vllm#10517 (Llama-3.1-8B-Instruct, RTX 3090, gpu_memory_utilization 0.90):
    total_gpu_memory=23.58GiB, peak_torch_memory=17.06GiB (weights included), non_torch_memory=0.35GiB,
    kv_cache_size=3.81GiB, "# GPU blocks: 1952", "Maximum concurrency for 20000 tokens per request: 1.56x";
    with max_model_len 29000: peak 17.98 GiB, "# GPU blocks: 1478", 23648 tokens, 0.82x."""
    arch = preset_arch("llama-3.1-8b")
    total = int(23.58 * GIB)
    for max_len, peak_gib, blocks, concurrency in ((20000, 17.06, 1952, 1.56), (29000, 17.98, 1478, 0.82)):
        available = requested_bytes(total, 0.90) - int(peak_gib * GIB) - int(0.35 * GIB)
        result = vllm_memory(arch, "bf16", total, 0.90, max_model_len=max_len, available_kv_cache_bytes=available,
                             weights_bytes=1, activation_peak_bytes=1)
        # the log's GiB figures carry ±0.005 GiB each: a few blocks of 2 MiB
        assert abs(result.num_gpu_blocks - blocks) <= 8, (max_len, result.num_gpu_blocks)
        exact = vllm_memory(arch, "bf16", total, 0.90, max_model_len=max_len,
                            available_kv_cache_bytes=blocks * 2 * 1024 * 1024, weights_bytes=1, activation_peak_bytes=1)
        assert exact.num_gpu_blocks == blocks
        assert round(exact.max_concurrency, 2) == concurrency
    assert exact.kv_cache_tokens == 23648


def test_deepseek_v2_lite_mla_cache_for_one_full_request():
    """vllm-project/vllm#15871 (DeepSeek-V2-Lite-Chat, vLLM V1 0.8.3): "To serve at least one request with the
    models's max seq len (32768), (0.95 GiB KV cache is needed": MLA caches kv_lora_rank + qk_rope_head_dim
    = 576 values per token and layer, one "head"."""
    arch = preset_arch("deepseek-v2-lite")
    layout = kv_cache_layout(arch, 2, 16)
    assert layout.page_bytes_per_layer == 16 * 576 * 2
    needed = math.ceil(32768 / 16) * layout.page_bytes_per_layer * arch.num_hidden_layers
    assert round(needed / GIB, 2) == 0.95
    # transformers 5.24 caches the same latent: the two agree per token
    assert kv_cache_bytes(arch, 1, 32768, 2) == needed


def test_requested_share_is_a_fraction_of_total_memory():
    assert requested_bytes(80 * GIB, 0.3) == int(80 * GIB * 0.3)
    assert vllm_colocated_bytes(80 * GIB, 0.3, 0) == int(80 * GIB * 0.3)
    assert vllm_colocated_bytes(80 * GIB, 0.3, 1) == 0
    assert vllm_colocated_bytes(80 * GIB, 0.3, 2, kept_while_asleep_bytes=512 << 20) == 512 << 20
    assert vllm_sleep_host_bytes(16 * GIB, 1) == 16 * GIB
    assert vllm_sleep_host_bytes(16 * GIB, 2) == 0


def test_full_model_parts_add_up_and_kv_is_the_remainder():
    arch = preset_arch("llama-3.1-8b")
    result = vllm_memory(arch, "bf16", 80 * GIB, 0.9, max_model_len=8192, max_num_seqs=256)
    inside = result.requested_bytes - sum(v for k, v in result.parts.items() if k not in ("KV cache", "CUDA graphs"))
    assert 0 <= inside - result.parts["KV cache"] < 32 * 2 * 1024 * 1024  # less than one block of all layers
    assert result.kv_cache_tokens == result.num_gpu_blocks * 16
    assert result.assumptions


def test_hybrid_sliding_model_groups_layers():
    """Gemma 3 (5 sliding : 1 full): groups of min(layers per type) layers share the pools."""
    arch = preset_arch("gemma-3-27b")
    layout = kv_cache_layout(arch, 2, 16)
    sliding = len(arch.window_layers())
    full = arch.num_hidden_layers - sliding
    assert layout.group_size == min(sliding, full)
    result = vllm_memory(arch, "bf16", 80 * GIB, 0.9, max_model_len=32768, available_kv_cache_bytes=20 * GIB,
                         weights_bytes=1, activation_peak_bytes=1)
    # sliding layers need only their window: concurrency is far above what full attention everywhere allows
    full_everywhere = 20 * GIB / (math.ceil(32768 / 16) * layout.page_bytes_per_layer * arch.num_hidden_layers)
    assert result.max_concurrency > 2 * full_everywhere


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"gpu_memory_utilization": 0}, "gpu_memory_utilization"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"max_model_len": 10**9}, "max_model_len"),
        ({"block_size": 0}, "block_size"),
        ({"dtype": "int3"}, "dtype"),
        ({"gpu_memory_utilization": 0.01}, "gpu_memory_utilization"),
    ],
)
def test_bad_input_names_the_field(kwargs, field):
    arguments = {"arch": preset_arch("llama-3.1-8b"), "dtype": "bf16", "gpu_memory_bytes": 80 * GIB, **kwargs}
    with pytest.raises(FieldError) as error:
        vllm_memory(**arguments)
    assert error.value.field == field


def test_bad_sleep_level():
    with pytest.raises(FieldError) as error:
        vllm_colocated_bytes(80 * GIB, 0.3, 3)
    assert error.value.field == "sleep_level"

"""The KV cache per layer (trainmem.inference.kv_cache): closed forms, and byte-exact agreement with the
storages of transformers' ``DynamicCache`` for every attention variant the families have."""

import pytest

from trainmem.catalogs import presets
from trainmem.errors import FieldError
from trainmem.inference.kv_cache import cache_architecture, kv_cache_bytes, kv_cache_bytes_by_layer, layer_cache_shapes
from trainmem.models import architecture_from_hf_config


def preset_arch(name):
    return architecture_from_hf_config(presets()[name].config)


def test_llama_3_1_8b_grouped_query_closed_form():
    """32 layers x 2 (K, V) x 8 KV heads x 128 dims x 2 bytes = 128 KiB per token."""
    arch = preset_arch("llama-3.1-8b")
    assert kv_cache_bytes(arch, 1, 1, 2) == 32 * 2 * 8 * 128 * 2
    assert kv_cache_bytes(arch, 4, 8192, 2) == 4 * 8192 * 131072
    assert kv_cache_bytes_by_layer(arch, 2, 10, 4) == [2 * 10 * 2 * 8 * 128 * 4] * 32


def test_multi_query_attention_caches_one_head():
    arch = architecture_from_hf_config({**presets()["llama-3.2-1b"].config, "num_key_value_heads": 1})
    assert kv_cache_bytes(arch, 1, 100, 2) == arch.num_hidden_layers * 2 * 1 * arch.resolved_head_dim * 100 * 2


def test_mla_caches_the_compressed_latent_and_rotary_key():
    arch = preset_arch("deepseek-v3")
    assert [s.kind for s in layer_cache_shapes(arch)] == ["latent"] * arch.num_hidden_layers
    assert kv_cache_bytes(arch, 1, 1000, 2) == 61 * 1000 * (512 + 64) * 2


def test_sliding_layers_hold_at_most_the_window_while_decoding():
    arch = preset_arch("gemma-3-27b")
    window = arch.sliding_window
    sliding = set(arch.window_layers())
    per_token = 2 * arch.kv_heads * arch.resolved_head_dim * 2
    by_layer = kv_cache_bytes_by_layer(arch, 1, 50_000, 2)
    for index, nbytes in enumerate(by_layer):
        if index in sliding:
            assert nbytes == window * per_token + 8  # the int64 window tensor
        else:
            assert nbytes == 50_000 * per_token
    # right after a 50k-token prefill the whole concatenation is still allocated
    after_prefill = kv_cache_bytes_by_layer(arch, 1, 50_000, 2, last_forward_tokens=50_000)
    assert all(nbytes == 50_000 * per_token + (8 if i in sliding else 0) for i, nbytes in enumerate(after_prefill))


def test_gpt_oss_window_comes_from_the_config_for_the_cache():
    config = presets()["gpt-oss-20b"].config
    arch = architecture_from_hf_config(config)
    assert len(arch.window_layers()) == arch.num_hidden_layers // 2  # the reader keeps the config's window (even layers)
    cached = cache_architecture(arch, config)
    assert cached.sliding_window == 128
    assert len(cached.window_layers()) == arch.num_hidden_layers // 2


def test_llama4_chunked_layers_cache_one_chunk():
    arch = preset_arch("llama-4-scout")
    kinds = {s.kind for s in layer_cache_shapes(arch)}
    assert kinds == {"sliding", "full"}
    assert {s.window for s in layer_cache_shapes(arch) if s.kind == "sliding"} == {8192}


@pytest.mark.parametrize(
    "arguments, field",
    [((0, 10, 2), "batch_size"), ((1, -1, 2), "tokens"), ((1, 10, 3), "dtype_bytes"), ((1, 10.5, 2), "tokens")],
)
def test_bad_input_names_the_field(arguments, field):
    with pytest.raises(FieldError) as error:
        kv_cache_bytes(preset_arch("llama-3.2-1b"), *arguments)
    assert error.value.field == field


# ---------------------------------------------------------------- against transformers' DynamicCache

TINY = {
    "llama-gqa": {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 96,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2},
    "mistral-sliding": {"model_type": "mistral", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 96,
                        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "sliding_window": 8},
    "gemma3-hybrid": {"model_type": "gemma3_text", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 96,
                      "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16,
                      "sliding_window": 8, "layer_types": ["sliding_attention", "sliding_attention", "full_attention"]},
    "gpt-oss-sinks": {"model_type": "gpt_oss", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 64,
                      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                      "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 8},
    "llama4-chunked-nope": {"model_type": "llama4_text", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 64,
                            "intermediate_size_mlp": 96, "num_hidden_layers": 4, "num_attention_heads": 4,
                            "num_key_value_heads": 2, "head_dim": 16, "num_local_experts": 2, "attention_chunk_size": 8},
    "deepseek-v3-mla": {"model_type": "deepseek_v3", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 96,
                        "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                        "num_key_value_heads": 4, "kv_lora_rank": 32, "q_lora_rank": 48, "qk_nope_head_dim": 16,
                        "qk_rope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
                        "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1},
}


def _cache_storage_bytes(cache):
    out = []
    for layer in cache.layers:
        nbytes = 0
        for tensor in (layer.keys, layer.values):
            if tensor is not None:
                nbytes += tensor.untyped_storage().nbytes()
        window = getattr(layer, "_sliding_window_tensor", None)
        if window is not None:
            nbytes += window.untyped_storage().nbytes()
        out.append(nbytes)
    return out


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(TINY))
def test_matches_transformers_dynamic_cache(name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    fields = dict(TINY[name])
    model_type = fields.pop("model_type")
    config = transformers.AutoConfig.for_model(model_type, **fields)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.bfloat16).eval()
    arch = cache_architecture(architecture_from_hf_config(TINY[name]), TINY[name])
    batch, prompt = 2, 12
    cache = transformers.DynamicCache(config=model.config)
    ids = torch.randint(0, 256, (batch, prompt))
    with torch.no_grad():
        model(input_ids=ids, cache=cache, use_cache=True)
        assert _cache_storage_bytes(cache) == kv_cache_bytes_by_layer(arch, batch, prompt, 2, last_forward_tokens=prompt)
        for step in range(3):
            model(input_ids=ids[:, :1], cache=cache, use_cache=True)
            tokens = prompt + step + 1
            assert _cache_storage_bytes(cache) == kv_cache_bytes_by_layer(arch, batch, tokens, 2), (name, step)

"""Read a Hugging Face ``config.json`` into an :class:`~trainmem.architecture.Architecture`.

One small function per ``model_type`` maps that family's fields, with the defaults of the
matching ``transformers`` config class for fields a file leaves out (e.g. GPT-2's
``n_inner=None`` means ``4 * n_embd``). A family listed here is one whose parameter count
trainmem reproduces exactly (tests/test_presets.py checks it against transformers).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from .architecture import Architecture

HFConfig = Mapping[str, Any]


def _common_decoder_fields(config: HFConfig, **defaults: Any) -> dict[str, Any]:
    """Fields shared by the Llama-style families, with that family's defaults."""

    def get(name: str) -> Any:
        value = config.get(name)
        return defaults.get(name) if value is None else value

    heads = get("num_attention_heads")
    return {
        "model_type": config["model_type"],
        "vocab_size": get("vocab_size"),
        "hidden_size": get("hidden_size"),
        "num_hidden_layers": get("num_hidden_layers"),
        "num_attention_heads": heads,
        "num_key_value_heads": get("num_key_value_heads") or heads,
        "head_dim": config.get("head_dim"),
        "intermediate_size": get("intermediate_size"),
        "hidden_act": config.get("hidden_act") or config.get("hidden_activation") or defaults.get("hidden_act", "silu"),
        "max_position_embeddings": get("max_position_embeddings"),
        "tie_word_embeddings": bool(get("tie_word_embeddings")),
        "attention_dropout": float(config.get("attention_dropout") or 0.0),
    }


def _llama(config: HFConfig) -> Architecture:
    """LlamaConfig: attention_bias puts a bias on q, k, v and o; mlp_bias on all three MLP projections."""
    fields = _common_decoder_fields(
        config,
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
    )
    attention_bias = bool(config.get("attention_bias", False))
    return Architecture(
        **fields,
        attention_qkv_bias=attention_bias,
        attention_output_bias=attention_bias,
        mlp_bias=bool(config.get("mlp_bias", False)),
    )


#: MistralConfig's own defaults (those of Mistral-7B), shared by MixtralConfig.
_MISTRAL_7B_DEFAULTS: dict[str, Any] = dict(
    vocab_size=32000,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    max_position_embeddings=4096 * 32,
    tie_word_embeddings=False,
)


def _mistral(config: HFConfig) -> Architecture:
    """MistralConfig: Llama without biases; defaults of Mistral-7B."""
    fields = _common_decoder_fields(config, **_MISTRAL_7B_DEFAULTS)
    return Architecture(**fields)


def _mixtral(config: HFConfig) -> Architecture:
    """MixtralConfig: every MLP is ``num_local_experts`` SwiGLU experts of ``intermediate_size``, top-k routed."""
    fields = _common_decoder_fields(config, **_MISTRAL_7B_DEFAULTS)
    return Architecture(
        **fields,
        num_experts=config.get("num_local_experts") or 8,
        num_experts_per_tok=config.get("num_experts_per_tok") or 2,
    )


#: Qwen2Config's own defaults, which Qwen3Config repeats.
_QWEN2_DEFAULTS: dict[str, Any] = dict(
    vocab_size=151936,
    hidden_size=4096,
    intermediate_size=22016,
    num_hidden_layers=32,
    num_attention_heads=32,
    max_position_embeddings=32768,
    tie_word_embeddings=False,
)


def _qwen2(config: HFConfig) -> Architecture:
    """Qwen2Config: bias on q, k and v (not on o)."""
    fields = _common_decoder_fields(config, **_QWEN2_DEFAULTS)
    return Architecture(**fields, attention_qkv_bias=True)


def _qwen2_moe(config: HFConfig) -> Architecture:
    """Qwen2MoeConfig: routed experts of ``moe_intermediate_size`` plus a gated shared expert."""
    sparse_step = config.get("decoder_sparse_step", 1)
    if sparse_step != 1 or config.get("mlp_only_layers"):
        raise ValueError(
            "qwen2_moe is supported with every layer sparse (decoder_sparse_step=1, mlp_only_layers=[]); "
            f"got decoder_sparse_step={sparse_step}, mlp_only_layers={config.get('mlp_only_layers')}"
        )
    fields = _common_decoder_fields(
        config,
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=24,
        num_attention_heads=16,
        max_position_embeddings=32768,
        tie_word_embeddings=False,
    )
    fields["intermediate_size"] = config.get("moe_intermediate_size") or 1408
    shared_size = config.get("shared_expert_intermediate_size")
    return Architecture(
        **fields,
        attention_qkv_bias=True,
        num_experts=config.get("num_experts") or 60,
        num_experts_per_tok=config.get("num_experts_per_tok") or 4,
        shared_expert_intermediate_size=5632 if shared_size is None else shared_size,
        shared_expert_gate=True,
    )


def _qwen3(config: HFConfig) -> Architecture:
    """Qwen3Config: RMSNorm on each query and key head, optional attention_bias on q, k, v, o."""
    fields = _common_decoder_fields(config, **_QWEN2_DEFAULTS)
    fields["head_dim"] = config.get("head_dim") or 128
    attention_bias = bool(config.get("attention_bias", False))
    return Architecture(**fields, qk_norm=True, attention_qkv_bias=attention_bias, attention_output_bias=attention_bias)


def _gemma2(config: HFConfig) -> Architecture:
    """Gemma2Config: four RMSNorms per layer, GeGLU MLP, scaled and always-tied embeddings, soft-capping."""
    fields = _common_decoder_fields(
        config,
        vocab_size=256000,
        hidden_size=2304,
        intermediate_size=9216,
        num_hidden_layers=26,
        num_attention_heads=8,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        hidden_act="gelu_pytorch_tanh",
    )
    fields["head_dim"] = config.get("head_dim") or 256
    attention_bias = bool(config.get("attention_bias", False))
    return Architecture(
        **fields,
        norms_per_layer=4,
        attention_qkv_bias=attention_bias,
        attention_output_bias=attention_bias,
        scale_embeddings=True,
        final_logit_softcapping=config.get("final_logit_softcapping", 30.0),
        attn_logit_softcapping=config.get("attn_logit_softcapping", 50.0),
    )


def _phi3(config: HFConfig) -> Architecture:
    """Phi3Config: fused qkv_proj and gate_up_proj, dropout on the residual branches."""
    fields = _common_decoder_fields(
        config,
        vocab_size=32064,
        hidden_size=3072,
        intermediate_size=8192,
        num_hidden_layers=32,
        num_attention_heads=32,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    return Architecture(
        **fields,
        fused_qkv=True,
        fused_gate_up=True,
        residual_dropout=float(config.get("resid_pdrop") or 0.0),
        embedding_dropout=float(config.get("embd_pdrop") or 0.0),
    )


def _gpt2(config: HFConfig) -> Architecture:
    """GPT2Config: LayerNorm, learned positions, 4h GELU MLP, biases everywhere, tied head, dropout 0.1."""
    hidden = config.get("n_embd") or 768
    heads = config.get("n_head") or 12
    return Architecture(
        model_type="gpt2",
        vocab_size=config.get("vocab_size") or 50257,
        hidden_size=hidden,
        num_hidden_layers=config.get("n_layer") or 12,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        intermediate_size=config.get("n_inner") or 4 * hidden,
        mlp="plain",
        hidden_act=config.get("activation_function") or "gelu_new",
        norm="layernorm",
        attention_qkv_bias=True,
        attention_output_bias=True,
        mlp_bias=True,
        fused_qkv=True,
        position_embedding="learned",
        max_position_embeddings=config.get("n_positions") or 1024,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", True)),
        embedding_dropout=_dropout(config, "embd_pdrop"),
        attention_dropout=_dropout(config, "attn_pdrop"),
        residual_dropout=_dropout(config, "resid_pdrop"),
    )


def _dropout(config: HFConfig, name: str, default: float = 0.1) -> float:
    value = config.get(name)
    return default if value is None else float(value)


READERS: dict[str, Callable[[HFConfig], Architecture]] = {
    "gemma2": _gemma2,
    "gpt2": _gpt2,
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "phi3": _phi3,
    "qwen2": _qwen2,
    "qwen2_moe": _qwen2_moe,
    "qwen3": _qwen3,
}
"""Supported ``model_type`` values and the function that reads each."""


def architecture_from_hf_config(config: HFConfig) -> Architecture:
    """Build the Architecture that a Hugging Face ``config.json`` describes.

    Raises ValueError naming the model_type and the supported ones when the family is unknown.
    """
    if not isinstance(config, Mapping):
        raise ValueError(f"a config.json must be a JSON object, got {type(config).__name__}")
    model_type = config.get("model_type")
    if model_type is None and isinstance(config.get("text_config"), Mapping):
        return architecture_from_hf_config(config["text_config"])
    if model_type not in READERS:
        raise ValueError(
            f"model_type {model_type!r} is not supported; supported model types: {', '.join(sorted(READERS))}"
        )
    return READERS[model_type](config)

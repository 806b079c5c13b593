"""Qwen4-Exp: Qwen3.5-MoE's hybrid (Gated DeltaNet and gated attention, MoE with a gated shared expert in
every layer) with hyper-connections, per-layer n-gram embeddings and a QSA token indexer
(transformers 5.24 ``models/qwen4_exp/modular_qwen4_exp.py``; checkpoint ``Qwen/Qwen4-Exp``).

``qwen4_exp_text`` (``Qwen4ExpTextConfig``, ``Qwen4ExpForCausalLM``) is the language model; the released
checkpoint is the ``qwen4_exp`` wrapper (``Qwen4ExpForConditionalGeneration``), read through its
``text_config`` (the vision tower is not counted). What differs from Qwen3.5-MoE, module by module
(sizes in :mod:`trainmem.hyper_connections`):

* The decoder layer has **no** ``input_layernorm`` / ``post_attention_layernorm`` and the model no final
  ``norm``: each sub-block is wrapped by a ``Qwen4ExpTextGatedResidual`` over hc_count residual streams
  (``attn_hyper_connection``, ``mlp_hyper_connection``; ``hyper_connection_mixer`` after the last layer).
* Layer types are ``linear_attention`` and ``indexed_attention`` (``full_attention`` in a file means
  indexed); the attention is Qwen3.5's gated attention with the QSA indexer in front of it, whose boolean
  mask is and-ed into the causal mask (always materialised: ``allow_is_causal_skip=False``).
* PLE layers (``ple_layer_ids``) add ``hidden_states + ple(hidden_states, input_ids)`` before the
  attention's hyper-connection.
* The Gated DeltaNet's gated norm uses ``output_gate_type`` (``sigmoid`` in the released config) or
  ``hidden_act``.
* RoPE: Qwen3.5's interleaved multimodal RoPE, ``partial_rotary_factor`` defaults to 1.0 here (the class
  leaves ``rope_parameters`` without one; the checkpoint sets 0.25).

The indexer's parameters get no gradient (its output is a boolean mask): group ``no_gradient``.
PEFT has no default LoRA targets and no MoE conversion for ``qwen4_exp_text``: ``all-linear`` adapts the
``nn.Linear`` modules (the indexer's ``index_qk_proj`` and the hyper-connection linears included).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..architecture import Architecture
from ..hyper_connections import HyperConnections
from ..layers import LayerProgram
from . import blocks
from .blocks import NO_GRADIENT_GROUP, ParameterTensor
from .family import checked_layer_types, common_decoder_fields
from .fields import ConfigFields
from .qwen3_5 import Qwen3_5MoeText, SplitLinearAttentionNames, _without_intermediate_size, split_linear_attention_tensors
from .qwen3_next import gated_attention_tensors, hybrid_attention_fields, partial_rotary_factor

QWEN4_EXP_TEXT_DEFAULTS = dict(
    vocab_size=248320,
    hidden_size=2048,
    intermediate_size=512,  # no intermediate_size: every layer's MLP is the MoE (moe_intermediate_size)
    num_hidden_layers=40,
    num_attention_heads=16,
    num_key_value_heads=2,
    head_dim=256,
    max_position_embeddings=32768,
    tie_word_embeddings=False,
)
"""``Qwen4ExpTextConfig``'s defaults."""

LAYER_TYPES = ("linear_attention", "indexed_attention", "full_attention")
MAX_NGRAM_VOCAB_BASE = 1 << 40
MAX_NGRAM_HEADS = 1024
MAX_NGRAM_TABLES = 1 << 14
"""Bounds that keep the prime search of the n-gram tables (hyper_connections.ngram_rows) short."""
UNUSED = NO_GRADIENT_GROUP
"""The group of the indexer's parameters: ``requires_grad``, but on no path to the loss, so no gradient and no
optimizer state (plan.tensor_trains); counted among the trainable parameters, as ``requires_grad`` counts them."""


@dataclass(frozen=True)
class Qwen4ExpNames(SplitLinearAttentionNames):
    """Qwen3.5's module paths plus the hyper-connections, the PLE module and the QSA indexer."""

    attn_hyper_connection: str = "attn_hyper_connection"
    mlp_hyper_connection: str = "mlp_hyper_connection"
    hyper_connection_mixer: str = "hyper_connection_mixer"
    ple: str = "ple"
    indexer: str = "self_attn.indexer"

    def hyper_connection_modules(self, prefix: str) -> tuple[str, ...]:
        return tuple(f"{prefix}.{m}" for m in ("hc_norm", "input_mix_weight_down", "input_mix_weight_up", "block_inject_weight"))

    def ple_modules(self) -> tuple[str, ...]:
        return tuple(
            f"{self.ple}.{m}"
            for m in ("ple_embedding.ngram_embedding", "key_proj", "value_proj", "norm_key", "norm_query", "norm_conv", "conv1d")
        )

    def indexer_modules(self) -> tuple[str, ...]:
        return tuple(f"{self.indexer}.{m}" for m in ("index_qk_proj", "q_layernorm", "k_layernorm"))

    def module_paths(self) -> tuple[str, ...]:
        return (
            super().module_paths()
            + self.hyper_connection_modules(self.attn_hyper_connection)
            + self.hyper_connection_modules(self.mlp_hyper_connection)
            + self.hyper_connection_modules(self.hyper_connection_mixer)
            + self.ple_modules()
            + self.indexer_modules()
        )


QWEN4_EXP_NAMES = Qwen4ExpNames()


def read_hyper_connections(fields: ConfigFields, hidden: int) -> HyperConnections:
    """``Qwen4ExpTextConfig``'s hyper-connection, PLE and QSA fields, checked as ``validate_architecture``."""
    streams = fields.integer("hc_count", 4)
    if streams < 2:
        raise fields.fail("hc_count", f"Qwen4-Exp requires hc_count > 1, got {streams}")
    ple_dim = fields.integer("ple_embed_dim", hidden)
    ngram_size = fields.integer("ngram_size", 3, minimum=2, maximum=MAX_NGRAM_HEADS)
    per_ngram = fields.integer("heads_per_ngram", 8, maximum=MAX_NGRAM_HEADS)
    if (ngram_size - 1) * per_ngram > MAX_NGRAM_HEADS:
        raise fields.fail("heads_per_ngram", f"(ngram_size - 1) * heads_per_ngram must be at most {MAX_NGRAM_HEADS}")
    qsa = {
        name: fields.optional_integer(name)
        for name in ("indexer_n_heads", "indexer_kv_heads", "indexer_head_dim", "indexer_budget", "indexer_compress_ratio")
    }
    if any(value is not None for value in qsa.values()):
        missing = [name for name, value in qsa.items() if value is None]
        if missing:
            raise fields.fail(missing[0], "required when any indexer_* field is set (the QSA indexer)")
        if qsa["indexer_kv_heads"] != 1:
            raise fields.fail("indexer_kv_heads", f"Qwen4-Exp QSA requires one indexer key head, got {qsa['indexer_kv_heads']}")
        if qsa["indexer_budget"] % qsa["indexer_compress_ratio"]:  # type: ignore[operator]
            raise fields.fail("indexer_budget", "must be divisible by indexer_compress_ratio")
    gate = fields.string("output_gate_type", None) if fields.has("output_gate_type") else None
    if gate is not None and gate not in ("sigmoid", "silu"):
        raise fields.fail("output_gate_type", f"expected 'sigmoid' or 'silu', got {gate!r}")
    return HyperConnections(
        streams=streams,
        rank=fields.integer("hc_lowrank", 320),
        ple_embed_dim=ple_dim,
        ple_conv_kernel_size=fields.integer("ple_conv_kernel_size", 4),
        ngram_size=ngram_size,
        heads_per_ngram=per_ngram,
        ngram_vocab_size_base=fields.integer("ngram_vocab_size_base", 20_000_000, maximum=MAX_NGRAM_VOCAB_BASE),
        ngram_vocab_divisor=fields.integer("make_ngram_vocab_size_divisible_by", 128),
        indexer_heads=qsa["indexer_n_heads"] or 0,
        indexer_head_dim=qsa["indexer_head_dim"] or 0,
        indexer_budget=qsa["indexer_budget"] or 0,
        indexer_compress_ratio=qsa["indexer_compress_ratio"] or 0,
        output_gate=gate or fields.activation("hidden_act", "silu"),
    )


def read_ple_layers(fields: ConfigFields, hc: HyperConnections, layer_types: list[str]) -> tuple[int, ...]:
    """``ple_layer_ids`` (one-indexed, deduplicated and sorted as ``__post_init__`` does) as zero-indexed layers,
    each a linear-attention layer; ``ple_embed_dim`` must split over the n-gram heads; ``eos_token_id`` must be set."""
    ids = sorted(set(fields.integer_list("ple_layer_ids", minimum=1, maximum=len(layer_types))))
    if not ids:
        return ()
    if hc.ple_embed_dim % hc.ngram_heads:
        raise fields.fail(
            "ple_embed_dim", f"must be divisible by the {hc.ngram_heads} n-gram heads ((ngram_size - 1) * heads_per_ngram)"
        )
    if len(ids) * hc.ngram_heads > MAX_NGRAM_TABLES:
        raise fields.fail("ple_layer_ids", f"PLE layers times n-gram heads must be at most {MAX_NGRAM_TABLES}")
    wrong = [i for i in ids if layer_types[i - 1] != "linear_attention"]
    if wrong:
        raise fields.fail("ple_layer_ids", f"PLE runs on linear_attention layers only, got layer {wrong[0]}")
    eos = fields.config.get("eos_token_id")
    if eos is None or eos == []:
        raise fields.fail("eos_token_id", "must be set when ple_layer_ids is (the n-gram hashing pads with it)")
    return tuple(i - 1 for i in ids)


def read_layer_types(fields: ConfigFields, layers: int) -> list[str]:
    """``layer_types`` (``full_attention`` read as ``indexed_attention``), or every ``full_attention_interval``-th
    layer (4) indexed attention, the others linear (``Qwen4ExpTextConfig.__post_init__``)."""
    layer_types = checked_layer_types(fields, layers, LAYER_TYPES)
    if not layer_types:
        interval = fields.integer("full_attention_interval", 4)
        return ["linear_attention" if (i + 1) % interval else "indexed_attention" for i in range(layers)]
    return ["indexed_attention" if kind == "full_attention" else kind for kind in layer_types]


def hyper_connection_tensors(prefix: str, arch: Architecture, group: str, inject: bool = True) -> list[ParameterTensor]:
    """``Qwen4ExpTextGatedResidual``: grouped ``hc_norm`` (hc·h), ``input_mix_weight_down`` (hc·h → r),
    ``input_mix_weight_up`` (r → hc·h), ``block_inject_weight`` (hc·h → hc) unless it is the final mixer."""
    hc = arch.hyper_connections
    assert hc is not None
    wide = hc.streams * arch.hidden_size
    tensors = [ParameterTensor(f"{prefix}.hc_norm.weight", "norms", (wide,))]
    tensors += blocks.linear(f"{prefix}.input_mix_weight_down", group, wide, hc.rank, False)
    tensors += blocks.linear(f"{prefix}.input_mix_weight_up", group, hc.rank, wide, False)
    if inject:
        tensors += blocks.linear(f"{prefix}.block_inject_weight", group, wide, hc.streams, False)
    return tensors


def ple_tensors(arch: Architecture, names: Qwen4ExpNames, ple_index: int) -> list[ParameterTensor]:
    """``Qwen4ExpTextPLELayer``: the n-gram table, key (ple → hc·h) and value (ple → h) projections, three grouped
    norms over hc·h, the depthwise conv (hc·h channels, kernel ``ple_conv_kernel_size``, no bias)."""
    hc = arch.hyper_connections
    assert hc is not None
    h, wide, ple = arch.hidden_size, hc.streams * arch.hidden_size, hc.ple_embed_dim
    return (
        [ParameterTensor(f"{names.ple}.ple_embedding.ngram_embedding.weight", "embeddings", (hc.ngram_rows(ple_index), hc.ngram_head_dim))]
        + blocks.linear(f"{names.ple}.key_proj", "mlp", ple, wide, False)
        + blocks.linear(f"{names.ple}.value_proj", "mlp", ple, h, False)
        + [ParameterTensor(f"{names.ple}.{norm}.weight", "norms", (wide,)) for norm in ("norm_key", "norm_query", "norm_conv")]
        + [ParameterTensor(f"{names.ple}.conv1d.weight", "mlp", (wide, 1, hc.ple_conv_kernel_size))]
    )


def indexer_tensors(arch: Architecture, names: Qwen4ExpNames) -> list[ParameterTensor]:
    """``Qwen4ExpTextQSAIndexer``: ``index_qk_proj`` (h → (heads + 1)·d) and per-head q/k norms; no gradient."""
    hc = arch.hyper_connections
    assert hc is not None
    if not hc.indexer_heads:
        return []
    d = hc.indexer_head_dim
    return (
        blocks.linear(f"{names.indexer}.index_qk_proj", UNUSED, arch.hidden_size, (hc.indexer_heads + 1) * d, False)
        + [ParameterTensor(f"{names.indexer}.{norm}.weight", UNUSED, (d,)) for norm in ("q_layernorm", "k_layernorm")]
    )


class Qwen4ExpText(Qwen3_5MoeText):
    """``Qwen4ExpForCausalLM`` over ``Qwen4ExpTextModel``."""

    model_type = "qwen4_exp_text"
    names = QWEN4_EXP_NAMES
    defaults = QWEN4_EXP_TEXT_DEFAULTS
    lora_default_targets = None
    moe_lora_conversion = {}
    """transformers maps ``qwen4_exp_text``'s checkpoint names as ``qwen3_5_moe_text``'s; PEFT 0.21's
    ``_MOE_TARGET_MODULE_MAPPING`` lists neither: ``all-linear`` adapts the ``nn.Linear`` modules only."""

    def read_config(self, fields: ConfigFields) -> Architecture:
        fields = _without_intermediate_size(fields)
        common = common_decoder_fields(fields, self.defaults)
        layer_types = read_layer_types(fields, common["num_hidden_layers"])
        hc = read_hyper_connections(fields, common["hidden_size"])
        if not hc.indexer_heads and "indexed_attention" in layer_types:
            raise fields.fail(
                "indexer_n_heads",
                "required with indexed_attention layers: transformers 5.24 builds the QSA indexer on every attention "
                "layer and cannot build it without indexer_n_heads, indexer_kv_heads, indexer_head_dim, indexer_budget "
                "and indexer_compress_ratio (Qwen4ExpTextQSAIndexer)",
            )
        ple_layers = read_ple_layers(fields, hc, layer_types)
        bias = fields.boolean("attention_bias", False)
        common.update(self.moe_fields(fields))
        attention = hybrid_attention_fields(fields, [_as_qwen3_next(kind) for kind in layer_types], bias)
        attention["partial_rotary_factor"] = partial_rotary_factor(fields, 1.0)
        return Architecture(**common, **attention, hyper_connections=hc, ple_layers=ple_layers)

    def moe_fields(self, fields: ConfigFields) -> dict[str, object]:
        return dict(
            num_experts=fields.integer("num_experts", 512),
            num_experts_per_tok=fields.integer("num_experts_per_tok", 10),
            shared_expert_intermediate_size=fields.integer("shared_expert_intermediate_size", 512),
            shared_expert_gate=True,
            intermediate_size=fields.integer("moe_intermediate_size", 512),
        )

    # ------------------------------------------------------------------ inventory
    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        """``Qwen4ExpTextDecoderLayer.__init__`` in its order: the mixer, the MoE, PLE, the two hyper-connections."""
        names = self.names
        if arch.layer_linear_attention:
            mixer = split_linear_attention_tensors(arch, names)
        else:
            mixer = gated_attention_tensors(arch, names) + indexer_tensors(arch, names)
        ple = ple_tensors(arch, names, arch.layer_ple_index) if arch.layer_ple_index is not None else []
        return (
            mixer
            + blocks.moe_mlp(arch, names)
            + ple
            + hyper_connection_tensors(names.attn_hyper_connection, arch, "attention")
            + hyper_connection_tensors(names.mlp_hyper_connection, arch, "mlp")
        )

    def head(self, arch: Architecture) -> list[ParameterTensor]:
        """``hyper_connection_mixer`` (no final norm) and ``lm_head``."""
        tensors = hyper_connection_tensors(self.names.hyper_connection_mixer, arch, "norms", inject=False)
        if not arch.tie_word_embeddings:
            h = arch.hidden_size
            tensors.append(ParameterTensor(f"{self.names.lm_head}.weight", "lm_head", (arch.vocab_size, h), (h, arch.vocab_size)))
        return tensors

    def residual_streams(self, arch: Architecture) -> int:
        return arch.hyper_connections.streams if arch.hyper_connections is not None else 1

    def forward_locals_bytes(self, arch: Architecture, rows: int, seq: int, attention: str) -> list[tuple[str, int, str]]:
        """The causal mask ``create_causal_mask`` builds once per forward with ``allow_is_causal_skip=False``:
        (1, 1, s, s), boolean for SDPA (the additive float mask of eager in the stream's dtype is not modelled)."""
        if not any(not kind.architecture.layer_linear_attention for kind in arch.layer_kinds()):
            return []
        return [("causal attention mask", seq * seq, "the boolean mask the QSA indexer's selection is and-ed into")]

    def program(self) -> type[LayerProgram]:
        from .qwen4_exp_program import Qwen4ExpProgram

        return Qwen4ExpProgram


def _as_qwen3_next(kind: str) -> str:
    return "linear_attention" if kind == "linear_attention" else "full_attention"


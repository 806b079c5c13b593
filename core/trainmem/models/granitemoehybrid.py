"""Granite 4.0 (transformers/models/granitemoehybrid, transformers 5.24): Mamba-2 and attention layers,
each followed by a MoE with a shared expert (Granite 4.0 H Tiny, H Small) or by the shared MLP alone
(H Micro, H 1B, H 350M: ``num_local_experts: 0``).

* **Layers** follow ``layer_types`` (``mamba`` / ``attention``, which transformers 5.24 reads as
  ``linear_attention`` / ``full_attention``; default: every layer Mamba-2). Each layer is
  ``x + m · mixer(norm(x))`` then ``x + m · (moe(norm(x)) + shared_mlp(norm(x)))`` with Granite's
  ``residual_multiplier`` m (``GraniteMoeHybridDecoderLayer.forward``).
* **Mixer**: the shared Mamba-2 mixer of :mod:`trainmem.models.mamba2_mixer` (``mamba.*``) or grouped-query
  attention (``self_attn.*``) scaled by ``attention_multiplier`` (no tensor), with RoPE only when
  ``position_embedding_type`` is ``"rope"`` (the released hybrids use ``"nope"``: no rotary tables).
* **MoE** (``block_sparse_moe``): ``GraniteMoeHybridTopKRouter`` (``F.linear`` of an ``nn.Parameter``,
  ``.float()``, top-k of the logits, softmax over the k, ``type_as`` the stream), fused 3-D experts run as
  transformers 5's ``grouped_mm`` experts; ``shared_mlp`` is a fused SwiGLU (``input_linear`` → chunk →
  ``output_linear``).
* **Ends**: Granite's ``embedding_multiplier`` and ``logits_scaling`` (as ``granite``).
* PEFT has no default targets for granitemoehybrid, and no v4 MoE conversion (peft 0.21
  ``_MOE_TARGET_MODULE_MAPPING`` has none for its ``granitemoe`` pattern): ``all-linear`` adapts in_proj,
  out_proj, q/k/v/o and the shared MLP; conv1d, the router and the fused experts stay frozen. A 4-bit
  load quantises those ``nn.Linear`` modules only.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from . import blocks
from .blocks import ModuleNames, ParameterTensor
from .family import DecoderFamily, common_decoder_fields
from .fields import ConfigFields
from .mamba2_mixer import CUDA_KERNEL_NOTE, Mamba2Names, Mamba2Program, mamba2_fields, mamba2_tensors

GRANITE_MOE_HYBRID_DEFAULTS = dict(
    vocab_size=32000,
    hidden_size=4096,
    intermediate_size=11008,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=None,
    max_position_embeddings=2048,
    tie_word_embeddings=False,
)
"""``GraniteMoeHybridConfig``'s defaults."""

MAMBA_DEFAULTS = dict(n_heads=128, d_head="auto", d_state=256, n_groups=1, d_conv=4, expand=2, chunk_size=256,
                      conv_bias=True, proj_bias=False, norm_per_group=True)
"""``GraniteMoeHybridConfig``'s ``mamba_*`` defaults; the gated norm's ``group_size`` is inner width / n_groups."""

LAYER_TYPE_ALIASES = {"mamba": "linear_attention", "attention": "full_attention",
                      "linear_attention": "linear_attention", "full_attention": "full_attention"}
"""transformers 5.24 configuration_utils ``_LEGACY_LAYER_TYPE_REMAP`` and the names it maps to."""


@dataclass(frozen=True)
class GraniteMoeHybridNames(ModuleNames):
    """The Granite 4.0 layer's module paths: ``shared_mlp`` with fused ``input_linear`` / ``output_linear``,
    ``block_sparse_moe`` router and experts, the Mamba-2 mixer under ``mamba``."""

    mlp: str = "shared_mlp"
    shared_expert: str = "shared_mlp"
    gate_up_proj: str = "input_linear"
    down_proj: str = "output_linear"
    router: str = "block_sparse_moe.router"
    experts: str = "block_sparse_moe.experts"

    def module_paths(self) -> tuple[str, ...]:
        return super().module_paths() + Mamba2Names("mamba").module_paths()


def read_hybrid_layer_types(fields: ConfigFields, layers: int, default: str = "linear_attention") -> list[str]:
    """``layer_types`` in transformers 5.24's names (``mamba`` → ``linear_attention``, ``attention`` →
    ``full_attention``); every layer ``default`` when the file has none."""
    raw = fields.string_list("layer_types")
    if not raw:
        return [default] * layers
    if len(raw) != layers:
        raise fields.fail("layer_types", f"has {len(raw)} entries for {layers} layers")
    unknown = sorted(set(raw) - set(LAYER_TYPE_ALIASES))
    if unknown:
        raise fields.fail("layer_types", f"unknown layer type {unknown[0]!r}; allowed: mamba, attention")
    return [LAYER_TYPE_ALIASES[kind] for kind in raw]


class GraniteMoeHybrid(DecoderFamily):
    model_type = "granitemoehybrid"
    names = GraniteMoeHybridNames()
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, GRANITE_MOE_HYBRID_DEFAULTS)
        layers = common["num_hidden_layers"]
        layer_types = read_hybrid_layer_types(fields, layers)
        bias = fields.boolean("attention_bias", False)
        experts = fields.integer("num_local_experts", 8, minimum=0)
        shared = fields.integer("shared_intermediate_size", 1024)
        if experts:
            moe = dict(
                num_experts=experts,
                num_experts_per_tok=fields.integer("num_experts_per_tok", 2),
                shared_expert_intermediate_size=shared,
            )
        else:  # "Allow non-MoE (dense)": the shared MLP alone
            moe = {}
            common["intermediate_size"] = shared
        position = fields.config.get("position_embedding_type")
        if position is not None and not isinstance(position, str):
            raise fields.fail("position_embedding_type", f"expected a string or null, got {position!r}")
        mamba_layers = tuple(i for i, kind in enumerate(layer_types) if kind == "linear_attention")
        return Architecture(
            **common,
            **moe,
            attention_qkv_bias=bias,
            attention_output_bias=bias,
            fused_gate_up=True,
            router_scoring="topk_softmax",
            embedding_multiplier=fields.number("embedding_multiplier", 1.0),
            residual_multiplier=fields.number("residual_multiplier", 1.0),
            logits_scaling=fields.number("logits_scaling", 1.0, minimum=1e-30),
            nope_layers=() if position == "rope" else tuple(range(layers)),
            linear_attention_layers=mamba_layers,
            mamba=mamba2_fields(fields, common["hidden_size"], defaults=MAMBA_DEFAULTS, heads_tile_expand=True),
            not_counted=(CUDA_KERNEL_NOTE,) if mamba_layers else (),
        )

    # ------------------------------------------------------------------ inventory
    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        names = self.names
        if arch.layer_linear_attention:
            mixer = mamba2_tensors(arch, Mamba2Names("mamba"))
        else:
            mixer = blocks.attention(arch, names)
        if arch.is_moe:
            mlp = blocks.moe_mlp(arch, names)
        else:
            mlp = blocks.dense_mlp(arch, names, names.mlp, arch.intermediate_size)
        return mixer + mlp + blocks.layer_norms(arch, names)

    def has_rotary_embedding(self, arch: Architecture) -> bool:
        """``rotary_emb`` (and its inv_freq buffers) exists only when ``position_embedding_type`` is ``"rope"``."""
        return len(arch.nope_layers) != arch.num_hidden_layers

    def rotary_tables_bytes(self, arch: Architecture, seq: int, stream_bytes: int) -> list[int]:
        """No rotary tables unless ``position_embedding_type`` is ``"rope"`` (``rotary_emb`` is None)."""
        if not self.has_rotary_embedding(arch):
            return []
        return super().rotary_tables_bytes(arch, seq, stream_bytes)

    def program(self) -> type[LayerProgram]:
        return GraniteMoeHybridProgram


class GraniteMoeHybridProgram(Mamba2Program, LayerProgram):
    """Granite 4.0's layer on the tape: the Mamba-2 mixer or attention, then the MoE and shared MLP."""

    mamba_names = Mamba2Names("mamba")
    mamba_family = "granitemoehybrid"

    def attention(self, x: Sym) -> Sym:
        if self.arch.layer_linear_attention:
            return self.mamba2_mixer(x)
        return super().attention(x)

    def _position_and_norm(self, q: Sym, k: Sym, produced: list[Sym]) -> tuple[Sym, Sym, bool]:
        if not self.arch.layer_rope:  # position_embedding_type "nope": q and k go to attention as they are
            return q, k, False
        return super()._position_and_norm(q, k, produced)

    def _route(self, x: Sym) -> Sym:
        """``GraniteMoeHybridTopKRouter``: ``F.linear(x, weight).float()``, top-k of the logits (indices
        saved), softmax over the k, ``type_as(hidden_states)``."""
        arch, shape, tape = self.arch, self.shape, self.tape
        rows = shape.stream_tokens * shape.experts_per_token
        router = self.expert_parameter(self.names.router, arch.num_experts * shape.hidden, self.trainability.trains(self.names.router))
        logits = tape.linear(x, router, arch.num_experts)
        logits32 = tape.to(logits, "fp32")
        if logits32 is not logits:
            tape.release(logits)
        top = tape.gather(logits32, rows, rows)
        tape.release(logits32)
        weights = tape.unary_saving_result("softmax", top, dtype=top.dtype)
        tape.release(top)
        cast = tape.to(weights, x.dtype)
        if cast is not weights:
            tape.release(weights)
        return cast

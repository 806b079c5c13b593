"""SmolLM3 (``smollm3``, transformers/models/smollm3, transformers 5.24).

Llama's layer (grouped-query attention, SwiGLU, RMSNorm, tied embeddings by default) with **NoPE layers**:
``no_rope_layers[i]`` is 1 where layer ``i`` applies RoPE and 0 where it does not (``SmolLM3Attention.forward``:
``if self.use_rope: apply_rotary_pos_emb(...)``); when the file leaves it out, every
``no_rope_layer_interval``-th layer (4: layers 3, 7, 11, ...) is a NoPE layer (``SmolLM3Config.__post_init__``).
A NoPE layer hands the transposed projections to the attention kernel as they are: no rotated copies of q
and k. With ``use_sliding_window`` and a ``sliding_window``, the NoPE layers attend through the window
(``layer_types``' "sliding_attention"; the file's ``layer_types`` wins). The rotary tables are computed once
per forward (``Qwen2Model``) for the RoPE layers. PEFT 0.21 has no default LoRA targets for smollm3.
"""

from __future__ import annotations

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from .family import DecoderFamily, common_decoder_fields
from .fields import ConfigFields

SMOLLM3_DEFAULTS = dict(
    vocab_size=128256,
    hidden_size=2048,
    intermediate_size=11008,
    num_hidden_layers=36,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=32768,
    tie_word_embeddings=True,
)
"""``SmolLM3Config``'s defaults (those of SmolLM3-3B)."""


class NopeLayerProgram(LayerProgram):
    """Llama's layer, whose NoPE layers (``Architecture.layer_rope`` false) skip RoPE. Their q/k norms still
    run (EXAONE 4 ``Exaone4Attention.forward`` norms q and k in every layer and rotates only in sliding ones;
    measured, torch 2.13 CPU: the global layer saves both norms' products and rsqrt)."""

    def _position_and_norm(self, q: Sym, k: Sym, produced: list[Sym]) -> tuple[Sym, Sym, bool]:
        if self.arch.layer_rope:
            return super()._position_and_norm(q, k, produced)
        if not self.arch.qk_norm:
            return q, k, False
        shape, names = self.shape, self.names
        tokens, d = shape.tokens, shape.head_dim
        if self.arch.qk_norm_over == "projection":
            q_normed = self.norm(names.q_norm, q, tokens, shape.heads * d)
            k_normed = self.norm(names.k_norm, k, tokens, shape.kv_heads * d)
        else:
            q_normed = self.norm(names.q_norm, q, tokens * shape.heads, d)
            k_normed = self.norm(names.k_norm, k, tokens * shape.kv_heads, d)
        self.tape.release(q, k)
        return q_normed, k_normed, False


def nope_layers(fields: ConfigFields, layers: int) -> tuple[int, ...]:
    """The layers ``no_rope_layers`` marks 0 (or every ``no_rope_layer_interval``-th layer)."""
    flags = fields.integer_list("no_rope_layers", minimum=0, maximum=1)
    if not fields.has("no_rope_layers"):  # null or left out; [] is a list too short (SmolLM3Config keeps it)
        interval = fields.integer("no_rope_layer_interval", 4)
        return tuple(i for i in range(layers) if (i + 1) % interval == 0)
    if len(flags) < layers:
        raise fields.fail("no_rope_layers", f"needs an entry (1: RoPE, 0: NoPE) for each of the {layers} layers, got {len(flags)}")
    return tuple(i for i in range(layers) if not flags[i])


class SmolLM3(DecoderFamily):
    model_type = "smollm3"
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, SMOLLM3_DEFAULTS)
        layers = common["num_hidden_layers"]
        nope = nope_layers(fields, layers)
        attention_bias = fields.boolean("attention_bias", False)
        window = fields.optional_integer("sliding_window")
        sliding: dict[str, object] = {}
        if fields.boolean("use_sliding_window", False) and window is not None:
            layer_types = fields.string_list("layer_types")
            if layer_types and len(layer_types) != layers:
                raise fields.fail("layer_types", f"has {len(layer_types)} entries for {layers} layers")
            chosen = (
                tuple(i for i, kind in enumerate(layer_types) if kind == "sliding_attention") if layer_types else nope
            )
            sliding = {"sliding_window": window, "sliding_layers": chosen}
        return Architecture(
            **common,
            **sliding,
            nope_layers=nope,
            attention_qkv_bias=attention_bias,
            attention_output_bias=attention_bias,
            mlp_bias=fields.boolean("mlp_bias", False),
        )

    def program(self) -> type[LayerProgram]:
        return NopeLayerProgram

"""EXAONE 4.0 (``exaone4``, LG AI Research; transformers/models/exaone4, transformers 5.24).

OLMo 2's post-norm decoder layer (``Exaone4DecoderLayer`` is ``Olmo2DecoderLayer``: the attention and MLP
outputs are normed before each residual add) with Llama's RMSNorm (``Exaone4RMSNorm`` is ``LlamaRMSNorm``)
and an RMSNorm over each query and key head (``q_norm``, ``k_norm`` of ``head_dim``). **Hybrid attention**:
``layer_types`` (by default every ``sliding_window_pattern``-th layer (4) is "full_attention", the others
"sliding_attention" with ``sliding_window`` 4096: ``Exaone4Config.__post_init__``). With a window, only the
sliding layers apply RoPE (``if self.sliding_window is None or self.is_sliding``): the global layers are NoPE
layers; without one (``sliding_window`` null) every layer applies RoPE and none slides. PEFT 0.21 has no
default LoRA targets for exaone4.
"""

from __future__ import annotations

from ..architecture import Architecture
from ..layers import LayerProgram
from .family import DecoderFamily, checked_layer_types, common_decoder_fields
from .fields import ConfigFields
from .smollm3 import NopeLayerProgram

EXAONE4_DEFAULTS = dict(
    vocab_size=102400,
    hidden_size=4096,
    intermediate_size=16384,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=32,
    max_position_embeddings=2048,
    tie_word_embeddings=False,
)
"""``Exaone4Config``'s defaults."""


def exaone4_layer_types(fields: ConfigFields, layers: int) -> list[str]:
    """The file's ``layer_types``, else ``sliding_window_pattern``: an integer n (every n-th layer global) or
    a string of L (local, sliding) and G (global) repeated from layer 0 (the config docstring's "LLLG")."""
    layer_types = checked_layer_types(fields, layers)
    if layer_types:
        return layer_types
    pattern = fields.raw("sliding_window_pattern", 4)
    if isinstance(pattern, str):
        if not pattern or set(pattern) - {"L", "G"}:
            raise fields.fail("sliding_window_pattern", f"expected an integer or a string of L and G, got {pattern!r}")
        return ["sliding_attention" if pattern[i % len(pattern)] == "L" else "full_attention" for i in range(layers)]
    every = fields.integer("sliding_window_pattern", 4)
    return ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(layers)]


class Exaone4(DecoderFamily):
    model_type = "exaone4"
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, EXAONE4_DEFAULTS)
        if common["head_dim"] is None:  # getattr(config, "head_dim", hidden_size // num_attention_heads)
            common["head_dim"] = common["hidden_size"] // common["num_attention_heads"]
        layers = common["num_hidden_layers"]
        window = fields.optional_integer("sliding_window") if "sliding_window" in fields.config else 4096
        hybrid: dict[str, object] = {}
        checked_layer_types(fields, layers)  # one entry per layer even without a window (Exaone4Config validates them)
        if window is not None:
            layer_types = exaone4_layer_types(fields, layers)
            hybrid = dict(
                sliding_window=window,
                sliding_layers=tuple(i for i, kind in enumerate(layer_types) if kind == "sliding_attention"),
                nope_layers=tuple(i for i, kind in enumerate(layer_types) if kind == "full_attention"),
            )
        return Architecture(**common, **hybrid, qk_norm=True, norm_position="post")

    def program(self) -> type[LayerProgram]:
        return NopeLayerProgram

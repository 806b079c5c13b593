"""OLMo 3 (``olmo3``, transformers/models/olmo3, transformers 5.24).

OLMo 2's post-norm layer (q and k RMS-normed over the whole projections, ``Olmo2RMSNorm``'s fp32 product,
RoPE cast back to q's dtype) with **sliding-window layers**: ``layer_types`` (by default three
"sliding_attention" layers then one "full_attention" layer: ``(i + 1) % 4 != 0``, ``Olmo3Config.__post_init__``)
and ``sliding_window`` (4096). ``Olmo3RotaryEmbedding`` (Gemma 3's) computes one cos/sin pair per layer type
present, each forward: two rotary tables when both types are used. PEFT 0.21 has no default LoRA targets for
olmo3.
"""

from __future__ import annotations

from ..architecture import Architecture
from .family import checked_layer_types, common_decoder_fields, sliding_window_fields
from .fields import ConfigFields
from .olmo2 import OLMO2_DEFAULTS, Olmo2

OLMO3_WINDOW_DEFAULT = 4096


def olmo3_layer_types(fields: ConfigFields, layers: int) -> list[str]:
    """``layer_types`` of the file, else three sliding layers to one full layer."""
    return checked_layer_types(fields, layers) or [
        "sliding_attention" if (i + 1) % 4 else "full_attention" for i in range(layers)
    ]


class Olmo3(Olmo2):
    model_type = "olmo3"

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, OLMO2_DEFAULTS)
        layer_types = olmo3_layer_types(fields, common["num_hidden_layers"])
        bias = fields.boolean("attention_bias", False)
        sliding = tuple(i for i, kind in enumerate(layer_types) if kind == "sliding_attention")
        return Architecture(
            **common,
            **sliding_window_fields(fields, common["num_hidden_layers"], OLMO3_WINDOW_DEFAULT, sliding),
            rope_sets=len(set(layer_types)),
            attention_qkv_bias=bias,
            attention_output_bias=bias,
            qk_norm=True,
            qk_norm_over="projection",
            norm_position="post",
        )

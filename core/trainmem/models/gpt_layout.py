"""The GPT layout shared by GPT-2 and GPT-NeoX (Pythia): what their readers have in common.

Both families are multi-head (no grouped K/V), LayerNorm with biases, one fused q/k/v projection
(GPT-2's ``c_attn``, GPT-NeoX's ``query_key_value``) and a plain two-matrix MLP with biases
(transformers/models/gpt2 ``GPT2Block``, models/gpt_neox ``GPTNeoXLayer``); they differ in their
field names, positions (learned vs rotary), head tying and residual wiring, which each reader adds.
"""

from __future__ import annotations

from typing import Any


def gpt_layout(*, heads: int, attention_bias: bool, **fields: Any) -> dict[str, Any]:
    """Architecture fields of a GPT-style decoder with ``heads`` query and key/value heads, ``attention_bias``
    on the fused q/k/v and the output projection, plus the family's own ``fields``."""
    return {
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "mlp": "plain",
        "norm": "layernorm",
        "attention_qkv_bias": attention_bias,
        "attention_output_bias": attention_bias,
        "mlp_bias": True,
        "fused_qkv": True,
        **fields,
    }

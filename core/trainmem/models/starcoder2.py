"""StarCoder2 (transformers/models/starcoder2).

LayerNorm with bias (``norm_epsilon``), grouped-query attention with RoPE, a plain GELU MLP
(``mlp.c_fc``, ``mlp.c_proj``), ``use_bias`` on every linear layer, dropout on the embeddings
(``embedding_dropout``) and on each sub-block's output (``residual_dropout``), and a tied head by
default. PEFT has no default LoRA targets for starcoder2.
"""

from __future__ import annotations

from ..architecture import Architecture
from .blocks import ModuleNames
from .family import DecoderFamily, common_decoder_fields, sliding_window_fields
from .fields import ConfigFields

STARCODER2_DEFAULTS = dict(
    vocab_size=49152,
    hidden_size=3072,
    intermediate_size=12288,
    num_hidden_layers=30,
    num_attention_heads=24,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
    hidden_act="gelu_pytorch_tanh",
)


class Starcoder2(DecoderFamily):
    model_type = "starcoder2"
    names = ModuleNames(fc1="c_fc", fc2="c_proj")
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        bias = fields.boolean("use_bias", True)
        common = common_decoder_fields(fields, STARCODER2_DEFAULTS)
        return Architecture(
            **common,
            **sliding_window_fields(fields, common["num_hidden_layers"], None),
            mlp="plain",
            norm="layernorm",
            attention_qkv_bias=bias,
            attention_output_bias=bias,
            mlp_bias=bias,
            residual_dropout=fields.probability("residual_dropout"),
            embedding_dropout=fields.probability("embedding_dropout"),
        )

"""GPT-2 (transformers/models/gpt2).

LayerNorm, learned positions (``wpe``), a fused ``c_attn`` (GPT-2's ``Conv1D``, which PEFT and
bitsandbytes treat as a linear layer), a plain 4h MLP (``c_fc``, ``c_proj``) with ``gelu_new``
written out in Python ops, biases everywhere, a tied head, dropout 0.1 on embeddings, attention and
residuals. Its own eager attention keeps the scores' dtype for the softmax. PEFT's default LoRA target:
c_attn.
"""

from __future__ import annotations

from ..architecture import Architecture
from .blocks import ModuleNames
from .family import DecoderFamily
from .fields import ConfigFields
from .gpt_layout import gpt_layout

GPT2_NAMES = ModuleNames(
    embed_tokens="wte",
    embed_positions="wpe",
    final_norm="ln_f",
    input_norm="ln_1",
    post_attention_norm="ln_2",
    qkv_proj="attn.c_attn",
    o_proj="attn.c_proj",
    fc1="c_fc",
    fc2="c_proj",
)


class GPT2(DecoderFamily):
    model_type = "gpt2"
    names = GPT2_NAMES
    lora_default_targets = ("c_attn",)
    eager_softmax_in_fp32 = False

    def read_config(self, fields: ConfigFields) -> Architecture:
        hidden = fields.integer("n_embd", 768)
        heads = fields.integer("n_head", 12)
        return Architecture(**gpt_layout(
            heads=heads,
            attention_bias=True,
            model_type="gpt2",
            vocab_size=fields.integer("vocab_size", 50257),
            hidden_size=hidden,
            num_hidden_layers=fields.integer("n_layer", 12, maximum=1024),
            intermediate_size=fields.integer("n_inner", 4 * hidden),
            hidden_act=fields.activation("activation_function", "gelu_new"),
            position_embedding="learned",
            max_position_embeddings=fields.integer("n_positions", 1024),
            tie_word_embeddings=fields.boolean("tie_word_embeddings", True),
            embedding_dropout=fields.probability("embd_pdrop", 0.1),
            attention_dropout=fields.probability("attn_pdrop", 0.1),
            residual_dropout=fields.probability("resid_pdrop", 0.1),
        ))

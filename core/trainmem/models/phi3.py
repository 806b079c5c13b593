"""Phi-3 (transformers/models/phi3).

One fused ``qkv_proj`` and one fused ``gate_up_proj``; dropout on the residual branches
(``resid_pdrop``) and the embeddings (``embd_pdrop``); partial rotary whose RoPE ends with
``torch.cat([rotated, passed_through], dim=-1)``, which leaves q and k laid out heads-first (one more
copy before ``o_proj`` with fused attention, measured). PEFT has no default LoRA targets for phi3
(``get_peft_model`` asks for them), so trainmem asks too.
"""

from __future__ import annotations

from ..architecture import Architecture
from .family import DecoderFamily, common_decoder_fields, sliding_window_fields
from .fields import ConfigFields

PHI3_DEFAULTS = dict(
    vocab_size=32064,
    hidden_size=3072,
    intermediate_size=8192,
    num_hidden_layers=32,
    num_attention_heads=32,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
)


class Phi3(DecoderFamily):
    model_type = "phi3"
    lora_default_targets = None
    rope_concatenates = True

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, PHI3_DEFAULTS)
        return Architecture(
            **common,
            **sliding_window_fields(fields, common["num_hidden_layers"], None),
            fused_qkv=True,
            fused_gate_up=True,
            residual_dropout=fields.probability("resid_pdrop"),
            embedding_dropout=fields.probability("embd_pdrop"),
        )

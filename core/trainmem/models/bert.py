"""BERT (``BertFor<Task>``, transformers/models/bert): the reference encoder layout.

Post-LN layers with biases everywhere, a 4h GELU MLP, word + learned position + token-type
embeddings under a LayerNorm, dropout 0.1 on embeddings, attention probabilities and each
sub-block's output. Sequence classification reads the pooler (dense + tanh on the [CLS] token);
token classification and MLM build the model without it (``add_pooling_layer=False``). PEFT's
default LoRA targets: query, value.
"""

from __future__ import annotations

from ..architecture import Architecture
from .encoder import EncoderFamily, encoder_fields
from .fields import ConfigFields

#: BertConfig's defaults (those of bert-base-uncased).
BERT_DEFAULTS = dict(
    vocab_size=30522,
    hidden_size=768,
    intermediate_size=3072,
    num_hidden_layers=12,
    num_attention_heads=12,
    max_position_embeddings=512,
    type_vocab_size=2,
)


class Bert(EncoderFamily):
    model_type = "bert"

    def read_config(self, fields: ConfigFields) -> Architecture:
        return Architecture(**encoder_fields(fields, BERT_DEFAULTS))

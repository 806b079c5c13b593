"""RoBERTa and XLM-RoBERTa (transformers/models/roberta, models/xlm_roberta).

BERT's layers and names (``roberta.`` instead of ``bert.``); the position ids are computed from the
input ids (``create_position_ids_from_input_ids``: positions start at ``padding_idx + 1``, so the
position table has ``max_position_embeddings`` = 514 rows in the published checkpoints), a (b, s)
int64 tensor per forward where BERT slices a buffer. No pooler: sequence classification uses
``RobertaClassificationHead`` (dropout, dense, tanh, dropout, out_proj on the <s> token), MLM
``RobertaLMHead`` (``lm_head.dense``, GELU, ``lm_head.layer_norm``, a tied decoder and its bias).
XLM-RoBERTa is the same code with another vocabulary. PEFT's default LoRA targets: query, value.
"""

from __future__ import annotations

from ..architecture import Architecture
from .encoder import BERT_NAMES, EncoderFamily, encoder_fields
from .fields import ConfigFields
from dataclasses import replace

ROBERTA_NAMES = replace(
    BERT_NAMES,
    classifier="classifier.out_proj",
    classification_dense="classifier.dense",
    mlm_transform="lm_head.dense",
    mlm_norm="lm_head.layer_norm",
    mlm_decoder="lm_head.decoder",
    mlm_bias="lm_head.bias",
    lm_head="lm_head.decoder",
)

#: RobertaConfig's defaults.
ROBERTA_DEFAULTS = dict(
    vocab_size=50265,
    hidden_size=768,
    intermediate_size=3072,
    num_hidden_layers=12,
    num_attention_heads=12,
    max_position_embeddings=512,
    type_vocab_size=2,
)
#: XLMRobertaConfig's defaults (its vocabulary default is BERT's).
XLM_ROBERTA_DEFAULTS = {**ROBERTA_DEFAULTS, "vocab_size": 30522}


class Roberta(EncoderFamily):
    model_type = "roberta"
    names = ROBERTA_NAMES
    sequence_head = "classification_head"
    has_pooler = False
    defaults = ROBERTA_DEFAULTS

    def read_config(self, fields: ConfigFields) -> Architecture:
        arch = Architecture(**encoder_fields(fields, self.defaults), positions_from_input_ids=True)
        return arch


class XLMRoberta(Roberta):
    model_type = "xlm-roberta"
    defaults = XLM_ROBERTA_DEFAULTS

"""DistilBERT (transformers/models/distilbert; Sanh et al. 2019).

BERT's post-LN layers with DistilBERT's names (``q_lin``, ``k_lin``, ``v_lin``, ``out_lin``,
``sa_layer_norm``, ``ffn.lin1``/``lin2``, ``output_layer_norm``), no token-type embeddings and no
dropout on the attention block's output (``TransformerBlock.forward``: ``sa_layer_norm(attention +
x)``); ``dropout`` applies to the embeddings and the FFN output, ``attention_dropout`` to the
attention probabilities. Config fields: ``dim``, ``n_layers``, ``n_heads``, ``hidden_dim``,
``activation``. Sequence classification: ``pre_classifier`` (h×h), ReLU, dropout
``seq_classif_dropout`` (0.2), ``classifier``; MLM: ``vocab_transform``, GELU, ``vocab_layer_norm``,
``vocab_projector`` tied to the word embeddings (with its bias). PEFT has no default LoRA targets for
distilbert (give target_modules, e.g. q_lin and v_lin).
"""

from __future__ import annotations

from dataclasses import replace

from ..architecture import Architecture
from .encoder import BERT_NAMES, EncoderFamily
from .fields import ConfigFields

DISTILBERT_NAMES = replace(
    BERT_NAMES,
    q_proj="attention.q_lin",
    k_proj="attention.k_lin",
    v_proj="attention.v_lin",
    o_proj="attention.out_lin",
    post_attention_norm="sa_layer_norm",
    intermediate="ffn.lin1",
    output="ffn.lin2",
    post_feedforward_norm="output_layer_norm",
    classifier="classifier",
    classification_dense="pre_classifier",
    mlm_transform="vocab_transform",
    mlm_norm="vocab_layer_norm",
    mlm_decoder="vocab_projector",
    mlm_bias="vocab_projector.bias",
    lm_head="vocab_projector",
)


class DistilBert(EncoderFamily):
    model_type = "distilbert"
    names = DISTILBERT_NAMES
    lora_default_targets = None
    attention_output_dropout = False
    sequence_head = "pre_classifier"
    has_pooler = False
    base_model_pooler = False

    def head_dropout(self, arch: Architecture, task: str) -> float:
        """``seq_classif_dropout`` before the sequence classifier, ``dropout`` before the token classifier."""
        return arch.residual_dropout if task == "token_classification" else arch.classifier_dropout

    def read_config(self, fields: ConfigFields) -> Architecture:
        heads = fields.integer("n_heads", 12)
        dim = fields.integer("dim", 768)
        dropout = fields.probability("dropout", 0.1)
        if fields.boolean("sinusoidal_pos_embds", False):
            raise fields.fail("sinusoidal_pos_embds", "sinusoidal position embeddings are not modelled; use false")
        return Architecture(
            model_type="distilbert",
            vocab_size=fields.integer("vocab_size", 30522),
            hidden_size=dim,
            num_hidden_layers=fields.integer("n_layers", 6, maximum=1024),
            num_attention_heads=heads,
            num_key_value_heads=heads,
            intermediate_size=fields.integer("hidden_dim", 4 * 768),
            hidden_act=fields.activation("activation", "gelu"),
            max_position_embeddings=fields.integer("max_position_embeddings", 512),
            tie_word_embeddings=fields.boolean("tie_word_embeddings", True),
            embedding_dropout=dropout,
            attention_dropout=fields.probability("attention_dropout", 0.1),
            residual_dropout=dropout,
            classifier_dropout=fields.probability("seq_classif_dropout", 0.2),
            num_labels=fields.integer("num_labels", 2),
            mlp="plain",
            norm="layernorm",
            attention_qkv_bias=True,
            attention_output_bias=True,
            mlp_bias=True,
            position_embedding="learned",
            bidirectional=True,
            embedding_norm=True,
        )

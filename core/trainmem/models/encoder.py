"""Encoders of the BERT family: the shared base of ``bert``, ``roberta``, ``xlm-roberta`` and ``distilbert``.

An :class:`EncoderFamily` is a :class:`~trainmem.models.family.DecoderFamily` whose layers attend in
both directions and norm *after* each residual add (post-LN, Devlin et al. 2019; transformers 5.24
``BertLayer``: ``LayerNorm(x + dropout(attention(x)))`` then ``LayerNorm(h + dropout(output(act(
intermediate(h)))))``), whose embeddings sum word, learned position and (BERT, RoBERTa) token-type
embeddings under a LayerNorm and dropout, and whose head is one of the task heads of
:mod:`trainmem.tasks` (``<Family>For<Task>`` in transformers). Its layer program is
:class:`EncoderLayerProgram`; the embedding and head programs are in :mod:`trainmem.heads`.

Counting rules (each checked against transformers on the meta device in tests/test_encoders.py):

  embeddings  word V×h, position P×h, token type T×h, LayerNorm 2h
  layer       q, k, v, o: h×h + h each; LayerNorm 2h; intermediate i×h + i; output h×i + h; LayerNorm 2h
  heads       pooler h×h + h (BERT sequence classification); classifier L×h + L;
              RoBERTa's classification head dense h×h + h, out_proj L×h + L; DistilBERT pre_classifier h×h + h;
              MLM transform h×h + h, LayerNorm 2h, decoder bias V (its weight is the word embeddings when tied)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from ..architecture import Architecture
from . import blocks
from .blocks import ModuleNames, ParameterTensor
from .family import DecoderFamily
from .fields import ConfigFields

if TYPE_CHECKING:
    from ..layers import LayerProgram

ENCODER_TASKS = ("sequence_classification", "token_classification", "masked_lm", "embedding")


@dataclass(frozen=True)
class EncoderNames(ModuleNames):
    """Module paths of an encoder: the layer's (relative to ``encoder.layer.N``) and the model's ends."""

    embed_token_types: str = "embeddings.token_type_embeddings"
    embedding_norm: str = "embeddings.LayerNorm"
    intermediate: str = "intermediate.dense"
    output: str = "output.dense"
    attention_prefix: str = "attention"
    """Modules under this path belong to the ``attention`` group (frozen together)."""
    pooler: str = "pooler.dense"
    classifier: str = "classifier"
    classification_dense: str = ""
    """A dense layer before the classifier (RoBERTa ``classifier.dense``, DistilBERT ``pre_classifier``)."""
    mlm_transform: str = "cls.predictions.transform.dense"
    mlm_norm: str = "cls.predictions.transform.LayerNorm"
    mlm_decoder: str = "cls.predictions.decoder"
    mlm_bias: str = "cls.predictions.bias"

    def module_paths(self) -> tuple[str, ...]:
        heads = (self.pooler, self.classifier, self.classification_dense, self.mlm_transform, self.mlm_norm, self.mlm_decoder)
        return (*super().module_paths(), self.embed_token_types, self.embedding_norm, self.intermediate, self.output, *heads)


BERT_NAMES = EncoderNames(
    embed_tokens="embeddings.word_embeddings",
    embed_positions="embeddings.position_embeddings",
    lm_head="cls.predictions.decoder",
    final_norm="embeddings.LayerNorm",
    q_proj="attention.self.query",
    k_proj="attention.self.key",
    v_proj="attention.self.value",
    o_proj="attention.output.dense",
    post_attention_norm="attention.output.LayerNorm",
    post_feedforward_norm="output.LayerNorm",
)


class EncoderFamily(DecoderFamily):
    """A BERT-style encoder (BERT's names and layout unless a subclass says otherwise)."""

    names: EncoderNames = BERT_NAMES
    tasks: tuple[str, ...] = ENCODER_TASKS
    """The heads this family has; the first is the default."""
    lora_default_targets: Optional[tuple[str, ...]] = ("query", "value")
    eager_softmax_in_fp32 = False  # BertSelfAttention's eager path: softmax in the scores' dtype
    attention_output_dropout = True
    """Dropout on the attention block's output before its residual add (BertSelfOutput; DistilBERT has none)."""
    sequence_head: str = "pooler"
    """How the sequence-classification head reads the first token: ``pooler`` (BERT: dense + tanh,
    dropout, classifier), ``classification_head`` (RoBERTa: dropout, dense, tanh, dropout, out_proj),
    ``pre_classifier`` (DistilBERT: dense, ReLU, dropout, classifier)."""
    has_pooler: bool = True
    """The sequence-classification model uses the base model's pooler (BERT's ``add_pooling_layer``)."""
    base_model_pooler: bool = True
    """``AutoModel`` builds a pooler unless told ``add_pooling_layer=False`` (BERT, RoBERTa)."""

    # ------------------------------------------------------------------ inventory
    def embedding(self, arch: Architecture) -> list[ParameterTensor]:
        h, names = arch.hidden_size, self.names
        tensors = [
            ParameterTensor(f"{names.embed_tokens}.weight", "embeddings", (arch.vocab_size, h)),
            ParameterTensor(f"{names.embed_positions}.weight", "embeddings", (arch.max_position_embeddings, h)),
        ]
        if arch.type_vocab_size:
            tensors.append(ParameterTensor(f"{names.embed_token_types}.weight", "embeddings", (arch.type_vocab_size, h)))
        tensors += blocks.norm(names.embedding_norm, arch, h)
        return tensors

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        names, h, i = self.names, arch.hidden_size, arch.intermediate_size
        return (
            blocks.attention(arch, names)
            + blocks.norm(names.post_attention_norm, arch, h)
            + blocks.linear(names.intermediate, "mlp", h, i, True)
            + blocks.linear(names.output, "mlp", i, h, True)
            + blocks.norm(names.post_feedforward_norm, arch, h)
        )

    def head(self, arch: Architecture) -> list[ParameterTensor]:
        names, h, labels, task = self.names, arch.hidden_size, arch.num_labels, arch.task
        if task == "sequence_classification":
            dense = {"pooler": names.pooler, "classification_head": names.classification_dense,
                     "pre_classifier": names.classification_dense}[self.sequence_head]
            return blocks.linear(dense, "lm_head", h, h, True) + blocks.linear(names.classifier, "lm_head", h, labels, True)
        if task == "token_classification":
            return blocks.linear(names.classifier, "lm_head", h, labels, True)
        if task == "masked_lm":
            tensors = blocks.linear(names.mlm_transform, "lm_head", h, h, True) + blocks.norm(names.mlm_norm, arch, h)
            if not arch.tie_word_embeddings:  # untied, the decoder keeps its own weight and bias (measured on meta)
                tensors.append(
                    ParameterTensor(f"{names.mlm_decoder}.weight", "lm_head", (arch.vocab_size, h), (h, arch.vocab_size))
                )
                tensors.append(ParameterTensor(f"{names.mlm_decoder}.bias", "lm_head", (arch.vocab_size,)))
            tensors.append(ParameterTensor(names.mlm_bias, "lm_head", (arch.vocab_size,)))
            return tensors
        return []  # embedding: the bare encoder, mean-pooled

    def quantized_by_bitsandbytes(self, tensor: ParameterTensor) -> bool:
        """``replace_with_bnb_linear`` swaps the encoder's ``nn.Linear`` modules; the task head is kept
        (``modules_to_not_convert``: the classifier is the output layer)."""
        return tensor.linear_features is not None and tensor.group != "lm_head"

    def head_dropout(self, arch: Architecture, task: str) -> float:
        """The dropout before the classifier: ``classifier_dropout`` (or ``hidden_dropout_prob``)."""
        return arch.classifier_dropout

    # ------------------------------------------------------------------ the tape
    def program(self) -> type[LayerProgram]:
        from ..heads import EncoderLayerProgram

        return EncoderLayerProgram

    def trace_embedding(self, arch, shape, kernels, trainability, parameter_grads_exist=False, token_grad_exists=False,
                        checkpointing="none"):
        """The embeddings on the tape (``heads.trace_encoder_embedding``; DeBERTa has its own)."""
        from ..heads import trace_encoder_embedding

        return trace_encoder_embedding(arch, shape, kernels, trainability, parameter_grads_exist, token_grad_exists)


def encoder_fields(fields: ConfigFields, defaults: dict[str, object]) -> dict[str, object]:
    """BertConfig-style fields (BERT, RoBERTa, XLM-RoBERTa) with the family's class defaults."""
    heads = fields.integer("num_attention_heads", defaults["num_attention_heads"])
    hidden_dropout = fields.probability("hidden_dropout_prob", 0.1)
    classifier_dropout = fields.optional_number("classifier_dropout", minimum=0.0, maximum=1.0)
    if classifier_dropout is not None and classifier_dropout >= 1.0:
        raise fields.fail("classifier_dropout", f"must be below 1, got {classifier_dropout}")
    return {
        "model_type": fields.string("model_type"),
        "vocab_size": fields.integer("vocab_size", defaults["vocab_size"]),
        "hidden_size": fields.integer("hidden_size", defaults["hidden_size"]),
        "num_hidden_layers": fields.layers(defaults["num_hidden_layers"]),
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "intermediate_size": fields.integer("intermediate_size", defaults["intermediate_size"]),
        "hidden_act": fields.activation("hidden_act", "gelu"),
        "max_position_embeddings": fields.integer("max_position_embeddings", defaults["max_position_embeddings"]),
        "type_vocab_size": fields.integer("type_vocab_size", defaults["type_vocab_size"], minimum=0),
        "tie_word_embeddings": fields.boolean("tie_word_embeddings", True),
        "embedding_dropout": hidden_dropout,
        "attention_dropout": fields.probability("attention_probs_dropout_prob", 0.1),
        "residual_dropout": hidden_dropout,
        "classifier_dropout": hidden_dropout if classifier_dropout is None else classifier_dropout,
        "num_labels": _num_labels(fields),
        "mlp": "plain",
        "norm": "layernorm",
        "attention_qkv_bias": True,
        "attention_output_bias": True,
        "mlp_bias": True,
        "position_embedding": "learned",
        "bidirectional": True,
        "embedding_norm": True,
    }


def _num_labels(fields: ConfigFields) -> int:
    """``num_labels`` of the config (PretrainedConfig: ``len(id2label)``, default 2)."""
    if fields.config.get("num_labels") is not None:
        return fields.integer("num_labels", 2)
    id2label = fields.mapping("id2label")
    return len(id2label) if id2label else 2

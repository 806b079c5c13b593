"""DeBERTa-v2 and DeBERTa-v3 (``model_type: deberta-v2``; transformers 5.24 models/deberta_v2; He et al.
2021 "DeBERTa: Decoding-enhanced BERT with Disentangled Attention", He et al. 2023 "DeBERTaV3").

BERT's post-LN layer (``DebertaV2Layer``: attention, ``output.dense``, dropout, ``LayerNorm(· + x)``;
``intermediate.dense``, GELU, ``output.dense``, dropout, ``LayerNorm(· + h)``) with disentangled
self-attention in place of BERT's (``DisentangledSelfAttention``):

* ``query_proj``, ``key_proj``, ``value_proj`` (h×h with biases), each reshaped heads-first by
  ``transpose_for_scores`` (``.contiguous()``: a copy); the scores are ``bmm(q, kᵀ / sqrt(d·f))``
  with ``f = 1 + [c2p] + [p2c]``;
* the relative embeddings ``encoder.rel_embeddings`` (2·span rows, span = ``position_buckets`` when
  > 0, else ``max_relative_positions``, else ``max_position_embeddings``), normed once per forward by
  ``encoder.LayerNorm`` when ``norm_rel_ebd`` has ``layer_norm`` and shared by every layer; each
  layer drops them out (``pos_dropout``, ``hidden_dropout_prob``) and projects them with
  ``query_proj``/``key_proj`` (``share_att_key``, DeBERTa-v3) or ``pos_query_proj``/``pos_key_proj``,
  repeated over the batch (``.repeat``: (b·a, 2·span, d) copies);
* c2p: ``bmm(q, pos_kᵀ)`` (b·a, s, 2·span), gathered at the clamped bucketed relative positions into
  (b·a, s, s) (``GatherBackward0`` saves its input and the (s, s) int64 index: measured with saved-tensor
  hooks, torch 2.13), divided by the scale; p2c the same from ``bmm(k, pos_qᵀ)``,
  transposed; both added to the scores;
* ``masked_fill(~mask, finfo.min)`` with the (b, 1, s, s) mask ``get_attention_mask`` builds once per
  forward (fp32, from ``torch.ones(input_shape)`` when no attention mask is given), softmax in the
  scores' dtype, dropout, ``bmm`` with v, the heads merged back (a contiguous copy).

DeBERTa has no SDPA or flash-attention path in transformers 5.24 (``DebertaV2PreTrainedModel`` does not
declare ``_supports_sdpa``): whatever attention is asked for, this eager path runs, and trainmem models it.

Embeddings (``DebertaV2Embeddings``): word embeddings of ``embedding_size`` (default hidden_size), the
absolute position table only when ``position_biased_input`` (DeBERTa-v3: false, then a
``zeros_like`` stand-in lives for the forward), token types when ``type_vocab_size`` > 0 (v3: 0),
``embed_proj`` (E→h, no bias) when E ≠ h, LayerNorm, ``* mask`` (the fp32 ones), dropout.

Heads: sequence classification through ``ContextPooler`` (``hidden[:, 0]``, dropout ``pooler_dropout``,
``dense`` h×h, ``pooler_hidden_act``), dropout (``cls_dropout``, else ``hidden_dropout_prob``) and
``classifier``; with int64 labels and no ``problem_type`` the loss gathers the rows with a label
(``(labels >= 0).nonzero()``) and upcasts them (``.float()``). Token classification: dropout
(``hidden_dropout_prob``), ``classifier``. Masked LM: the legacy head (``legacy: true``, the default)
``cls.predictions.transform.dense`` (h→E), GELU, LayerNorm(E), the decoder tied to the word embeddings
and ``cls.predictions.bias``; ``legacy: false`` uses ``lm_predictions.lm_head`` (dense h×h, LayerNorm,
``matmul(x, Wᵀ) + bias``, a second (b·s, V) tensor).

Not modelled (refused with one line): ``conv_kernel_size`` > 0 (the ``ConvLayer`` after layer 0 of
DeBERTa-v2 xlarge/xxlarge) and ``z_steps``. PEFT's default LoRA targets: query_proj, value_proj.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..architecture import Architecture
from ..disentangled import DisentangledAttention
from ..heads import EncoderLayerProgram
from ..layers import LayerKernels, LayerProgram, LayerShape, Trace, Trainability, replay
from ..tape import Sym, Tape
from . import blocks
from .blocks import ParameterTensor
from .encoder import BERT_NAMES, EncoderFamily, EncoderNames, _num_labels
from .fields import ConfigFields


@dataclass(frozen=True)
class DebertaNames(EncoderNames):
    """DeBERTa's module paths (layer-relative ones under ``encoder.layer.N``)."""

    pos_key_proj: str = "attention.self.pos_key_proj"
    pos_query_proj: str = "attention.self.pos_query_proj"
    rel_embeddings: str = "encoder.rel_embeddings"
    rel_embedding_norm: str = "encoder.LayerNorm"
    embed_proj: str = "embeddings.embed_proj"
    lm_dense: str = "lm_predictions.lm_head.dense"
    lm_norm: str = "lm_predictions.lm_head.LayerNorm"
    lm_bias: str = "lm_predictions.lm_head.bias"

    def module_paths(self) -> tuple[str, ...]:
        extra = (self.pos_key_proj, self.pos_query_proj, self.rel_embeddings, self.rel_embedding_norm,
                 self.embed_proj, self.lm_dense, self.lm_norm)
        return (*super().module_paths(), *extra)


DEBERTA_NAMES = DebertaNames(
    **{
        **BERT_NAMES.__dict__,
        "q_proj": "attention.self.query_proj",
        "k_proj": "attention.self.key_proj",
        "v_proj": "attention.self.value_proj",
        "pooler": "pooler.dense",
        "classifier": "classifier",
    }
)

#: DebertaV2Config's defaults (those of microsoft/deberta-v2-xlarge, less its relative attention).
DEBERTA_V2_DEFAULTS = dict(
    vocab_size=128100,
    hidden_size=1536,
    num_hidden_layers=24,
    num_attention_heads=24,
    intermediate_size=6144,
    max_position_embeddings=512,
    type_vocab_size=0,
)


def _position_attention_types(fields: ConfigFields) -> set[str]:
    """``pos_att_type``: a list, or a ``"p2c|c2p"`` string (``DebertaV2Config.__post_init__``)."""
    raw = fields.config.get("pos_att_type")
    if raw is None:
        return set()
    if isinstance(raw, str):
        kinds = [part.strip() for part in raw.lower().split("|") if part.strip()]
    else:
        kinds = fields.string_list("pos_att_type")
    unknown = sorted(set(kinds) - {"c2p", "p2c"})
    if unknown:
        raise fields.fail("pos_att_type", f"unknown attention type {unknown[0]!r}; allowed: c2p, p2c")
    return set(kinds)


def read_disentangled(fields: ConfigFields, hidden_size: int, max_positions: int, hidden_act: str) -> DisentangledAttention:
    """The DisentangledSelfAttention / DebertaV2Encoder settings of a ``deberta-v2`` config."""
    relative = fields.boolean("relative_attention", False)
    buckets = fields.integer("position_buckets", -1, minimum=-(2**31))
    max_relative = fields.integer("max_relative_positions", -1, minimum=-(2**31))
    span = max_relative if max_relative >= 1 else max_positions
    if buckets > 0:
        span = buckets
    norm_rel = fields.string("norm_rel_ebd", "none")
    conv = fields.integer("conv_kernel_size", 0, minimum=0)
    if conv > 0:
        raise fields.fail(
            "conv_kernel_size",
            f"the ConvLayer after layer 0 (DeBERTa-v2 xlarge/xxlarge) is not modelled; got {conv}, DeBERTa-v3 configs have 0",
        )
    if fields.integer("z_steps", 0, minimum=0) > 1:
        raise fields.fail("z_steps", "the enhanced mask decoder's extra steps are not modelled; use 0")
    if fields.has("attention_head_size"):
        raise fields.fail("attention_head_size", "a head size other than hidden_size / num_attention_heads is not modelled")
    kinds = _position_attention_types(fields)
    return DisentangledAttention(
        relative_attention=relative,
        attention_span=span,
        c2p=relative and "c2p" in kinds,
        p2c=relative and "p2c" in kinds,
        share_att_key=fields.boolean("share_att_key", False),
        rel_embedding_norm=relative and "layer_norm" in [x.strip() for x in norm_rel.lower().split("|")],
        position_biased_input=fields.boolean("position_biased_input", True),
        embedding_size=fields.integer("embedding_size", hidden_size),
        pooler_dropout=fields.probability("pooler_dropout", 0.0),
        pooler_hidden_act=fields.string("pooler_hidden_act", "gelu"),
        legacy_mlm_head=fields.boolean("legacy", True),
        conv_kernel_size=conv,
    )


class DebertaV2(EncoderFamily):
    model_type = "deberta-v2"
    names = DEBERTA_NAMES
    lora_default_targets = ("query_proj", "value_proj")  # peft 0.21 constants.py: "deberta-v2"
    sequence_head = "context_pooler"
    has_pooler = True  # ContextPooler, built by the sequence-classification model only
    base_model_pooler = False  # DebertaV2Model has no pooler
    encoder_keeps_layer_outputs = True
    """``DebertaV2Model.forward`` calls its encoder with ``output_hidden_states=True``: ``all_hidden_states`` keeps
    every layer's output until the base model returns (measured: deberta-v3-base, one b·s·h fp32 tensor per layer)."""
    embedding_output_freed_before_head = True
    """``DebertaV2For<Task>`` runs its head (``ContextPooler``, the classifier, the MLM head) on ``outputs[0]`` after
    ``DebertaV2Model.forward`` returned: the embedding output, the expanded attention mask and the normalised
    relative embeddings are gone by then (measured, torch 2.13 CPU: AMP bf16 sequence classification)."""

    def unsupported_attention(self, attention: str, device: str, compute_dtype: str = "bf16") -> Optional[str]:
        """transformers 5.24 has only DeBERTa's own eager attention: ``sdpa`` (trainmem's default, which
        ``from_pretrained`` without ``attn_implementation`` resolves to eager here) and ``sdpa-math`` run
        the eager path; flash-attention is refused by transformers and here."""
        if attention == "flash_attention_2":
            return "deberta-v2 has no flash-attention path in transformers 5.24 (only its eager attention); use eager"
        return None

    # ------------------------------------------------------------------ config
    def read_config(self, fields: ConfigFields) -> Architecture:
        d = DEBERTA_V2_DEFAULTS
        heads = fields.integer("num_attention_heads", d["num_attention_heads"])
        hidden = fields.integer("hidden_size", d["hidden_size"])
        max_positions = fields.integer("max_position_embeddings", d["max_position_embeddings"])
        hidden_act = fields.activation("hidden_act", "gelu")
        hidden_dropout = fields.probability("hidden_dropout_prob", 0.1)
        cls_dropout = fields.optional_number("cls_dropout", minimum=0.0, maximum=1.0)
        if cls_dropout is not None and cls_dropout >= 1.0:
            raise fields.fail("cls_dropout", f"must be below 1, got {cls_dropout}")
        disentangled = read_disentangled(fields, hidden, max_positions, hidden_act)
        return Architecture(
            model_type="deberta-v2",
            vocab_size=fields.integer("vocab_size", d["vocab_size"]),
            hidden_size=hidden,
            num_hidden_layers=fields.layers(d["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=heads,
            intermediate_size=fields.integer("intermediate_size", d["intermediate_size"]),
            hidden_act=hidden_act,
            max_position_embeddings=max_positions,
            type_vocab_size=fields.integer("type_vocab_size", d["type_vocab_size"], minimum=0),
            tie_word_embeddings=fields.boolean("tie_word_embeddings", True),
            embedding_dropout=hidden_dropout,
            attention_dropout=fields.probability("attention_probs_dropout_prob", 0.1),
            residual_dropout=hidden_dropout,
            classifier_dropout=hidden_dropout if cls_dropout is None else cls_dropout,
            num_labels=_num_labels(fields),
            mlp="plain",
            norm="layernorm",
            attention_qkv_bias=True,
            attention_output_bias=True,
            mlp_bias=True,
            position_embedding="learned",
            bidirectional=True,
            embedding_norm=True,
            disentangled=disentangled,
        )

    # ------------------------------------------------------------------ inventory
    def embedding(self, arch: Architecture) -> list[ParameterTensor]:
        names, h, dis = self.names, arch.hidden_size, arch.disentangled
        e = dis.embedding_size
        tensors = [ParameterTensor(f"{names.embed_tokens}.weight", "embeddings", (arch.vocab_size, e))]
        if dis.position_biased_input:
            tensors.append(ParameterTensor(f"{names.embed_positions}.weight", "embeddings", (arch.max_position_embeddings, e)))
        if arch.type_vocab_size:
            tensors.append(ParameterTensor(f"{names.embed_token_types}.weight", "embeddings", (arch.type_vocab_size, e)))
        if e != h:
            tensors += blocks.linear(names.embed_proj, "embeddings", e, h, False)
        tensors += blocks.norm(names.embedding_norm, arch, h)
        if dis.relative_attention:  # DebertaV2Encoder: shared by every layer
            tensors.append(ParameterTensor(f"{names.rel_embeddings}.weight", "embeddings", (dis.relative_rows, h)))
            if dis.rel_embedding_norm:
                tensors += blocks.norm(names.rel_embedding_norm, arch, h)
        return tensors

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        names, h, dis = self.names, arch.hidden_size, arch.disentangled
        tensors = super().layer(arch)
        if dis.relative_attention and not dis.share_att_key:
            if dis.c2p:
                tensors += blocks.linear(names.pos_key_proj, "attention", h, h, True)
            if dis.p2c:
                tensors += blocks.linear(names.pos_query_proj, "attention", h, h, True)
        return tensors

    def head(self, arch: Architecture) -> list[ParameterTensor]:
        names, h, task, dis = self.names, arch.hidden_size, arch.task, arch.disentangled
        if task == "masked_lm" and dis.legacy_mlm_head:
            e = dis.embedding_size
            tensors = blocks.linear(names.mlm_transform, "lm_head", h, e, True) + blocks.norm(names.mlm_norm, arch, e)
            if not arch.tie_word_embeddings:
                tensors.append(ParameterTensor(f"{names.mlm_decoder}.weight", "lm_head", (arch.vocab_size, e), (e, arch.vocab_size)))
                tensors.append(ParameterTensor(f"{names.mlm_decoder}.bias", "lm_head", (arch.vocab_size,)))  # untied: its own
            return tensors + [ParameterTensor(names.mlm_bias, "lm_head", (arch.vocab_size,))]
        if task == "masked_lm":  # lm_predictions.lm_head: matmul with the word embeddings, whatever the tying
            tensors = blocks.linear(names.lm_dense, "lm_head", h, h, True) + blocks.norm(names.lm_norm, arch, h)
            return tensors + [ParameterTensor(names.lm_bias, "lm_head", (arch.vocab_size,))]
        if task == "sequence_classification":
            return blocks.linear(names.pooler, "lm_head", h, h, True) + blocks.linear(names.classifier, "lm_head", h, arch.num_labels, True)
        return super().head(arch)

    def head_dropout(self, arch: Architecture, task: str) -> float:
        """``cls_dropout`` (else ``hidden_dropout_prob``) before the sequence classifier;
        ``hidden_dropout_prob`` before the token classifier."""
        return arch.residual_dropout if task == "token_classification" else arch.classifier_dropout

    # ------------------------------------------------------------------ the tape
    def program(self) -> type[LayerProgram]:
        return DebertaLayerProgram

    def trace_embedding(self, arch, shape, kernels, trainability, parameter_grads_exist=False, token_grad_exists=False,
                        checkpointing="none") -> Trace:
        return trace_deberta_embedding(
            arch, shape, kernels, trainability, parameter_grads_exist, token_grad_exists, checkpointing == "full"
        )


# ---------------------------------------------------------------------- the relative embeddings
def relative_embeddings_dtype(arch: Architecture, kernels: LayerKernels) -> str:
    """The dtype of ``get_rel_embedding()``'s result: the table's, or what its LayerNorm returns under autocast."""
    if not arch.disentangled.rel_embedding_norm:
        return kernels.weight_dtype
    scratch = Tape(device=kernels.device, autocast=kernels.autocast)
    weight = Sym(1, kernels.weight_dtype, True, "parameter")
    return scratch.layer_norm(Sym(1, kernels.weight_dtype, True, "parameter"), 1, weight, weight).dtype


def relative_embeddings_train(arch: Architecture, trainability: Trainability) -> bool:
    names = DEBERTA_NAMES
    norm_trains = arch.disentangled.rel_embedding_norm and trainability.trains(names.rel_embedding_norm)
    return trainability.trains(names.rel_embeddings) or bool(norm_trains)


def relative_embeddings_saved_by_layers(arch: Architecture, kernels: LayerKernels, trainability: Trainability) -> bool:
    """Whether the layers' projections save ``get_rel_embedding()``'s tensor itself: only when no
    ``pos_dropout`` copies it and no autocast cast replaces it, and a projection's weight trains."""
    dis, names = arch.disentangled, DEBERTA_NAMES
    if not dis.relative_attention or arch.residual_dropout > 0 or kernels.autocast is not None:
        return False
    if kernels.lora_rank:
        return False  # the frozen base projections save nothing (the adapter's fp32 cast is its own tensor)
    modules = [names.q_proj, names.k_proj] if dis.share_att_key else [names.pos_query_proj, names.pos_key_proj]
    return any(trainability.trains(m) for m in modules)


def trace_deberta_embedding(
    arch: Architecture,
    shape: LayerShape,
    kernels: LayerKernels,
    trainability: Trainability,
    parameter_grads_exist: bool = False,
    token_grad_exists: bool = False,
    layers_checkpointed: bool = False,
) -> Trace:
    """``DebertaV2Embeddings.forward`` and what ``DebertaV2Encoder.forward`` makes before its layers.

    Embeddings: word embeddings, position embeddings (or ``zeros_like``), token types, ``embed_proj``,
    LayerNorm, ``* mask`` (MulBackward saves the mask), dropout. Then, once per forward: the (b, 1, s, s)
    attention mask (``get_attention_mask``: ``m.unsqueeze(1).unsqueeze(2) * m[..., None]``, fp32), the
    (1, s, s) int64 bucketed relative positions (``build_relative_position``; the temporaries of
    ``make_log_bucket_position`` are not modelled) and ``get_rel_embedding()``: the relative table through
    ``encoder.LayerNorm``. These live until the forward returns (the embedding output's lifetime); with
    full checkpointing every checkpointed layer keeps them as its inputs, so they live until layer 0's
    backward (measured: -3.0% before, torch.utils.checkpoint saving the layer's tensor arguments)."""
    names, dis = DEBERTA_NAMES, arch.disentangled
    tape = Tape(device=kernels.device, autocast=kernels.autocast)
    tokens, h, seq, batch = shape.stream_tokens, shape.hidden, shape.seq, shape.batch
    e, dtype = dis.embedding_size, kernels.weight_dtype

    def table(module: str, numel: int, external: bool = False) -> Sym:
        return Sym(numel, dtype, trainability.trains(module), "external" if external else "parameter")

    mask = tape.new(tokens, "fp32", False)  # DebertaV2Model.forward: torch.ones(input_shape)
    words_weight = table(names.embed_tokens, arch.vocab_size * e, token_grad_exists)
    words = tape.new(tokens * e, dtype, words_weight.requires_grad)
    tape.record("embedding", [Sym(tokens, "int64", False, "external")], [words_weight], [words])
    locals_ = [words]
    total = words
    if dis.position_biased_input:
        position_weight = table(names.embed_positions, arch.max_position_embeddings * e)
        positions = tape.new(seq * e, dtype, position_weight.requires_grad)
        tape.record("embedding", [Sym(seq, "int64", False, "external")], [position_weight], [positions])
        total = tape.add(total, positions)
        locals_ += [positions, total]
    else:
        locals_.append(tape.new(tokens * e, dtype, False))  # torch.zeros_like(inputs_embeds)
    if arch.type_vocab_size:
        type_ids = tape.new(tokens, "int64", False)  # DebertaV2Model.forward: torch.zeros(input_shape, long)
        type_weight = table(names.embed_token_types, arch.type_vocab_size * e)
        types = tape.new(tokens * e, dtype, type_weight.requires_grad)
        tape.record("embedding", [type_ids], [type_weight], [types])
        summed = tape.add(total, types)
        locals_ += [type_ids, types, summed]
        total = summed
    if e != h:
        projected = tape.linear(total, table(names.embed_proj, e * h), h)
        locals_.append(projected)
        total = projected
    normed = tape.layer_norm(total, tokens, table(names.embedding_norm, h), table(names.embedding_norm, h))
    mask_cast = tape.to(mask, normed.dtype)
    masked = tape.mul(normed, mask_cast)
    tape.release(normed)
    if mask_cast is not mask:
        tape.release(mask_cast)
    dropped = tape.dropout(masked, arch.embedding_dropout)
    if dropped is not masked:
        tape.release(masked)
    tape.release(*locals_)
    outputs = [dropped]
    if dis.relative_attention:
        layer_inputs = [
            tape.new(batch * seq * seq, "fp32", False),  # get_attention_mask: (b, 1, s, s) in the mask's dtype
            tape.new(seq * seq, "int64", False),  # relative_pos (1, s, s)
        ]
        rel_weight = table(names.rel_embeddings, dis.relative_rows * h)
        rel = rel_weight
        if dis.rel_embedding_norm:
            rel = tape.layer_norm(rel_weight, dis.relative_rows, table(names.rel_embedding_norm, h), table(names.rel_embedding_norm, h))
            layer_inputs.append(rel)
        if layers_checkpointed and dropped.requires_grad:
            kept = dropped.view()
            tape.record("checkpointed_layer_inputs", layer_inputs, [dropped], [kept])  # freed at layer 0's backward
            outputs = [kept]
        if rel.requires_grad and rel is not rel_weight:
            if relative_embeddings_saved_by_layers(arch, kernels, trainability) and not layers_checkpointed:
                read = rel.view()
                tape.record("read_by_layers", [rel], [rel], [read])  # stands for the layers' projections
                outputs.append(read)
            else:
                outputs.append(rel)
    saved = tape.saved_bytes(("activation",))
    return replay(tape, outputs, tape.peak_live_bytes, tape.live_bytes() - saved, False, parameter_grads_exist)


# ---------------------------------------------------------------------- the layer
class DebertaLayerProgram(EncoderLayerProgram):
    """``DebertaV2Layer.forward``: BERT's post-LN layer around ``DisentangledSelfAttention``."""

    def _heads_first(self, projected: Sym) -> Sym:
        """``transpose_for_scores``: view, permute, ``.contiguous()`` (a copy), view."""
        out = self.tape.copy(projected)
        self.tape.release(projected)
        return out

    def attention(self, x: Sym) -> Sym:
        arch, shape, tape, names, dis = self.arch, self.shape, self.tape, self.names, self.arch.disentangled
        h, tokens, batch, heads, seq = shape.hidden, shape.tokens, shape.batch, shape.heads, shape.seq
        bias = True
        q = self._heads_first(self.linear(names.q_proj, x, h, h, bias))
        k = self._heads_first(self.linear(names.k_proj, x, h, h, bias))
        v = self._heads_first(self.linear(names.v_proj, x, h, h, bias))
        square = batch * heads * seq * seq
        k_scaled = tape.scale(k)  # key_layer.transpose(-1, -2) / scale: DivBackward saves the 0-dim scale only
        scores = tape.matmul(q, k_scaled, square)
        tape.release(k_scaled)
        # Python locals hold ``rel_att`` and the masked scores until forward returns (measured: both are
        # alive at the softmax's dropout, torch 2.13 CPU); the bmm scores and their sum are rebound and freed.
        lingering: list[Sym] = []
        if dis.relative_attention and (dis.c2p or dis.p2c):
            bias_scores = self._relative_bias(q, k)
            total = tape.add(scores, bias_scores)
            tape.release(scores)
            lingering.append(bias_scores)
            scores = total
        mask = tape.new(batch * seq * seq, "bool", False)  # attention_mask.bool()
        inverted = tape.new(batch * seq * seq, "bool", False)  # ~attention_mask
        filled = tape.new(scores.numel, scores.dtype, scores.requires_grad)
        tape.record("masked_fill", [inverted], [scores], [filled])
        tape.release(scores)
        keep_dtype = filled.dtype if tape.device == "cpu" else None  # CPU autocast leaves softmax in bf16
        probs = tape.unary_saving_result("softmax", filled, dtype=keep_dtype)
        tape.release(inverted)
        lingering.append(filled)
        dropped = tape.dropout(probs, arch.attention_dropout)
        context = tape.matmul(dropped, v, q.numel)
        tape.release(probs, dropped)
        merged = tape.copy(context)  # permute(0, 2, 1, 3).contiguous()
        tape.release(context, mask, q, k, v, *lingering)
        projected = self.linear(names.o_proj, merged, h, h, arch.attention_output_bias)
        tape.release(merged)
        return projected

    def _relative_bias(self, q: Sym, k: Sym) -> Sym:
        """``disentangled_attention_bias``: c2p and p2c scores gathered at the relative positions."""
        arch, shape, tape, names, dis = self.arch, self.shape, self.tape, self.names, self.arch.disentangled
        h, batch, heads, seq = shape.hidden, shape.batch, shape.heads, shape.seq
        rows = dis.relative_rows
        square = batch * heads * seq * seq
        rel = Sym(rows * h, relative_embeddings_dtype(arch, self.kernels), relative_embeddings_train(arch, self.trainability), "external")
        dropped = tape.dropout(rel, arch.residual_dropout)  # pos_dropout

        def positional(module: str) -> Sym:
            one = self._heads_first(self.linear(module, dropped, h, h, True))  # (heads, rows, d)
            repeated = tape.copy(one, batch * one.numel)  # .repeat(b, 1, 1)
            tape.release(one)
            return repeated

        pos_query = pos_key = None
        if dis.share_att_key:
            pos_query, pos_key = positional(names.q_proj), positional(names.k_proj)
        else:
            if dis.c2p:
                pos_key = positional(names.pos_key_proj)
            if dis.p2c:
                pos_query = positional(names.pos_query_proj)
        score = None
        for kind, content, position in (("c2p", q, pos_key), ("p2c", k, pos_query)):
            if not getattr(dis, kind):
                continue
            raw = tape.matmul(content, position, batch * heads * seq * rows)
            index = tape.new(seq * seq, "int64", False)  # clamp(±relative_pos + span, 0, 2·span - 1)
            gathered = tape.new(square, raw.dtype, raw.requires_grad)
            tape.record("gather", [raw, index], [raw], [gathered])  # GatherBackward0 saves self and the index
            tape.release(raw, index)
            divided = tape.scale(gathered)  # / scale
            tape.release(gathered)
            if score is None:
                score = tape.scale(divided)  # score = 0; score += ...: 0 + tensor, a new tensor
            else:
                summed = score.view()  # score += p2c: in place, the same storage
                tape.record("add_", [], [score, divided], [summed])
                score = summed
            tape.release(divided)
        tape.release(*(t for t in (pos_query, pos_key) if t is not None))
        if dropped is not rel:
            tape.release(dropped)
        return score

    # ------------------------------------------------------------------ the heads
    def task_head(self, x: Sym) -> Sym:
        arch, task = self.arch, self.arch.task
        if task == "sequence_classification":
            return self._context_pooler_head(x)
        if task == "masked_lm" and not arch.disentangled.legacy_mlm_head:
            return self._lm_predictions(x)
        return super().task_head(x)

    def _context_pooler_head(self, x: Sym) -> Sym:
        """``ContextPooler`` (``x[:, 0]``, dropout, dense, act), dropout, ``classifier``; the loss on the
        labelled rows (``torch.gather(logits, 0, label_index.expand(...))``) upcast with ``.float()``."""
        arch, shape, tape, names, dis = self.arch, self.shape, self.tape, self.names, self.arch.disentangled
        h, batch, labels = shape.hidden, shape.batch, arch.num_labels
        first = x.view(batch * h)
        pooled_in = tape.dropout(first, dis.pooler_dropout)
        dense = self.head_linear(pooled_in, h, h, names.pooler)
        if pooled_in is not first:
            tape.release(pooled_in)
        activated = tape.unary_saving_input(dis.pooler_hidden_act, dense)
        tape.release(dense)
        dropped = tape.dropout(activated, arch.classifier_dropout)
        if dropped is not activated:
            tape.release(activated)
        logits = self.head_linear(dropped, h, labels, names.classifier)
        tape.release(dropped)
        label_index = tape.new(batch, "int64", False)  # (labels >= 0).nonzero(): (b, 1)
        labelled = tape.new(batch * labels, logits.dtype, logits.requires_grad)
        tape.record("gather", [logits, label_index], [logits], [labelled])  # GatherBackward0 saves self too
        tape.release(logits, label_index)
        upcast = tape.to(labelled, "fp32")
        if upcast is not labelled:
            tape.release(labelled)
        loss = self._cross_entropy(upcast, batch)
        tape.release(upcast)
        return loss

    def _lm_predictions(self, x: Sym) -> Sym:
        """``DebertaV2LMPredictionHead``: dense, act, LayerNorm, ``matmul(x, word_embeddings.weight.t()) + bias``."""
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        h, tokens = shape.hidden, shape.tokens
        dense = self.head_linear(x, h, h, names.lm_dense)
        activated = tape.unary_saving_input(arch.hidden_act, dense)
        tape.release(dense)
        weight, bias = self.head_parameter(h, names.lm_norm), self.head_parameter(h, names.lm_norm)
        normed = tape.layer_norm(activated, tokens, weight, bias)
        tape.release(activated)
        words = Sym(arch.vocab_size * h, self.kernels.weight_dtype, self.trainability.trains(names.embed_tokens), "parameter")
        raw = tape.matmul(normed, words, tokens * arch.vocab_size)
        tape.release(normed)
        logits = tape.add(raw, self.head_parameter(arch.vocab_size, names.lm_bias))
        tape.release(raw)
        loss = self._cross_entropy(logits, tokens)
        tape.release(logits)
        return loss

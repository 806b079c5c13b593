"""ModernBERT (``ModernBertFor<Task>``, transformers 5.24 models/modernbert; Warner et al. 2024).

A pre-LN encoder without biases (``attention_bias``, ``mlp_bias``, ``norm_bias`` all false by
default), with:

* embeddings ``drop(norm(tok_embeddings(ids)))``: no position or token-type table (RoPE instead);
* layers ``x + Wo(attn(attn_norm(x)))`` then ``x + mlp(mlp_norm(x))``, where layer 0's ``attn_norm`` is
  an ``nn.Identity`` (``ModernBertEncoderLayer.__init__``); one fused ``Wqkv`` projection (h → 3h,
  viewed and unbound into q, k, v); RoPE applied in fp32 (``apply_rotary_pos_emb``: ``q.float()``,
  cast back), with ``global_rope_theta`` on global layers and ``local_rope_theta`` on local ones
  (one cos/sin table per layer type, :attr:`Architecture.rope_sets` = 2);
* every ``global_attn_every_n_layers``-th layer (0, 3, 6, ...) attends globally, the others over a
  sliding window of ``local_attention`` tokens (± ``local_attention // 2``:
  ``config.sliding_window``), which transformers passes SDPA as a boolean mask once the sequence
  reaches the half window (``_ignore_bidirectional_mask_sdpa``);
* a GeGLU MLP: ``Wi`` (h → 2i), ``input, gate = chunk(2)``, ``Wo(drop(act(input) * gate))``;
* ``final_norm`` after the last layer, then the task head: ``ModernBertPredictionHead`` (``dense``
  h×h, ``classifier_activation``, ``norm``) for every task; sequence classification pools the
  first token (``classifier_pooling: cls``) or the mean over the sequence (``mean``, the published
  checkpoints' setting), then dropout and ``classifier`` (h → labels, with a bias); token
  classification runs the head on every token; masked LM adds ``decoder`` (tied to the token
  embeddings, with a bias when ``decoder_bias``), and its loss upcasts the logits to fp32
  (``ForMaskedLMLoss``: ``logits.float()``).

What runs is transformers 5.24's padded path, SDPA on the (b, s) batch (the CPU path trainmem
measures). With ``attn_implementation="flash_attention_2"`` on CUDA the sliding window is a
kernel argument, so no (s × s) mask exists and the fused kernel saves only q, k, v, the output and
the log-sum-exp: trainmem models that as the fused kernel without a mask (an assumption, not
measured here). Older transformers (4.48–4.5x) unpadded the batch for flash-attention; 5.24 does not.
PEFT has no default LoRA targets for modernbert (give target_modules, e.g. Wqkv, Wo, Wi).
"""

from __future__ import annotations

from dataclasses import replace

from ..architecture import Architecture
from ..heads import EncoderLayerProgram
from ..layers import LayerProgram
from ..tape import Sym
from . import blocks
from .blocks import ParameterTensor
from .encoder import BERT_NAMES, EncoderFamily, _num_labels
from .fields import ConfigFields

MODERNBERT_NAMES = replace(
    BERT_NAMES,
    embed_tokens="embeddings.tok_embeddings",
    embed_positions="",
    embedding_norm="embeddings.norm",
    input_norm="attn_norm",
    qkv_proj="attn.Wqkv",
    o_proj="attn.Wo",
    post_attention_norm="mlp_norm",
    mlp="mlp",
    gate_up_proj="Wi",
    down_proj="Wo",
    intermediate="mlp.Wi",
    output="mlp.Wo",
    attention_prefix="attn",
    final_norm="final_norm",
    lm_head="decoder",
    pooler="head.dense",
    classifier="classifier",
    mlm_transform="head.dense",
    mlm_norm="head.norm",
    mlm_decoder="decoder",
    mlm_bias="decoder.bias",
)

#: ModernBertConfig's defaults (those of answerdotai/ModernBERT-base).
MODERNBERT_DEFAULTS = dict(
    vocab_size=50368,
    hidden_size=768,
    intermediate_size=1152,
    num_hidden_layers=22,
    num_attention_heads=12,
    max_position_embeddings=8192,
    local_attention=128,
    global_attn_every_n_layers=3,
)


class ModernBert(EncoderFamily):
    model_type = "modernbert"
    names = MODERNBERT_NAMES
    lora_default_targets = None  # peft 0.21: no modernbert entry in TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
    eager_softmax_in_fp32 = True  # ModernBERT's eager_attention_forward: softmax(dtype=float32).to(query.dtype)
    attention_output_dropout = False
    sequence_head = "prediction_head"
    has_pooler = False
    base_model_pooler = False
    embedding_output_freed_before_head = True
    """``ModernBertModel.forward`` keeps the embedding output (``mask_kwargs["inputs_embeds"]``) until it
    returns, before ``ModernBertFor<Task>`` runs its head: unless a layer saved it, it is gone by then
    (measured under AMP bf16: mean pooling +1.1% and the token head +1.1% before, +0.00% on modernbert-base)."""

    # ------------------------------------------------------------------ config
    def read_config(self, fields: ConfigFields) -> Architecture:
        d = MODERNBERT_DEFAULTS
        heads = fields.integer("num_attention_heads", d["num_attention_heads"])
        layers = fields.layers(d["num_hidden_layers"])
        window = fields.integer("local_attention", d["local_attention"], minimum=2)
        layer_types = fields.string_list("layer_types")
        if layer_types:
            if len(layer_types) != layers:
                raise fields.fail("layer_types", f"has {len(layer_types)} entries for {layers} layers")
            unknown = sorted(set(layer_types) - {"full_attention", "sliding_attention"})
            if unknown:
                raise fields.fail("layer_types", f"unknown layer type {unknown[0]!r}; allowed: full_attention, sliding_attention")
            sliding = tuple(i for i, kind in enumerate(layer_types) if kind == "sliding_attention")
        else:
            every = fields.integer("global_attn_every_n_layers", d["global_attn_every_n_layers"])
            sliding = tuple(i for i in range(layers) if i % every)
        pooling = fields.string("classifier_pooling", "cls")
        if pooling not in ("cls", "mean"):
            raise fields.fail("classifier_pooling", f"must be cls or mean, got {pooling!r}")
        if fields.boolean("sparse_prediction", False):
            raise fields.fail("sparse_prediction", "the sparse MLM prediction (masked tokens only) is not modelled; use false")
        attention_dropout = fields.probability("attention_dropout")
        return Architecture(
            model_type="modernbert",
            vocab_size=fields.integer("vocab_size", d["vocab_size"]),
            hidden_size=fields.integer("hidden_size", d["hidden_size"]),
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            intermediate_size=fields.integer("intermediate_size", d["intermediate_size"]),
            hidden_act=fields.activation("hidden_activation", "gelu", aliases=("hidden_act",)),
            max_position_embeddings=fields.integer("max_position_embeddings", d["max_position_embeddings"]),
            tie_word_embeddings=fields.boolean("tie_word_embeddings", True),
            embedding_dropout=fields.probability("embedding_dropout"),
            attention_dropout=attention_dropout,
            residual_dropout=attention_dropout,  # out_drop after Wo (an Identity when attention_dropout is 0)
            mlp_dropout=fields.probability("mlp_dropout"),
            classifier_dropout=fields.probability("classifier_dropout"),
            num_labels=_num_labels(fields),
            mlp="gated",
            fused_gate_up=True,
            fused_qkv=True,
            norm="layernorm",
            norm_bias=fields.boolean("norm_bias", False),
            attention_qkv_bias=fields.boolean("attention_bias", False),
            attention_output_bias=fields.boolean("attention_bias", False),
            mlp_bias=fields.boolean("mlp_bias", False),
            position_embedding="rope",
            rope_sets=2 if sliding and len(sliding) < layers else 1,
            sliding_window=window // 2 if sliding else None,
            sliding_layers=sliding if sliding else None,
            first_layer_attention_norm=False,
            bidirectional=True,
            embedding_norm=True,
            classifier_pooling=pooling,
            classifier_bias=fields.boolean("classifier_bias", False),
            classifier_activation=fields.string("classifier_activation", "gelu"),
            decoder_bias=fields.boolean("decoder_bias", True),
        )

    # ------------------------------------------------------------------ inventory
    def embedding(self, arch: Architecture) -> list[ParameterTensor]:
        names = self.names
        tensors = [ParameterTensor(f"{names.embed_tokens}.weight", "embeddings", (arch.vocab_size, arch.hidden_size))]
        return tensors + blocks.norm(names.embedding_norm, arch, arch.hidden_size)

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        names, h, i = self.names, arch.hidden_size, arch.intermediate_size
        tensors = blocks.norm(names.input_norm, arch, h) if arch.layer_attention_norm else []
        return (
            tensors
            + blocks.linear(names.qkv_proj, "attention", h, 3 * h, arch.attention_qkv_bias)
            + blocks.linear(names.o_proj, "attention", h, h, arch.attention_output_bias)
            + blocks.norm(names.post_attention_norm, arch, h)
            + blocks.linear(names.intermediate, "mlp", h, 2 * i, arch.mlp_bias)
            + blocks.linear(names.output, "mlp", i, h, arch.mlp_bias)
        )

    def head(self, arch: Architecture) -> list[ParameterTensor]:
        names, h, task = self.names, arch.hidden_size, arch.task
        tensors = blocks.norm(names.final_norm, arch, h)
        if task == "embedding":
            return tensors  # the bare ModernBertModel
        tensors += blocks.linear(names.mlm_transform, "lm_head", h, h, arch.classifier_bias)
        tensors += blocks.norm(names.mlm_norm, arch, h)
        if task in ("sequence_classification", "token_classification"):
            return tensors + blocks.linear(names.classifier, "lm_head", h, arch.num_labels, True)
        if not arch.tie_word_embeddings:
            tensors.append(ParameterTensor(f"{names.mlm_decoder}.weight", "lm_head", (arch.vocab_size, h), (h, arch.vocab_size)))
        if arch.decoder_bias:
            tensors.append(ParameterTensor(f"{names.mlm_decoder}.bias", "lm_head", (arch.vocab_size,)))
        return tensors

    def rotary_tables_bytes(self, arch: Architecture, seq: int, stream_bytes: int) -> list[int]:
        """``ModernBertRotaryEmbedding.forward``: cos and sin, (1, s, d) each in the embedding output's dtype."""
        return [seq * arch.resolved_head_dim * stream_bytes] * 2

    def forward_locals_bytes(self, arch: Architecture, rows: int, seq: int, attention: str) -> list[tuple[str, int, str]]:
        """``ModernBertModel.forward``'s locals: ``position_ids = torch.arange(seq_len)`` (int64) and, under SDPA on
        a sequence that reaches the half window, ``create_bidirectional_sliding_window_mask``'s boolean
        (1, 1, s, s) mask (``rows`` 1 without padding; the global layers get None). Both are freed when the base
        model returns (measured, torch 2.13 CPU, transformers 5.24). The eager path's additive masks are not
        modelled here (not measured)."""
        tensors = [("position ids", seq * 8, "ModernBertModel.forward: torch.arange(seq_len), int64")]
        if attention == "fused" and arch.sliding_layers and seq >= (arch.sliding_window or seq + 1):
            tensors.append(("sliding-window attention mask", rows * seq * seq, "the boolean (1, 1, s, s) mask of the local layers"))
        return tensors

    def program(self) -> type[LayerProgram]:
        return ModernBertLayerProgram


class ModernBertLayerProgram(EncoderLayerProgram):
    """``ModernBertEncoderLayer.forward``, its attention and GeGLU MLP, and ModernBERT's task heads."""

    def layer(self, x: Sym) -> Sym:
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        rows, h = shape.stream_tokens, shape.hidden
        normed = self.norm(names.input_norm, x, rows, h) if arch.layer_attention_norm else x
        attended = self.attention(normed)
        if normed is not x:
            tape.release(normed)
        attended = self._dropped(attended, arch.residual_dropout)
        hidden = tape.add(x, attended)
        normed = self.norm(names.post_attention_norm, hidden, rows, h)
        mixed = self._geglu(normed)
        tape.release(normed)
        out = tape.add(hidden, mixed)
        # ``attn_output, _ = self.attn(...)`` is a local of ``ModernBertEncoderLayer.forward``: the attention
        # output lives until the layer returns (measured, torch 2.13 CPU: freed after the MLP's residual add).
        tape.release(hidden, mixed, attended)
        return out

    def _geglu(self, x: Sym) -> Sym:
        """``ModernBertMLP.forward``: ``Wo(drop(act(input) * gate))`` with ``input, gate = Wi(x).chunk(2)``."""
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        h, i = shape.hidden, shape.intermediate
        wide = self.linear(names.intermediate, x, h, 2 * i, arch.mlp_bias)
        first, gate = tape.split(wide, [wide.numel // 2, wide.numel // 2])
        activated = self._activation(first)
        product = tape.mul(activated, gate)
        tape.release(wide, activated)
        product = self._dropped(product, arch.mlp_dropout)
        out = self.linear(names.output, product, i, h, arch.mlp_bias)
        tape.release(product)
        return out

    def _rope(self, q: Sym) -> Sym:
        """ModernBERT's ``apply_rotary_pos_emb``: ``(q.float() * cos) + (rotate_half(q.float()) * sin)``,
        cast back to q's dtype; each ``q.float()`` is its own copy for a 16-bit q."""
        tape = self.tape
        first = tape.to(q, "fp32")
        cos = Sym(self.shape.seq * self.shape.head_dim, self.kernels.stream_dtype, False, "external")
        sin = Sym(self.shape.seq * self.shape.head_dim, self.kernels.stream_dtype, False, "external")
        with_cos = tape.mul(first, cos)
        if first is not q:
            tape.release(first)
        second = tape.to(q, "fp32")
        rotated = tape.copy(second, backward_scratch_bytes=second.nbytes)  # torch.cat((-x2, x1), dim=-1)
        if second is not q:
            tape.release(second)
        with_sin = tape.mul(rotated, sin)
        tape.release(rotated)
        summed = tape.add(with_cos, with_sin)
        tape.release(with_cos, with_sin)
        out = tape.to(summed, q.dtype)
        if out is not summed:
            tape.release(summed)
        return out

    def _attention_core(self, q: Sym, k: Sym, v: Sym) -> Sym:
        """SDPA as for decoders (a boolean mask on local layers once the sequence reaches the half
        window); ModernBERT's eager path is the decoders' (``softmax(..., dtype=float32).to(q.dtype)``).
        v is a view of ``Wqkv``'s output: eager's ``matmul(attn_weights, value)`` folds it into a contiguous
        copy, which is what it saves (so the fused projection's output is freed; measured, torch 2.13 CPU)."""
        if self.kernels.attention != "eager":
            return LayerProgram._attention_core(self, q, k, v)
        contiguous = self.tape.copy(v)
        out = LayerProgram._attention_core(self, q, k, contiguous)
        self.tape.release(contiguous)
        return out

    # ------------------------------------------------------------------ the heads
    def _head_norm(self, module: str, x: Sym, rows: int, trains: bool) -> Sym:
        width = self.shape.hidden
        weight = Sym(width, self.kernels.weight_dtype, trains, "parameter")
        bias = Sym(width, self.kernels.weight_dtype, trains, "parameter") if self.arch.norm_bias else None
        return self.tape.layer_norm(x, rows, weight, bias)

    def _prediction_head(self, x: Sym, rows: int) -> Sym:
        """``ModernBertPredictionHead``: ``norm(act(dense(x)))``."""
        arch, tape, h = self.arch, self.tape, self.shape.hidden
        dense = self.head_linear(x, h, h, self.names.mlm_transform, arch.classifier_bias)
        activated = tape.unary_saving_input(arch.classifier_activation, dense)
        tape.release(dense)
        out = self._head_norm(self.names.mlm_norm, activated, rows, self.head_trains(self.names.mlm_norm))
        tape.release(activated)
        return out

    def task_head(self, x: Sym) -> Sym:
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        h, batch, tokens = shape.hidden, shape.batch, shape.tokens
        final = self._head_norm(names.final_norm, x, tokens, self.trainability.trains(names.final_norm))  # norms group
        task = arch.task
        if task == "embedding":
            loss = self._contrastive(final)
            tape.release(final)
            return loss
        if task == "sequence_classification":
            pooled = self._pooled(final)
            head = self._prediction_head(pooled, batch)
            if pooled is not final:
                tape.release(pooled)
            tape.release(final)
            logits = self._classifier(head)
            loss = self._cross_entropy(logits, batch)
            tape.release(logits)
            return loss
        head = self._prediction_head(final, tokens)
        tape.release(final)
        if task == "token_classification":
            logits = self._classifier(head)
            loss = self._cross_entropy(logits, tokens)
            tape.release(logits)
            return loss
        decoder_trains = self.trainability.trains(names.embed_tokens if arch.tie_word_embeddings else names.lm_head)
        decoder = Sym(arch.vocab_size * h, self.kernels.weight_dtype, decoder_trains, "parameter")
        bias = self.head_parameter(arch.vocab_size, names.mlm_decoder) if arch.decoder_bias else None
        logits = tape.linear(head, decoder, arch.vocab_size, bias)
        tape.release(head)
        logits32 = tape.to(logits, "fp32")  # ForMaskedLMLoss: logits.float()
        loss = self._cross_entropy(logits32, tokens)
        tape.release(logits, logits32)
        return loss

    def _classifier(self, x: Sym) -> Sym:
        """``drop`` (``classifier_dropout``) and ``classifier`` (with its bias)."""
        tape = self.tape
        dropped = tape.dropout(x, self.arch.classifier_dropout)
        if dropped is not x:
            tape.release(x)
        logits = self.head_linear(dropped, self.shape.hidden, self.arch.num_labels, self.names.classifier)
        tape.release(dropped)
        return logits

    def _pooled(self, x: Sym) -> Sym:
        """``last_hidden_state[:, 0]`` (a view), or the mean: ``(x * mask.unsqueeze(-1)).sum(1) /
        mask.sum(1, keepdim=True)`` with an all-true bool mask made in the forward (MulBackward saves
        the mask, DivBackward the int64 counts)."""
        shape, tape = self.shape, self.tape
        h, batch, tokens = shape.hidden, shape.batch, shape.tokens
        if self.arch.classifier_pooling == "cls":
            return x.view(batch * h)
        mask = tape.new(tokens, "bool", False)
        masked = tape.mul(x, mask)
        summed = tape.reduce(masked, batch * h)
        tape.release(masked)
        counts = tape.new(batch, "int64", False)
        mean = tape.mul(summed, counts)
        tape.release(summed, counts, mask)
        return mean

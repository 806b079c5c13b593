"""Vision encoders on their own (``models/vision_encoders.py``) on the tape: patch embedding, layers, head.

Each function mirrors the forward of the transformers 5.24 module it names, op for op:

* :func:`trace_patch_embedding` (``ViTEmbeddings``, ``Dinov2Embeddings``, ``CLIPVisionEmbeddings`` with
  ``pre_layrnorm``, ``SiglipVisionEmbeddings``): ``pixel_values`` cast to the weights' dtype (a new tensor when
  they differ; autocast casts inside the convolution instead), the stride-``p`` convolution (``Tape.conv``: a matmul
  over ``C·p·p`` inputs per patch that saves its cast input and cast weight), ``flatten(2).transpose(1, 2)`` (views),
  ``torch.cat`` of the expanded [CLS] token (a new tensor, nothing saved), ``+`` the positions: an
  ``nn.Parameter`` added as it is (ViT, DINOv2) or an ``nn.Embedding`` looked up at the ``position_ids`` buffer
  (CLIP, SigLIP: a (1, n, h) table copy), and CLIP's ``pre_layrnorm``. Unlike the VLM towers
  (``vision/program.py``), the embedding is the first piece of the model's own step, with its own trainability.
* :class:`VisionEncoderProgram`: the shared pre-LN layer program, with DINOv2's LayerScale (``hidden * lambda1``:
  MulBackward saves the sub-block's output for the gradient of ``lambda1``) and the eager attention of the towers
  (no mask is added: bidirectional, unpadded);
* :meth:`VisionEncoderProgram.task_head`: the last LayerNorm over every token (ViT, DINOv2, SigLIP), the pooling
  of the family (``x[:, 0]`` is a view; ``mean`` saves nothing; DINOv2's ``torch.cat`` is a new tensor), the
  classifier and ``ForSequenceClassificationLoss``'s cross-entropy (log_softmax upcasts 16-bit logits).

SigLIP's attention-pooling head is on no path to the loss, but it runs: its tensors are alive from the last layer
to the end of the forward (the loss included) and are then dropped with its graph (:func:`_drop_graph`).

Not modelled (stated): DINOv2's bicubic interpolation of its position table when the input differs from the
config's ``image_size`` (a few (1, n, h) tensors per forward), CLIP's ``post_layernorm`` of the pooled [CLS]
token (b × h, freed when the forward returns).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..layers import LayerKernels, LayerProgram, LayerShape, Trace, Trainability, replay
from ..tape import Sym, Tape

if TYPE_CHECKING:
    from ..architecture import Architecture
    from ..plan import Plan


def is_vision_encoder(arch: Architecture | None) -> bool:
    return arch is not None and arch.image_size > 0


def registers_of(arch: Architecture) -> int:
    """DINOv2's register tokens: the class tokens after the [CLS] token."""
    return max(0, arch.class_tokens - 1)


def pixel_values_numel(arch: Architecture) -> int:
    """One image as the processor hands it over: ``(C, side, side)`` fp32 values."""
    return arch.num_channels * arch.image_size * arch.image_size


def pixel_values_bytes(plan: Plan) -> int:
    """The micro-batch's fp32 ``pixel_values`` (before the allocator's rounding)."""
    arch = plan.architecture
    if not is_vision_encoder(arch):
        return 0
    return plan.setup.micro_batch_size * pixel_values_numel(arch) * 4


class VisionEncoderProgram(LayerProgram):
    """A vision encoder's pre-LN layer (``ViTLayer``, ``Dinov2Layer``, ``CLIPEncoderLayer``, ``SiglipEncoderLayer``)."""

    def layer(self, x: Sym) -> Sym:
        if not self.arch.layer_scale:
            return super().layer(x)
        shape, tape, names = self.shape, self.tape, self.names
        rows, h = shape.stream_tokens, shape.hidden
        normed = self.norm(names.input_norm, x, rows, h)
        attended = self.attention(normed)
        tape.release(normed)
        scaled = tape.mul(attended, self.parameter(names.layer_scale1, h))
        tape.release(attended)
        hidden = tape.add(scaled, x)
        tape.release(scaled)
        normed = self.norm(names.post_attention_norm, hidden, rows, h)
        mixed = self.mlp(normed)
        tape.release(normed)
        scaled = tape.mul(mixed, self.parameter(names.layer_scale2, h))
        tape.release(mixed)
        out = tape.add(scaled, hidden)
        tape.release(scaled, hidden)
        return out

    def _attention_core(self, q: Sym, k: Sym, v: Sym) -> Sym:
        """The towers' ``eager_attention_forward``: ``softmax(q kᵀ · scale, dtype=float32).to(q.dtype)``, dropout,
        ``@ v``, a contiguous transpose; no mask is added (bidirectional, unpadded)."""
        if self.kernels.attention != "eager":
            return super()._attention_core(q, k, v)
        shape, tape = self.shape, self.tape
        scores = tape.matmul(q, k, shape.batch * shape.heads * shape.seq * shape.kv_seq)
        scaled = tape.scale(scores)
        tape.release(scores)
        probs = tape.unary_saving_result("softmax", scaled, dtype="fp32")
        tape.release(scaled)
        cast = tape.to(probs, q.dtype)
        dropped = tape.dropout(cast, self.arch.attention_dropout)
        context = tape.matmul(dropped, v, q.numel)
        tape.release(probs, cast, dropped)
        out = tape.copy(context)
        tape.release(context)
        return out

    text_sequence_length = 0
    """The contrastive task's text length (``Setup.sequence_length``), set by ``heads.trace_task_head``."""

    # ------------------------------------------------------------------ the head
    def head_parameter(self, numel: int) -> Sym:
        return Sym(numel, self.kernels.weight_dtype, self.trainability.trains(self.names.lm_head), "parameter")

    def task_head(self, x: Sym) -> Sym:
        """Last LayerNorm, pooling, classifier, cross-entropy; ``x`` is the last layer's output (b·s·h)."""
        if self.arch.task == "contrastive":  # CLIP / SigLIP image-text pairs (vision/contrastive.py)
            from .contrastive import trace_contrastive_head

            return trace_contrastive_head(self, x, self.text_sequence_length)
        shape, tape, family = self.shape, self.tape, self.family
        h, batch, rows = shape.hidden, shape.batch, shape.stream_tokens
        hidden = x
        if family.final_norm_on_tokens:
            hidden = self.norm(self.names.final_norm, x, rows, h)
        unused = self._unused_pooling_head(hidden) if self.arch.pooling_head else None
        pooling = family.pooling
        if pooling == "cls":
            pooled = hidden.view(batch * h)  # sequence_output[:, 0, :]: a view; SelectBackward makes a (b, s, h) grad
            tape.record("select", [], [hidden], [pooled])
        elif pooling == "cls_and_mean_patches":
            mean = tape.reduce(hidden, batch * h)  # patch_tokens.mean(dim=1)
            pooled = tape.new(2 * batch * h, hidden.dtype, hidden.requires_grad)  # torch.cat([cls, mean], dim=1)
            tape.record("cat", [], [hidden, mean], [pooled])
            tape.release(mean)
        else:  # mean over the patches (CLIP, x[:, 1:] is a view) or over every token (SigLIP)
            pooled = tape.reduce(hidden, batch * h)
        width = pooled.numel // batch
        logits = tape.linear(pooled, self.head_parameter(width * self.arch.num_labels), self.arch.num_labels,
                             self.head_parameter(self.arch.num_labels))
        if pooled is not hidden and pooled.storage != hidden.storage:
            tape.release(pooled)
        if hidden is not x:
            tape.release(hidden)
        logits32 = tape.autocast_input("log_softmax", logits)
        loss = tape.cross_entropy(logits32, batch)
        if logits32 is not logits:
            tape.release(logits32)
        tape.release(logits)
        if unused is not None:
            _drop_graph(tape, *unused)
        return loss

    def _unused_pooling_head(self, hidden: Sym) -> tuple[int, int, Sym]:
        """SigLIP's attention-pooling head runs in ``SiglipVisionTransformer.forward`` although the classifier reads
        ``last_hidden_state``: its ``pooler_output`` (and the graph behind it) lives in the model output until
        ``SiglipForImageClassification.forward`` returns, after the loss. Returns the head's node range and output."""
        from .contrastive import _siglip_pooling_head

        first = len(self.tape.nodes)
        out = _siglip_pooling_head(self, hidden)
        return first, len(self.tape.nodes), out


def lookup(tape: Tape, table: Sym, out_numel: int, index_numel: int) -> Sym:
    """``nn.Embedding`` at ids that already exist (the ``position_ids`` buffer or a slice of it, the input batch's
    ``input_ids``): ``EmbeddingBackward0`` saves the ids, which are no new memory (``Tape.gather`` counts a new
    index tensor)."""
    out = tape.new(out_numel, table.dtype, table.requires_grad)
    tape.record("index", [Sym(index_numel, "int64", False, "external")], [table], [out])
    return out


def _drop_graph(tape: Tape, first: int, last: int, output: Sym) -> None:
    """The forward drops ``output``, the only reference to the graph of nodes ``first:last``: the nodes and the
    tensors only they saved are freed (no gradient ever reaches them)."""
    dropped, tape.nodes[first:last] = tape.nodes[first:last], []
    still_saved = {t.storage for node in tape.nodes for t in node.saved}
    for node in dropped:
        for tensor in node.saved:
            if tensor.storage not in still_saved and tape.saved_storages.pop(tensor.storage, None) is not None:
                tape.release(tensor)
    tape.release(output)


def trace_patch_embedding(
    arch: Architecture,
    shape: LayerShape,
    kernels: LayerKernels,
    trainability: Trainability,
    parameter_grads_exist: bool = False,
) -> Trace:
    """The family's embeddings module on one micro-batch of images (``shape.batch`` images of ``shape.seq`` tokens)."""
    from ..models import family_for

    family = family_for(arch)
    names = family.names
    tape = Tape(device=kernels.device, autocast=kernels.autocast)
    program = family.program()(arch, shape, kernels, trainability, tape)
    images, h, tokens = shape.batch, shape.hidden, shape.stream_tokens
    pixels = Sym(images * pixel_values_numel(arch), "fp32", False, "external")
    # pixel_values.to(weight dtype): a new activation (nothing needs its gradient) under pure 16-bit weights
    x = pixels if kernels.weight_dtype == "fp32" else tape.new(pixels.numel, kernels.weight_dtype, False)
    per_patch = arch.num_channels * arch.patch_size * arch.patch_size
    weight = program.parameter(names.patch_embedding, per_patch * h)
    bias = program.parameter(names.patch_embedding, h) if family.patch_bias else None
    out = tape.conv(x, weight, h, bias, per_patch)
    locals_ = [out]
    if x is not pixels:
        tape.release(x)
    if arch.class_tokens:  # torch.cat((cls_tokens, embeddings), dim=1)
        program.parameter(names.class_token, h)
        joined = tape.copy(out, images * (arch.image_tokens - registers_of(arch)) * h)
        locals_.append(joined)
        out = joined
    registers = registers_of(arch)
    positions_rows = arch.image_tokens - registers
    table = program.parameter(names.embed_positions, positions_rows * h)
    if family.position_ids_buffer:  # nn.Embedding(position_ids): a (1, n, h) lookup
        positions = lookup(tape, table, positions_rows * h, positions_rows)
        locals_.append(positions)
        table = positions
    summed = tape.add(out, table)
    out = summed
    if registers:  # DINOv2 with registers: torch.cat((x[:, :1], registers, x[:, 1:]), dim=1)
        program.parameter("embeddings.register_tokens", registers * h)
        joined = tape.copy(summed, tokens * h)
        locals_.append(summed)
        out = joined
    if names.pre_norm:  # CLIP's pre_layrnorm (CLIPVisionTransformer, after the embeddings module returns)
        normed = program.norm(names.pre_norm, summed, tokens, h)
        locals_.append(summed)
        out = normed
    dropped = tape.dropout(out, arch.embedding_dropout)
    if dropped is not out:
        tape.release(out)
    tape.release(*locals_)
    saved = tape.saved_bytes(("activation", "weight_copy"))
    return replay(tape, [dropped], tape.peak_live_bytes, tape.live_bytes() - saved, False, parameter_grads_exist)

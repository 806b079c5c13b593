"""The ``contrastive`` task of a CLIP or SigLIP dual encoder on the tape: the text tower and the image-text loss.

The vision tower is the step's main path (patch embedding, layers: ``vision/encoders.py``); what follows its last
layer is replayed here on one tape, in the order transformers 5.24 runs it (``CLIPModel.forward`` /
``SiglipModel.forward`` with ``return_loss=True``), so that autograd's backward (newest node first) runs the text
tower's backward before the vision tower's, as it does:

1. the vision pooling: CLIP ``last_hidden_state[:, 0]`` (a view) and ``post_layernorm``; SigLIP ``post_layernorm``
   over every token and the attention-pooling head (``SiglipMultiheadAttentionPoolingHead``: ``probe.repeat``,
   ``nn.MultiheadAttention`` with explicit attention weights, LayerNorm, MLP, ``[:, 0]``); CLIP's ``visual_projection``;
2. the text tower (``text_model``): token and position embeddings (lookups), ``num_hidden_layers`` pre-LN layers
   (the shared layer program; CLIP's causal mask is SDPA's ``is_causal``, no 4-D mask), ``final_layer_norm``,
   the pooled token (CLIP: the EOS position per row, an index; SigLIP: ``[:, -1]``, a view), CLIP's
   ``text_projection`` / SigLIP's ``head``;
3. both sides divided by their L2 norm (``x / x.norm(dim=-1, keepdim=True)``: the norm saves its input and result,
   the division both operands), ``logits_per_text = text @ imageᵀ`` (b×b), ``* logit_scale.exp()`` (and
   ``+ logit_bias``), ``logits_per_image = logits_per_text.t()`` (a view);
4. the loss: CLIP ``(cross_entropy(L) + cross_entropy(Lᵀ)) / 2`` (each log_softmax saves a b×b result);
   SigLIP ``-logsigmoid(sign * L).sum(-1).mean()`` with ``sign = 2·eye(b) - 1`` (b×b tensors: eye, ones_like,
   the product; logsigmoid saves its input and a b×b buffer).

The b×b tensors are what grows with the square of the batch. Not modelled (small, stated): the int32 cast and
``argmax`` of CLIP's EOS search (b×s, freed at once), dropout (0 in every published config).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..architecture import Architecture
from ..layers import LayerProgram, LayerShape
from ..tape import Sym
from .encoders import lookup

if TYPE_CHECKING:
    from ..text_tower import TextTower
    from .encoders import VisionEncoderProgram


def text_architecture(vision: Architecture, text: TextTower) -> Architecture:
    """The text tower's layer in the layer program's vocabulary (the vision tower's family, its own sizes)."""
    return vision.model_copy(update=dict(
        hidden_size=text.hidden_size, intermediate_size=text.intermediate_size,
        num_attention_heads=text.num_attention_heads, num_key_value_heads=text.num_attention_heads,
        num_hidden_layers=text.num_hidden_layers, hidden_act=text.hidden_act, layer_scale=False,
        bidirectional=not text.causal,
    ))


def _text_shape(shape: LayerShape, text: TextTower, sequence_length: int) -> LayerShape:
    h = text.hidden_size
    return replace(shape, seq=sequence_length, kv_seq=sequence_length, heads=text.num_attention_heads,
                   kv_heads=text.num_attention_heads, head_dim=h // text.num_attention_heads, hidden=h,
                   intermediate=text.intermediate_size, stream_tokens=shape.batch * sequence_length)


def _unit_normalised(program: LayerProgram, x: Sym, rows: int) -> Sym:
    """``x / x.norm(p=2, dim=-1, keepdim=True)``: NormBackward saves its input and result, DivBackward both operands."""
    tape = program.tape
    norm = tape.new(rows, x.dtype, x.requires_grad)
    tape.record("norm", [x, norm], [x], [norm])
    out = tape.new(x.numel, x.dtype, x.requires_grad)
    tape.record("div", [x, norm], [x, norm], [out])
    tape.release(norm)
    return out


def _siglip_pooling_head(program: VisionEncoderProgram, hidden: Sym) -> Sym:
    """``SiglipMultiheadAttentionPoolingHead`` over the normed tokens: one probe query per image.

    ``nn.MultiheadAttention(batch_first=True)`` runs ``F.multi_head_attention_forward`` (torch/nn/functional.py) on
    the inputs transposed to (n, b, h): the probe's query projection is an ``addmm``; the key/value projection
    (``_in_projection_packed``, key is value) is ``linear`` of a non-contiguous 3-D view, i.e. a contiguous copy
    (saved by ``mm``), the ``mm`` and a separate bias ``add``, then ``unflatten(...).transpose(...).contiguous()``
    (a second copy, (2, n, b, h)); ``q * sqrt(1/E)``, ``bmm``, ``softmax``, ``bmm``, the output projection, and
    the head-averaged weights (``need_weights=True``); then LayerNorm, MLP and the residual add. Measured op by op
    (siglipvision-small-fp32-imgcls-sdpa-96px-b8)."""
    shape, tape = program.shape, program.tape
    b, n, h, heads = shape.batch, shape.seq, shape.hidden, shape.heads
    probe = program.head_parameter(h)
    query = tape.copy(probe, b * h)  # probe.repeat(b, 1, 1)
    q = tape.linear(query, program.head_parameter(h * h), h, program.head_parameter(h))
    tape.release(query)
    tokens_first = tape.copy(hidden)  # key.transpose(1, 0) reshaped for the matmul: a contiguous copy
    projected = tape.linear(tokens_first, program.head_parameter(2 * h * h), 2 * h)
    tape.release(tokens_first)
    kv = tape.add(projected, program.head_parameter(2 * h))  # + the packed bias
    tape.release(projected)
    packed = tape.copy(kv)  # kv.unflatten(-1, (2, h)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()
    tape.release(kv)
    k, v = tape.split(packed, [b * n * h, b * n * h])
    q_scaled = tape.scale(q)  # q * math.sqrt(1.0 / head_dim)
    tape.release(q)
    scores = tape.matmul(q_scaled, k, b * heads * n)
    tape.release(q_scaled)
    probs = tape.unary_saving_result("softmax", scores)
    tape.release(scores)
    context = tape.matmul(probs, v, b * h)
    tape.release(packed, probs)
    attended = tape.linear(context, program.head_parameter(h * h), h, program.head_parameter(h))
    weights = tape.reduce(probs, b * n)  # need_weights=True: the head-averaged attention weights
    tape.release(context, weights)
    normed = program.norm("vision_model.head.layernorm", attended, b, h)
    mixed = program.mlp(normed)  # the linears work on any number of rows
    tape.release(normed)
    out = tape.add(attended, mixed)
    tape.release(attended, mixed)
    return out


def trace_contrastive_head(program: VisionEncoderProgram, x: Sym, sequence_length: int) -> Sym:
    """Steps 1-4 above on the vision tower's last layer output ``x`` (b·n·h); returns the loss."""
    arch, shape, tape = program.arch, program.shape, program.tape
    text = arch.text_tower
    assert text is not None
    b, h, rows = shape.batch, shape.hidden, shape.stream_tokens
    p = text.projection_dim
    # 1. the image embedding
    if text.kind == "clip":
        cls = x.view(b * h)
        tape.record("select", [], [x], [cls])
        pooled = program.norm(program.names.final_norm, cls, b, h)
        image = tape.linear(pooled, program.head_parameter(h * p), p)
        tape.release(pooled)
    else:
        normed = program.norm(program.names.final_norm, x, rows, h)
        image = _siglip_pooling_head(program, normed)
        tape.release(normed)
    # 2. the text tower
    text_arch = text_architecture(arch, text)
    text_shape = _text_shape(shape, text, sequence_length)
    text_program = type(program)(text_arch, text_shape, program.kernels, program.trainability, tape)
    th, tokens = text.hidden_size, text_shape.stream_tokens
    table = program.head_parameter(text.vocab_size * th)
    embedded = lookup(tape, table, tokens * th, tokens)  # input_ids: the input batch
    positions_table = program.head_parameter(text.max_position_embeddings * th)
    positions = lookup(tape, positions_table, sequence_length * th, sequence_length)  # position_ids[:, :s]
    hidden = tape.add(embedded, positions)
    tape.release(embedded, positions)
    for _ in range(text.num_hidden_layers):
        out = text_program.layer(hidden)
        tape.release(hidden)
        hidden = out
    last = text_program.norm("text_model.final_layer_norm", hidden, tokens, th)
    tape.release(hidden)
    if text.kind == "clip":  # last_hidden_state[arange(b), eos_positions]
        pooled_text = tape.gather(last, b * th, b)
        text_embeds = tape.linear(pooled_text, program.head_parameter(th * p), p)
        tape.release(pooled_text)
    else:  # last_hidden_state[:, -1, :], then the head (bias)
        pooled_text = last.view(b * th)
        tape.record("select", [], [last], [pooled_text])
        text_embeds = tape.linear(pooled_text, program.head_parameter(th * p), p, program.head_parameter(p))
    tape.release(last)
    # 3. cosine similarities
    image_unit = _unit_normalised(program, image, b)
    text_unit = _unit_normalised(program, text_embeds, b)
    tape.release(image, text_embeds)
    similarity = tape.matmul(text_unit, image_unit, b * b)
    tape.release(text_unit, image_unit)
    scale = tape.unary_saving_result("exp", program.head_parameter(1))
    logits = tape.mul(similarity, scale)
    tape.release(similarity, scale)
    if text.kind == "siglip":
        biased = tape.add(logits, program.head_parameter(1))
        tape.release(logits)
        logits = biased
    # 4. the loss
    if text.kind == "clip":
        caption = tape.cross_entropy(tape.autocast_input("log_softmax", logits), b)
        transposed = logits.view(b * b)
        tape.record("transpose", [], [logits], [transposed])
        image_loss = tape.cross_entropy(tape.autocast_input("log_softmax", transposed), b)
        loss = tape.add(caption, image_loss)
        tape.release(caption, image_loss)
        halved = tape.scale(loss)
        tape.release(loss, logits)
        return halved
    eye = tape.new(b * b, "fp32", False)
    sign = tape.new(b * b, "fp32", False)  # -ones_like(L) + 2 * eye
    tape.release(eye)
    signed = tape.mul(sign, logits)
    tape.release(sign, logits)
    buffer = Sym(b * b, signed.dtype, False)  # log_sigmoid_forward's buffer, saved for backward
    loglik = tape.new(b * b, signed.dtype, signed.requires_grad)
    tape.record("log_sigmoid", [signed, buffer], [signed], [loglik])
    tape.release(signed)
    summed = tape.reduce(loglik, b)
    tape.release(loglik)
    negated = tape.scale(summed)
    tape.release(summed)
    loss = tape.reduce(negated, 1)
    tape.release(negated)
    return loss

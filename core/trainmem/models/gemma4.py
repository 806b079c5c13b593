"""Gemma 4 text model (transformers 5.24 ``models/gemma4``: ``Gemma4TextConfig``, ``Gemma4ForCausalLM``).

Gemma 3's sandwich of four norms per layer, per-head q/k norms, scaled embeddings and tied head, with
(``modeling_gemma4.py``):

* ``Gemma4RMSNorm``: ``x.float() * pow(mean(x²) + eps, -0.5)``, times ``weight.float()`` (not Gemma 2/3's
  ``1 + weight``), cast back; ``v_norm`` is the same norm without a weight, applied to the values;
* attention with ``scaling = 1.0`` (the q/k norms carry the scale); sliding (``sliding_attention``) and
  global (``full_attention``) layers from ``layer_types`` (every 6th global by default, the last layer
  forced global), the global ones with ``global_head_dim`` (512) and, under ``attention_k_eq_v``,
  ``num_global_key_value_heads`` and no ``v_proj`` (values = the keys' projection);
* one rotary table per layer type (``Gemma4TextRotaryEmbedding``): the global layers' "proportional" RoPE
  rotates a quarter of each 512-wide head but its cos/sin span the whole head;
* KV sharing: the last ``num_kv_shared_layers`` layers have no k/v projections and reuse the keys and
  values of the last earlier layer of their type; with ``use_double_wide_mlp`` their MLP is twice as wide;
* per-layer embeddings (PLE, ``hidden_size_per_layer_input``): ``embed_tokens_per_layer``
  (``vocab_size_per_layer_input`` × L·p, scaled by √p), ``per_layer_model_projection`` (h → L·p, scaled by
  1/√h) and ``per_layer_projection_norm`` make one (b, s, L, p) tensor per forward, each layer gates its
  slice in (``per_layer_input_gate``, ``per_layer_projection``, ``post_per_layer_input_norm``);
* ``enable_moe_block``: a routed MoE beside the dense MLP in every layer (``Gemma4TextRouter``: a
  weightless RMSNorm, a ``scale`` vector and ``per_expert_scale``, ``proj``; ``Gemma4TextExperts``: fused
  3-D ``gate_up_proj``/``down_proj``), with three more norms;
* ``layer_scalar``, a one-element buffer each layer multiplies its output by in place; the final logits
  soft-capped (``final_logit_softcapping``, 30 in the published checkpoints).

PEFT 0.21 has no default targets for ``gemma4_text`` (its ``gemma4`` entry is a regex over the wrapper's
``language_model`` q/v projections) and no MoE conversion for it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from ..architecture import Architecture
from ..gemma4_layout import Gemma4Layout
from ..layers import LayerKernels, LayerProgram, LayerShape, Trace, Trainability, replay
from ..tape import Sym, Tape
from . import blocks
from .blocks import ModuleNames, ParameterTensor
from .family import DecoderFamily, checked_layer_types, common_decoder_fields
from .fields import ConfigFields

GEMMA4_TEXT_DEFAULTS = dict(
    vocab_size=262_144,
    hidden_size=2304,
    intermediate_size=9216,
    num_hidden_layers=30,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=256,
    max_position_embeddings=131_072,
    tie_word_embeddings=True,
    hidden_act="gelu_pytorch_tanh",
)
"""``Gemma4TextConfig``'s defaults (transformers 5.24)."""


@dataclass(frozen=True)
class Gemma4Names(ModuleNames):
    """Gemma 4's module paths beyond Llama's."""

    router: str = "router.proj"
    router_scale: str = "router.scale"
    experts: str = "experts"
    v_norm: str = "self_attn.v_norm"
    per_layer_input_gate: str = "per_layer_input_gate"
    per_layer_projection: str = "per_layer_projection"
    post_per_layer_input_norm: str = "post_per_layer_input_norm"
    post_feedforward_norm_1: str = "post_feedforward_layernorm_1"
    post_feedforward_norm_2: str = "post_feedforward_layernorm_2"
    pre_feedforward_norm_2: str = "pre_feedforward_layernorm_2"
    embed_tokens_per_layer: str = "embed_tokens_per_layer"
    per_layer_model_projection: str = "per_layer_model_projection"
    per_layer_projection_norm: str = "per_layer_projection_norm"

    def module_paths(self) -> tuple[str, ...]:
        return (
            *super().module_paths(),
            self.router_scale,
            self.per_layer_input_gate,
            self.per_layer_projection,
            self.post_per_layer_input_norm,
            self.post_feedforward_norm_1,
            self.post_feedforward_norm_2,
            self.pre_feedforward_norm_2,
            self.embed_tokens_per_layer,
            self.per_layer_model_projection,
            self.per_layer_projection_norm,
        )


NAMES = Gemma4Names()


def _layout(arch: Architecture) -> Gemma4Layout:
    assert arch.gemma4 is not None
    return arch.gemma4


class Gemma4Program(LayerProgram):
    """``Gemma4TextDecoderLayer.forward``, op by op."""

    # ------------------------------------------------------------------ norms
    def _gemma4_normalize(self, x: Sym, rows: int) -> Sym:
        """``Gemma4RMSNorm._norm`` on ``x.float()``: ``pow(2)`` saves x32, ``mean + eps``, ``pow(·, -0.5)``
        saves its input (PowBackward0), the product saves x32 and the inverse."""
        tape = self.tape
        x32 = tape.to(x, "fp32")
        squared = tape.unary_saving_input("pow", x32)
        variance = tape.reduce(squared, rows)
        tape.release(squared)
        shifted = tape.scale(variance)
        tape.release(variance)
        inverse = tape.unary_saving_input("pow", shifted)
        tape.release(shifted)
        normalized = tape.mul(x32, inverse)
        tape.release(inverse)
        if x32 is not x:
            tape.release(x32)
        return normalized

    def rms_norm(self, module: str, x: Sym, rows: int, width: int) -> Sym:
        """``(normalized * weight.float()).type_as(x)``."""
        tape = self.tape
        normalized = self._gemma4_normalize(x, rows)
        weight = tape.to(self.parameter(module, width), "fp32")
        scaled = tape.mul(normalized, weight)
        tape.release(normalized)
        out = tape.to(scaled, x.dtype)
        if out is not scaled:
            tape.release(scaled)
        return out

    def weightless_norm(self, x: Sym, rows: int) -> Sym:
        """``Gemma4RMSNorm(with_scale=False)``: ``normalized.type_as(x)`` (``v_norm``, the router's norm)."""
        tape = self.tape
        normalized = self._gemma4_normalize(x, rows)
        out = tape.to(normalized, x.dtype)
        if out is not normalized:
            tape.release(normalized)
        return out

    # ------------------------------------------------------------------ attention
    def attention(self, x: Sym) -> Sym:
        """``Gemma4TextAttention.forward``: q (norm, RoPE); k and v of this layer (k_norm + RoPE, v_norm) or,
        in a KV-shared layer, the stored ones of an earlier layer (alive anyway: that layer saved them)."""
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        layout = _layout(arch)
        tokens, d = shape.tokens, shape.head_dim
        q_width, kv_width = shape.heads * d, shape.kv_heads * d
        bias = arch.attention_qkv_bias
        q = self.linear(names.q_proj, x, shape.hidden, q_width, bias)
        q_normed = self.norm(names.q_norm, q, tokens * shape.heads, d)
        tape.release(q)
        q = self._rope(q_normed)
        tape.release(q_normed)
        if layout.layer_kv_shared:
            # the stored (rotated) keys: q's dtype after RoPE's promotion by the stream-dtype cos/sin; values in
            # the projections' dtype (v_norm casts back with type_as)
            compute = self.kernels.autocast or self.kernels.weight_dtype
            k = Sym(tokens * kv_width, tape.promote(compute, self.kernels.stream_dtype), x.requires_grad, "external")
            v = Sym(tokens * kv_width, compute, x.requires_grad, "external")
        else:
            k_proj = self.linear(names.k_proj, x, shape.hidden, kv_width, bias)
            keys_are_values = layout.attention_k_eq_v and layout.layer_global
            v_proj = k_proj if keys_are_values else self.linear(names.v_proj, x, shape.hidden, kv_width, bias)
            k_normed = self.norm(names.k_norm, k_proj, tokens * shape.kv_heads, d)
            k = self._rope(k_normed)
            tape.release(k_normed)
            v = self.weightless_norm(v_proj, tokens * shape.kv_heads)
            tape.release(k_proj, v_proj)
        out = self._attention_core(q, k, v)
        tape.release(q, k, v)
        return self.linear(names.o_proj, out, q_width, shape.hidden, arch.attention_output_bias)

    # ------------------------------------------------------------------ MoE block
    def _route(self, x: Sym) -> Sym:
        """``Gemma4TextRouter.forward`` over the residual (set by :meth:`layer`): weightless norm, ``* scale``
        (a parameter), ``* hidden_size**-0.5``, ``proj``, fp32 softmax, top-k renormalised, ``* per_expert_scale``."""
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        residual = self._router_input
        rows, h = shape.stream_tokens, shape.hidden
        routed_rows = rows * shape.experts_per_token
        normed = self.weightless_norm(residual, rows)
        scaled = tape.mul(normed, self.parameter(NAMES.router_scale, h))
        tape.release(normed)
        rooted = tape.scale(scaled)
        tape.release(scaled)
        logits = self.linear(names.router, rooted, h, arch.num_experts, False)
        tape.release(rooted)
        probs = tape.unary_saving_result("softmax", logits, dtype="fp32")
        tape.release(logits)
        top = tape.gather(probs, routed_rows, routed_rows)
        tape.release(probs)
        normalized = tape.mul(top, Sym(rows, "fp32", True))  # top_k_weights /= top_k_weights.sum(-1, keepdim=True)
        tape.release(top)
        expert_scale = tape.gather(self.parameter(NAMES.router_scale, arch.num_experts), routed_rows, routed_rows)
        weights = tape.mul(normalized, expert_scale)
        tape.release(normalized, expert_scale)
        return weights

    def _moe_block(self, residual: Sym) -> Sym:
        """The experts over ``pre_feedforward_layernorm_2(residual)``, routed by :meth:`_route`, at the
        experts' width, then ``post_feedforward_layernorm_2``."""
        shape, tape = self.shape, self.tape
        layout = _layout(self.arch)
        rows, h = shape.stream_tokens, shape.hidden
        expert_width = layout.moe_intermediate_size * shape.intermediate // max(self.arch.intermediate_size, 1)
        self._router_input = residual
        expert_input = self.norm(NAMES.pre_feedforward_norm_2, residual, rows, h)
        dense_shape = self.shape
        self.shape = replace(dense_shape, intermediate=max(expert_width, 1))
        try:
            experts_out = self._moe(expert_input)
        finally:
            self.shape = dense_shape
        tape.release(expert_input)
        out = self.norm(NAMES.post_feedforward_norm_2, experts_out, rows, h)
        tape.release(experts_out)
        return out

    # ------------------------------------------------------------------ the layer
    def layer(self, x: Sym) -> Sym:
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        layout = _layout(arch)
        rows, h = shape.stream_tokens, shape.hidden
        normed = self.norm(names.input_norm, x, rows, h)
        attended = self.attention(normed)
        tape.release(normed)
        post = self.norm(names.post_attention_norm, attended, rows, h)
        tape.release(attended)
        hidden = tape.add(x, post)
        tape.release(post)
        normed = self.norm(names.pre_feedforward_norm, hidden, rows, h)
        mixed = self._dense_mlp(names.mlp, normed, shape.intermediate)
        tape.release(normed)
        if arch.is_moe:
            dense_normed = self.norm(NAMES.post_feedforward_norm_1, mixed, rows, h)
            tape.release(mixed)
            routed = self._moe_block(hidden)
            mixed = tape.add(dense_normed, routed)
            tape.release(dense_normed, routed)
        post = self.norm(names.post_feedforward_norm, mixed, rows, h)
        tape.release(mixed)
        out = tape.add(hidden, post)
        tape.release(hidden, post)
        if layout.has_per_layer_inputs:
            p = layout.per_layer_input_size
            gate = self.linear(NAMES.per_layer_input_gate, out, h, p, False)
            activated = self._activation(gate)
            tape.release(gate)
            per_layer_input = Sym(rows * p, self.kernels.stream_dtype, self._per_layer_inputs_require_grad(), "external")
            gated = tape.mul(activated, per_layer_input)
            tape.release(activated)
            projected = self.linear(NAMES.per_layer_projection, gated, p, h, False)
            tape.release(gated)
            normed = self.norm(NAMES.post_per_layer_input_norm, projected, rows, h)
            tape.release(projected)
            summed = tape.add(out, normed)
            tape.release(out, normed)
            out = summed
        return out  # hidden_states *= self.layer_scalar: in place, by a buffer (nothing saved)

    def _per_layer_inputs_require_grad(self) -> bool:
        trains = self.trainability.trains
        return trains(NAMES.embed_tokens) or trains(NAMES.embed_tokens_per_layer) or trains(NAMES.per_layer_model_projection)


def trace_gemma4_embedding(
    arch: Architecture,
    shape: LayerShape,
    kernels: LayerKernels,
    trainability: Trainability,
    parameter_grads_exist: bool = False,
    token_grad_exists: bool = False,
    checkpointing: str = "none",
) -> Trace:
    """``Gemma4TextModel.forward`` before the layers: ``embed_tokens`` × √h, then the per-layer inputs
    (``get_per_layer_inputs``, ``project_per_layer_inputs``). The (b, s, L, p) per-layer inputs are saved
    by every layer (each multiplies its slice, a view of the whole), so they live until the backward of the
    first layer: counted here as a saved tensor of the embedding."""
    layout = _layout(arch)
    tape = Tape(device=kernels.device, autocast=kernels.autocast)
    tokens, h = shape.stream_tokens, shape.hidden
    trains = trainability.trains
    weight = Sym(arch.vocab_size * h, kernels.weight_dtype, trains(NAMES.embed_tokens),
                 "external" if token_grad_exists else "parameter")
    ids = Sym(tokens, "int64", False, "external")
    looked_up = tape.new(tokens * h, kernels.weight_dtype, weight.requires_grad)
    tape.record("embedding", [ids], [weight], [looked_up])
    embeds = tape.mul(looked_up, Sym(1, looked_up.dtype, False))  # * embed_scale (a buffer)
    tape.release(looked_up)
    outputs = [embeds]
    if layout.has_per_layer_inputs:
        program = Gemma4Program(arch, shape, kernels, trainability, tape)
        width = arch.num_hidden_layers * layout.per_layer_input_size
        table = Sym(layout.per_layer_vocab_size * width, kernels.weight_dtype, trains(NAMES.embed_tokens_per_layer), "parameter")
        rows = tape.new(tokens * width, kernels.weight_dtype, table.requires_grad)
        tape.record("embedding", [ids], [table], [rows])
        token_part = tape.scale(rows)  # * embed_scale (a buffer without grad)
        tape.release(rows)
        projected = program.linear(NAMES.per_layer_model_projection, embeds, h, width, False)
        scaled = tape.scale(projected)  # * hidden_size**-0.5
        tape.release(projected)
        normed = program.norm(NAMES.per_layer_projection_norm, scaled, tokens * arch.num_hidden_layers,
                              layout.per_layer_input_size)
        tape.release(scaled)
        summed = tape.add(normed, token_part)
        tape.release(normed, token_part)
        per_layer_inputs = tape.scale(summed, kernels.stream_dtype)  # * 2**-0.5
        tape.release(summed)
        tape.saved_storages.setdefault(per_layer_inputs.storage, per_layer_inputs)  # saved by the layers' products
        outputs.append(per_layer_inputs)
    saved = tape.saved_bytes(("activation",))
    return replay(tape, outputs, tape.peak_live_bytes, tape.live_bytes() - saved, False, parameter_grads_exist)


def _strict_float(fields: ConfigFields, name: str) -> Optional[float]:
    """A ``float | None`` field of the strict ``Gemma4TextConfig`` dataclass: transformers refuses an integer
    (``StrictDataclassFieldValidationError``: 30 is not a float, 30.0 is)."""
    value = fields.raw(name)
    if isinstance(value, int) and not isinstance(value, bool):
        raise fields.fail(name, f"expected a float such as {float(value)!r}, got the integer {value} (Gemma4TextConfig is strict)")
    return fields.optional_number(name, minimum=1e-9)


class Gemma4Text(DecoderFamily):
    model_type = "gemma4_text"
    names = NAMES
    lora_default_targets = None  # peft 0.21: no gemma4_text entry (the gemma4 wrapper's is a language_model regex)
    model_level_lora_modules = (NAMES.per_layer_model_projection,)
    """An ``nn.Linear`` of the base model that PEFT's ``all-linear`` adapts too (trainmem.lora_targets)."""
    traces_own_embedding = True
    """simulate.py runs :meth:`trace_embedding` (the per-layer inputs) instead of ``ends.trace_embedding``."""

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, GEMMA4_TEXT_DEFAULTS)
        common["hidden_act"] = fields.activation("hidden_activation", "gelu_pytorch_tanh")
        layers = common["num_hidden_layers"]
        layer_types = checked_layer_types(fields, layers)
        if not layer_types:
            layer_types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(layers)]
        layer_types[-1] = "full_attention"  # Gemma4TextConfig.__post_init__ forces the last layer global
        window = fields.integer("sliding_window", 512)
        bidirectional = fields.raw("use_bidirectional_attention")
        if bidirectional not in (None, "all", "vision"):
            raise fields.fail("use_bidirectional_attention", f"expected null, 'all' or 'vision', got {bidirectional!r}")
        if bidirectional == "all":
            window = window // 2 + 1  # __post_init__: exclusive bounds for flash attention
        shared = fields.integer("num_kv_shared_layers", 0, minimum=0, maximum=layers)
        first_shared = layers - shared
        if 0 < shared < layers and set(layer_types[:first_shared]) != set(layer_types):
            raise fields.fail(
                "num_kv_shared_layers",
                f"the {first_shared} layers before the KV-shared ones must include every layer type of layer_types "
                "(Gemma4TextConfig.kv_sharing_modes)",
            )
        if shared == layers:
            raise fields.fail("num_kv_shared_layers", "cannot share keys and values in every layer: no layer makes them")
        k_eq_v = fields.boolean("attention_k_eq_v", False)
        moe = fields.boolean("enable_moe_block", False)
        experts = top_k = moe_width = 0
        if moe:
            for name in ("num_experts", "top_k_experts", "moe_intermediate_size"):
                if fields.optional_integer(name) is None:
                    raise fields.fail(name, "is required with enable_moe_block (Gemma4TextExperts builds its tensors from it)")
            experts = fields.integer("num_experts", 1)
            top_k = fields.integer("top_k_experts", 1)
            moe_width = fields.integer("moe_intermediate_size", 1)
        global_head_dim = fields.integer("global_head_dim", 512)
        global_kv = fields.optional_integer("num_global_key_value_heads")
        bias = fields.boolean("attention_bias", False)
        layout = Gemma4Layout(
            global_head_dim=global_head_dim,
            global_key_value_heads=global_kv,
            attention_k_eq_v=k_eq_v,
            kv_shared_layers=tuple(range(first_shared, layers)),
            double_wide_mlp=fields.boolean("use_double_wide_mlp", False),
            per_layer_input_size=fields.integer("hidden_size_per_layer_input", 256, minimum=0),
            per_layer_vocab_size=fields.integer("vocab_size_per_layer_input", 262_144),
            moe_intermediate_size=moe_width,
            layer_types=tuple(layer_types),
        )
        sliding = tuple(i for i, kind in enumerate(layer_types) if kind == "sliding_attention")
        if not sliding:  # every layer global: the model-level head width is theirs (the rotary table's too)
            common["head_dim"] = global_head_dim
            if k_eq_v and global_kv is not None:
                common["num_key_value_heads"] = global_kv
        if k_eq_v and global_kv is not None and common["num_attention_heads"] % global_kv:
            raise fields.fail(
                "num_global_key_value_heads",
                f"num_attention_heads ({common['num_attention_heads']}) must be a multiple of num_global_key_value_heads ({global_kv})",
            )
        return Architecture(
            **common,
            norms_per_layer=4,
            qk_norm=True,
            attention_qkv_bias=bias,
            attention_output_bias=bias,
            scale_embeddings=True,
            embedding_scale_buffer=True,
            final_logit_softcapping=_strict_float(fields, "final_logit_softcapping"),
            sliding_window=window,
            sliding_layers=sliding,
            num_experts=experts,
            num_experts_per_tok=top_k or 1,
            gemma4=layout,
        )

    # ------------------------------------------------------------------ inventory
    def embedding(self, arch: Architecture) -> list[ParameterTensor]:
        layout = _layout(arch)
        h = arch.hidden_size
        tensors = [ParameterTensor(f"{NAMES.embed_tokens}.weight", "embeddings", (arch.vocab_size, h))]
        if layout.has_per_layer_inputs:
            width = arch.num_hidden_layers * layout.per_layer_input_size
            tensors.append(ParameterTensor(f"{NAMES.embed_tokens_per_layer}.weight", "embeddings", (layout.per_layer_vocab_size, width)))
            tensors += blocks.linear(NAMES.per_layer_model_projection, "embeddings", h, width, False)
            tensors += blocks.norm(NAMES.per_layer_projection_norm, arch, layout.per_layer_input_size)
        return tensors

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        layout = _layout(arch)
        h, d, bias = arch.hidden_size, arch.resolved_head_dim, arch.attention_qkv_bias
        tensors = blocks.linear(NAMES.q_proj, "attention", h, arch.query_width, bias)
        tensors += blocks.norm(NAMES.q_norm, arch, d)
        if not layout.layer_kv_shared:
            tensors += blocks.norm(NAMES.k_norm, arch, d)
            tensors += blocks.linear(NAMES.k_proj, "attention", h, arch.key_value_width, bias)
            if not (layout.attention_k_eq_v and layout.layer_global):
                tensors += blocks.linear(NAMES.v_proj, "attention", h, arch.key_value_width, bias)
        tensors += blocks.linear(NAMES.o_proj, "attention", arch.query_width, h, arch.attention_output_bias)
        tensors += blocks.dense_mlp(arch, NAMES, NAMES.mlp, arch.intermediate_size)
        tensors += blocks.layer_norms(arch, NAMES)
        if layout.has_per_layer_inputs:
            p = layout.per_layer_input_size
            tensors += blocks.linear(NAMES.per_layer_input_gate, "mlp", h, p, False)
            tensors += blocks.linear(NAMES.per_layer_projection, "mlp", p, h, False)
            tensors += blocks.norm(NAMES.post_per_layer_input_norm, arch, h)
        if arch.is_moe:
            experts, width = arch.num_experts, layout.moe_intermediate_size
            tensors += [
                ParameterTensor(f"{NAMES.router_scale}", "router", (h,)),
                ParameterTensor("router.per_expert_scale", "router", (experts,)),
                *blocks.linear(NAMES.router, "router", h, experts, False),
                ParameterTensor(f"{NAMES.experts}.gate_up_proj", "experts", (experts, 2 * width, h)),
                ParameterTensor(f"{NAMES.experts}.down_proj", "experts", (experts, h, width)),
            ]
            for module in (NAMES.post_feedforward_norm_1, NAMES.post_feedforward_norm_2, NAMES.pre_feedforward_norm_2):
                tensors += blocks.norm(module, arch, h)
        return tensors

    # ------------------------------------------------------------------ buffers and tables
    def rotary_tables_bytes(self, arch: Architecture, seq: int, stream_bytes: int) -> list[int]:
        """cos and sin, (1, s, d) in the stream dtype, per layer type (``position_embeddings[layer_type]``):
        the sliding layers' head width and the global layers' ``global_head_dim`` (proportional RoPE returns
        tables as wide as the head)."""
        layout = _layout(arch)
        widths = [layout.global_head_dim]
        if "sliding_attention" in layout.layer_types:
            widths = [arch.resolved_head_dim, layout.global_head_dim]
        return [seq * width * stream_bytes for width in widths for _ in (0, 1)]

    def layer_buffer_numels(self, arch: Architecture) -> list[int]:
        """``layer_scalar`` (one element per layer), the per-layer table's ``embed_scale``, and the global
        layers' ``inv_freq``/``original_inv_freq`` (the sliding ones are the default rotary buffers)."""
        layout = _layout(arch)
        numels = [1] * arch.num_hidden_layers
        if layout.has_per_layer_inputs:
            numels.append(1)
        if "sliding_attention" in layout.layer_types:
            numels += [layout.global_head_dim // 2] * 2
        return numels

    def trace_embedding(self, arch, shape, kernels, trainability, grads_exist, tied, checkpointing) -> Trace:
        return trace_gemma4_embedding(arch, shape, kernels, trainability, grads_exist, tied, checkpointing)

    def program(self) -> type[LayerProgram]:
        return Gemma4Program

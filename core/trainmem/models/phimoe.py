"""PhiMoE: Phi-3.5-MoE (transformers/models/phimoe, transformers 5.24).

* Layout: Mixtral's (``num_local_experts`` SwiGLU experts, fused in transformers 5 into
  ``mlp.experts.gate_up_proj`` E×2i×h and ``mlp.experts.down_proj`` E×h×i, run through the
  ``grouped_mm`` experts like Mixtral's), with **LayerNorm with biases** (``nn.LayerNorm``
  for ``input_layernorm``, ``post_attention_layernorm`` and the final ``norm``; ``rms_norm_eps``
  is its eps), biases on q, k, v **and o** (``attention_bias``), and a bias on the output head
  (``lm_head_bias``). RoPE is ``rotate_half`` on whole heads; LongRoPE (``rope_scaling`` /
  ``rope_parameters`` of type ``longrope``) rescales the frequencies and multiplies cos and sin
  by ``short_mscale`` / ``long_mscale`` (``PhimoeRotaryEmbedding.forward``): values, not shapes.
  ``sliding_window`` applies to every layer (``create_sliding_window_causal_mask``).
* Router: ``mlp.router`` is ``PhimoeTopKRouter``, a **subclass of** ``nn.Linear`` (h → E, no
  bias) whose forward runs **sparsemixer** (Liu et al. 2024, "GRIN: GRadient-INformed MoE",
  arXiv:2409.12136): in training each of the two experts is drawn by Gumbel sampling among the
  logits within ``2·router_jitter_noise`` (relative) of the maximum, its weight is the softmax
  of the masked logits at the drawn expert, and a custom autograd function
  (``PhimoeMultiplier``) sends a Heun third-order gradient estimate to the logits only. The
  second expert repeats this on the logits with the first one scattered to −inf. It always
  routes **two** experts (``top_k`` is not used), so trainmem refuses any other
  ``num_experts_per_tok``. What it saves per token is a few E-wide tensors (masks, two
  softmaxes) and scalars; the softmax/gather nodes behind the multipliers never run in backward
  (the custom function returns no gradient for them), so their saved tensors live until the
  graph is freed.
* ``input_jitter_noise`` (0.01 in Phi-3.5-MoE-instruct, 0 by default): in training the MoE block
  *and* the router each multiply the hidden states in place by ``U(1 − eps, 1 + eps)`` noise
  (``hidden_states *= torch.empty_like(...).uniform_(...)``); each product saves its noise tensor
  (one token×hidden tensor of the stream's dtype, twice per layer).
* PEFT (0.21): no default ``target_modules`` for phimoe and no v4→v5 MoE conversion
  (``_MODEL_TO_CONVERSION_PATTERN`` has no phimoe), so the fused experts are never adapted. Since
  the router *is* an ``nn.Linear``, ``all-linear`` (and a target naming ``router``) wraps it in a
  ``lora.Linear`` — PEFT counts those adapters (trainmem too) — but ``lora.Linear.forward`` then
  adds the adapter's output to the router's tuple and the step fails (AttributeError: 'tuple' object
  has no attribute 'dtype', checked with peft 0.21.2): trainmem refuses it in one line.
* Measured (corpus ``phimoe-small-*``: fp32, AMP with eager attention and with full checkpointing,
  pure bf16 LoRA, fake tensors; ``phi35moe-*-fake``: the 41.9B preset with LoRA): every peak within
  0.013 % (the small cases 2 KB under to 61 KB over).
* bitsandbytes: ``replace_with_bnb_linear`` converts modules whose ``type(module) is nn.Linear``
  (transformers/integrations/bitsandbytes.py): the router subclass, the 3-D experts and the
  output head keep the load dtype; q, k, v, o are quantised.
"""

from __future__ import annotations

from typing import Optional

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import DTYPE_BYTES, Sym
from . import blocks
from .blocks import ModuleNames, ParameterTensor
from .family import DecoderFamily, common_decoder_fields, sliding_window_fields
from .fields import ConfigFields

PHIMOE_DEFAULTS = dict(
    vocab_size=32064,
    hidden_size=4096,
    intermediate_size=6400,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    max_position_embeddings=4096 * 32,
    tie_word_embeddings=False,
)
"""``PhimoeConfig``'s defaults (the shapes of Phi-3.5-MoE)."""

PHIMOE_NAMES = ModuleNames(router="mlp.router", experts="mlp.experts")

SPARSEMIXER_EXPERTS = 2
"""sparsemixer picks exactly two experts per token (``sparsemixer(..., top_k=2)`` ignores top_k)."""

ROUTER_LORA_MESSAGE = (
    "PEFT wraps phimoe's router (PhimoeTopKRouter subclasses nn.Linear) in a lora.Linear whose forward then "
    "fails on the router's tuple output (peft 0.21); leave mlp.router out, e.g. target_modules "
    "['q_proj', 'k_proj', 'v_proj', 'o_proj']"
)


class Phimoe(DecoderFamily):
    model_type = "phimoe"
    names = PHIMOE_NAMES
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, PHIMOE_DEFAULTS)
        experts = fields.integer("num_local_experts", 16, minimum=SPARSEMIXER_EXPERTS)
        per_token = fields.integer("num_experts_per_tok", SPARSEMIXER_EXPERTS)
        if per_token != SPARSEMIXER_EXPERTS:
            raise fields.fail(
                "num_experts_per_tok",
                f"phimoe's sparsemixer router always picks 2 experts per token (transformers ignores top_k), got {per_token}",
            )
        for name in ("rope_parameters", "rope_scaling"):
            fields.mapping(name)  # LongRoPE: frequencies and cos/sin scales only, no shape
        fields.number("router_jitter_noise", 0.01, minimum=0.0)
        bias = fields.boolean("attention_bias", False)
        return Architecture(
            **common,
            **sliding_window_fields(fields, common["num_hidden_layers"], None),
            norm="layernorm",
            attention_qkv_bias=bias,
            attention_output_bias=bias,
            num_experts=experts,
            num_experts_per_tok=per_token,
            lm_head_bias=fields.boolean("lm_head_bias", False),
            input_jitter_noise=fields.probability("input_jitter_noise"),
        )

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        names = self.names
        h, experts = arch.hidden_size, arch.num_experts
        router = ParameterTensor(f"{names.router}.weight", "router", (experts, h), (h, experts))  # an nn.Linear
        routed = [tensor for tensor in blocks.moe_mlp(arch, names) if tensor.group == "experts"]
        return blocks.attention(arch, names) + [router] + routed + blocks.layer_norms(arch, names)

    def head(self, arch: Architecture) -> list[ParameterTensor]:
        tensors = super().head(arch)
        if arch.lm_head_bias:
            tensors.append(ParameterTensor(f"{self.names.lm_head}.bias", "lm_head", (arch.vocab_size,)))
        return tensors

    def quantized_by_bitsandbytes(self, tensor: ParameterTensor) -> bool:
        """``type(module) is nn.Linear``: the router subclass stays in the load dtype."""
        return super().quantized_by_bitsandbytes(tensor) and tensor.group != "router"

    def unsupported_lora_targets(self, targets) -> Optional[str]:
        return ROUTER_LORA_MESSAGE if self.names.router in targets.modules else None

    def program(self) -> type[LayerProgram]:
        return PhimoeProgram


class PhimoeProgram(LayerProgram):
    """PhiMoE's input jitter and sparsemixer router on the tape; the experts are Mixtral's."""

    def _moe(self, x: Sym) -> Sym:
        """``PhimoeSparseMoeBlock.forward``: input jitter in the block and again in the router (both in
        place, on the same storage), then the router and the grouped experts; the (tokens, 2) int64
        expert indices live until the experts are done."""
        if self.arch.input_jitter_noise > 0:
            x = self._jitter(self._jitter(x))
        self._expert_indices: Optional[Sym] = None
        out = super()._moe(x)
        if self._expert_indices is not None:
            self.tape.release(self._expert_indices)
        return out

    def _jitter(self, x: Sym) -> Sym:
        """``hidden_states *= torch.empty_like(hidden_states).uniform_(1 - eps, 1 + eps)``: MulBackward0
        saves the noise (the other operand); the result is x's storage, a new version."""
        tape = self.tape
        noise = tape.new(x.numel, x.dtype, False)
        out = x.view()
        tape.record("mul_", [noise], [x], [out])
        tape.release(noise)
        return out

    def _route(self, x: Sym) -> Sym:
        """``PhimoeTopKRouter.forward``: the router logits (``nn.Linear``, no bias), then sparsemixer's two
        picks; returns the (tokens, 2) multipliers (``torch.concat`` of the two)."""
        arch, shape, tape = self.arch, self.shape, self.tape
        tokens, experts = shape.stream_tokens, arch.num_experts
        weight = self.parameter(self.names.router, experts * shape.hidden)
        scores = tape.linear(x, weight, experts)
        first, first_index, held = self._sparsemixer_pick(scores, scores, [])
        masked_scores = tape.new(tokens * experts, scores.dtype, scores.requires_grad)  # scatter(scores, -1, sel, -inf)
        tape.record("scatter", [first_index], [scores], [masked_scores])
        second, second_index, held = self._sparsemixer_pick(masked_scores, scores, held)
        multipliers = tape.new(2 * tokens, tape.promote(first.dtype, second.dtype), True)
        tape.record("cat", [], [first, second], [multipliers])
        self._expert_indices = tape.new(2 * tokens, "int64", False)  # concat of the selected experts
        tape.release(first, second, first_index, second_index, masked_scores, scores, *held)
        return multipliers

    def _sparsemixer_pick(self, candidates: Sym, scores: Sym, held: list[Sym]) -> tuple[Sym, Sym, list[Sym]]:
        """One of sparsemixer's two rounds (training mode) over ``candidates`` (the logits, or the logits with
        the first pick at −inf). Returns the multiplier (tokens, 1), the selected expert (tokens, 1, int64)
        and the locals that stay referenced until sparsemixer returns (``factor``, the no-grad argmax)."""
        tape = self.tape
        tokens, experts = self.shape.stream_tokens, self.arch.num_experts
        rows, dtype = tokens * experts, candidates.dtype
        tape.release(*held)  # ``factor`` and ``max_ind`` of the previous round are rebound now
        # torch.no_grad(): threshold, argmax = max(dim=-1, keepdim); factor = |scores|.clamp(min=threshold);
        # mask = ((threshold - scores) / factor) > 2 * jitter_eps
        threshold = tape.new(tokens, dtype, False)
        argmax = tape.new(tokens, "int64", False)
        absolute = tape.new(rows, dtype, False)
        factor = tape.new(rows, dtype, False)
        tape.release(absolute)
        difference = tape.new(rows, dtype, False)
        ratio = tape.new(rows, dtype, False)
        tape.release(difference)
        mask = tape.new(rows, "bool", False)
        tape.release(ratio, threshold)
        masked = tape.new(rows, dtype, candidates.requires_grad)
        tape.record("masked_fill", [mask], [candidates], [masked])  # saves the mask
        tape.release(mask)
        # Gumbel sampling: (masked - empty_like(masked).exponential_().log()).max(dim=-1)[1]
        exponential = tape.new(rows, dtype, False)
        log = tape.new(rows, dtype, False)
        tape.release(exponential)
        perturbed = tape.new(rows, dtype, masked.requires_grad)
        tape.record("sub", [], [masked], [perturbed])
        tape.release(log)
        values = tape.new(tokens, dtype, perturbed.requires_grad)
        selected = tape.new(tokens, "int64", False)
        tape.record("max", [selected], [perturbed], [values])  # saves the indices
        tape.release(values, perturbed)
        # masked_gates = softmax(masked_gates, dim=-1) (autocast's fp32 list on CPU); gather at the pick
        softmax_input = tape.autocast_input("softmax", masked)
        gates = tape.unary_saving_result("softmax", softmax_input, dtype=softmax_input.dtype)
        if softmax_input is not masked:
            tape.release(softmax_input)
        tape.release(masked)
        picked = tape.new(tokens, gates.dtype, gates.requires_grad)
        tape.record("gather", [selected], [gates], [picked])
        # Heun's midpoint mask: max of the gates (saves the indices), rand_like > 0.75, a (tokens, 1) float
        best = tape.new(tokens, gates.dtype, gates.requires_grad)
        best_index = tape.new(tokens, "int64", False)
        tape.record("max", [best_index], [gates], [best])
        uniform = tape.new(tokens, gates.dtype, False)
        above = tape.new(tokens, "bool", False)
        tape.release(uniform)
        same = tape.new(tokens, "bool", False)
        either = tape.new(tokens, "bool", False)
        tape.release(above, same)
        ones = tape.new(tokens, "fp32", False)  # torch.add(0.3333, mask, alpha=0.6667): default dtype
        tape.release(either)
        mask_for_one = tape.to(ones, gates.dtype)  # .type_as(masked_gates)
        if mask_for_one is not ones:
            tape.release(ones)
        tape.release(best)
        # PhimoeMultiplier.apply: saves multiplier, selected experts, masked gates; gradient to scores only
        multiplier = tape.new(tokens, tape.promote(picked.dtype, mask_for_one.dtype), True)
        # its backward: grad * multiplier and -grad (tokens each), masked_gates * -grad (the logits' gradient,
        # cast to the logits' dtype by the engine when the gates are fp32: one E-wide scratch more)
        scratch = 2 * tokens * DTYPE_BYTES[gates.dtype] + (rows * DTYPE_BYTES[gates.dtype] if gates.dtype != scores.dtype else 0)
        tape.record("phimoe_multiplier", [picked, selected, gates], [scores], [multiplier], scratch)
        tape.release(mask_for_one, picked, gates, best_index)
        return multiplier, selected, [factor, argmax]


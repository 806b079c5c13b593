"""Llama 4 text models (transformers/models/llama4, ``Llama4ForCausalLM``; the multimodal ``llama4``
config is read through its ``text_config``).

What differs from Llama, as ``modeling_llama4.py`` runs it:

* MoE layers (``moe_layers``, every ``interleave_moe_layer_step``-th layer; Maverick interleaves
  dense layers of ``intermediate_size_mlp``) hold ``num_local_experts`` experts as two 3-D parameters
  laid out (E, h, 2i) and (E, i, h), an ``nn.Linear`` router (so bitsandbytes quantises it and PEFT's
  all-linear adapts it) and an always-on shared expert of ``intermediate_size``. ``Llama4TextMoe``
  computes every expert on every token: ``hidden.repeat(E, 1)`` scaled by the sigmoid of the top-k
  scores (the other scores are -inf, so 0), then two ``torch.bmm`` over (E, tokens, ·) — activations
  E times a dense MLP's, which is what a Llama 4 step in transformers costs.
* RoPE as complex numbers (``apply_rotary_emb``: ``x.float()`` viewed as complex, multiplied by the
  complex64 ``freqs_cis`` table, cast back), skipped on ``no_rope_layers`` (every 4th layer, NoPE),
  where ``attn_temperature_tuning`` multiplies q by a per-position fp32 factor instead; a weightless L2
  norm of q and k after RoPE (``use_qk_norm``, rope layers only).
* Chunked attention (``attention_chunk_size``) is a mask: it changes no shape.

PEFT's mapping has defaults for the multimodal ``llama4`` type, not for ``llama4_text``, so for the
text model ``get_peft_model`` asks for ``target_modules``, and so does trainmem.
"""

from __future__ import annotations

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from . import blocks
from .blocks import ModuleNames, ParameterTensor
from .family import DecoderFamily, common_decoder_fields, sliding_window_fields
from .fields import ConfigFields

LLAMA4_TEXT_DEFAULTS = dict(
    vocab_size=202048,
    hidden_size=5120,
    intermediate_size=8192,
    num_hidden_layers=48,
    num_attention_heads=40,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=4096 * 32,
    tie_word_embeddings=False,
)

LLAMA4_NAMES = ModuleNames(
    mlp="feed_forward",
    router="feed_forward.router",
    experts="feed_forward.experts",
    shared_expert="feed_forward.shared_expert",
)


class Llama4Program(LayerProgram):
    def _position_and_norm(self, q: Sym, k: Sym, produced: list[Sym]) -> tuple[Sym, Sym, bool]:
        arch, tape = self.arch, self.tape
        if arch.layer_rope:
            q_rot, k_rot = self._complex_rope(q), self._complex_rope(k)
            tape.release(q, k)
            q, k = q_rot, k_rot
            if arch.qk_l2_norm:  # Llama4TextL2Norm: _norm(x.float()).type_as(x)
                q_normed, k_normed = self._l2_norm(q), self._l2_norm(k)
                tape.release(q, k)
                q, k = q_normed, k_normed
        elif arch.attention_temperature_tuning:  # (query_states * attn_scales).to(query_states.dtype)
            scales = Sym(self.shape.seq, "fp32", False, "external")
            scaled = tape.mul(q, scales)
            tape.release(q)
            cast = tape.to(scaled, q.dtype)
            if cast is not scaled:
                tape.release(scaled)
            q = cast
        return q, k, False

    def _complex_rope(self, x: Sym) -> Sym:
        """``view_as_real(view_as_complex(x.float()) * freqs_cis).type_as(x)``."""
        tape = self.tape
        x32 = tape.to(x, "fp32")
        freqs = Sym(self.shape.seq * self.shape.head_dim, "fp32", False, "external")  # complex64 (s, d/2)
        rotated = tape.mul(x32, freqs)
        if x32 is not x:
            tape.release(x32)
        out = tape.to(rotated, x.dtype)
        if out is not rotated:
            tape.release(rotated)
        return out

    def _l2_norm(self, x: Sym) -> Sym:
        normalized = self._normalize_in_fp32(x, x.numel // self.shape.head_dim)
        out = self.tape.to(normalized, x.dtype)
        if out is not normalized:
            self.tape.release(normalized)
        return out

    def _moe(self, x: Sym) -> Sym:
        """``Llama4TextMoe.forward``: every expert on every token (see the module docstring)."""
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        h, experts, tokens = shape.hidden, shape.local_experts or arch.num_experts, shape.stream_tokens
        logits = self.linear(names.router, x, h, arch.num_experts, False)
        top = tape.gather(logits, tokens * shape.experts_per_token, tokens * shape.experts_per_token)  # topk
        scores = tape.new(tokens * arch.num_experts, logits.dtype, logits.requires_grad)  # full_like(-inf)
        tape.record("scatter", [Sym(tokens * shape.experts_per_token, "int64", False)], [top], [scores])
        tape.release(logits, top)
        scores32 = tape.to(scores, "fp32")
        sigmoid = tape.unary_saving_result("sigmoid", scores32)
        if scores32 is not scores:
            tape.release(scores32)
        tape.release(scores)
        weights = tape.to(sigmoid, x.dtype)
        if weights is not sigmoid:
            tape.release(sigmoid)
        repeated = tape.copy(x, experts * tokens * h)  # hidden_states.repeat(E, 1)
        column = tape.copy(weights, experts * tokens)  # scores.transpose(0, 1).reshape(-1, 1)
        tape.release(weights)
        routed = tape.mul(repeated, column)
        tape.release(repeated, column)
        trains = self.trainability.trains(names.experts)
        gate_up_weight = Sym(experts * h * 2 * shape.intermediate, self.kernels.weight_dtype, trains, "parameter")
        down_weight = Sym(experts * shape.intermediate * h, self.kernels.weight_dtype, trains, "parameter")
        gate_up = tape.linear(routed, gate_up_weight, 2 * shape.intermediate, in_features=h, op="bmm")
        tape.release(routed)
        gate, up = tape.split(gate_up, [gate_up.numel // 2, gate_up.numel // 2])
        activated = self._activation(gate)
        product = tape.mul(up, activated)
        tape.release(gate_up, activated)
        down = tape.linear(product, down_weight, h, in_features=shape.intermediate, op="bmm")
        tape.release(product)
        shared = self._dense_mlp(names.shared_expert, x, shape.shared_intermediate)
        summed = tape.reduce(down, tokens * h)  # routed_out.reshape(E, tokens, h).sum(dim=0)
        tape.release(down)
        total = tape.add(shared, summed)  # out.add_(...): in place on the shared expert's output
        tape.release(summed)
        if total is not shared:
            tape.release(shared)
        return total


class Llama4Text(DecoderFamily):
    model_type = "llama4_text"
    names = LLAMA4_NAMES
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, LLAMA4_TEXT_DEFAULTS)
        layers = common["num_hidden_layers"]
        step = fields.integer("interleave_moe_layer_step", 1)
        moe_layers = fields.integer_list("moe_layers", list(range(step - 1, layers, step)), maximum=layers - 1)
        interval = fields.integer("no_rope_layer_interval", 4)
        uses_rope = fields.integer_list("no_rope_layers", maximum=1) or [int((i + 1) % interval != 0) for i in range(layers)]
        if len(uses_rope) != layers:
            raise fields.fail("no_rope_layers", f"has {len(uses_rope)} entries for {layers} layers")
        experts = fields.integer("num_local_experts", 16)
        chunk = fields.optional_integer("attention_chunk_size") if "attention_chunk_size" in fields.config else 8192
        rope_layers = tuple(i for i, rope in enumerate(uses_rope) if rope)
        # Chunked attention (layer_types "chunked_attention", the rope layers by default) passes SDPA a
        # materialised mask once the keys reach the chunk size, as a sliding window does.
        window = {} if chunk is None else sliding_window_fields(
            ConfigFields({k: v for k, v in fields.config.items() if k != "sliding_window"} | {"sliding_window": chunk}, fields.prefix),
            layers, chunk, rope_layers, types=("chunked_attention",),
        )
        bias = fields.boolean("attention_bias", False)
        return Architecture(
            **common,
            attention_qkv_bias=bias,
            attention_output_bias=bias,
            num_experts=experts,
            num_experts_per_tok=fields.integer("num_experts_per_tok", 1),
            shared_expert_intermediate_size=common["intermediate_size"],
            dense_layers=tuple(i for i in range(layers) if i not in set(moe_layers)),
            dense_intermediate_size=fields.integer("intermediate_size_mlp", 16384),
            nope_layers=tuple(i for i, rope in enumerate(uses_rope) if not rope),
            qk_l2_norm=fields.boolean("use_qk_norm", True),
            **window,
            attention_temperature_tuning=fields.boolean("attn_temperature_tuning", True),
        )

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        names = self.names
        if not arch.is_moe:
            mlp = blocks.dense_mlp(arch, names, names.mlp, arch.intermediate_size)
        else:
            h, i, experts = arch.hidden_size, arch.intermediate_size, arch.num_experts
            mlp = [
                ParameterTensor(f"{names.experts}.gate_up_proj", "experts", (experts, h, 2 * i)),
                ParameterTensor(f"{names.experts}.down_proj", "experts", (experts, i, h)),
                ParameterTensor(f"{names.router}.weight", "router", (experts, h), (h, experts)),
                *blocks.dense_mlp(arch, names, names.shared_expert, arch.shared_expert_intermediate_size),
            ]
        return blocks.attention(arch, names) + mlp + blocks.layer_norms(arch, names)

    def rotary_tables_bytes(self, arch: Architecture, seq: int, stream_bytes: int) -> list[int]:
        """``freqs_cis``: one complex64 (s, d/2) table, computed in fp32 whatever the model's dtype."""
        return [seq * arch.resolved_head_dim * 4]

    def program(self) -> type[LayerProgram]:
        return Llama4Program

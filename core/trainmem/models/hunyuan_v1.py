"""Tencent Hunyuan: ``hunyuan_v1_dense`` (Hunyuan-0.5B … 7B) and ``hunyuan_v1_moe`` (Hunyuan-A13B);
transformers/models/hunyuan_v1_dense and hunyuan_v1_moe, transformers 5.24.

Both share one attention (``HunYuanDenseV1Attention`` / ``HunYuanMoEV1Attention``): Llama's q/k/v/o projections
(``attention_bias`` on all four), RoPE **first**, then an RMSNorm over each head of the rotated query and key
(``query_layernorm`` / ``key_layernorm``, ``head_dim`` features each: always built, whatever the checkpoint's
``use_qk_norm`` says), where Qwen3 norms before RoPE. The dense model is otherwise Llama (``LlamaMLP``,
``LlamaDecoderLayer``; NTK-alpha RoPE changes frequencies, not shapes).

The MoE layer (``HunYuanMoEV1Moe.forward``) runs an always-on ``mlp.shared_mlp`` (a Llama MLP of
``intermediate_size``) **before** the router, then ``HunYuanMoEV1Gate``: an ``nn.Linear`` ``mlp.gate.wg`` (created
in fp32; the input is cast to fp32 when the weight is), an fp32 softmax, top-``moe_topk``, the chosen weights
divided in place by their sum and cast to the logits' dtype; then ``num_experts`` Mixtral experts of
``intermediate_size`` (fused 3-D), added to the shared output. The checkpoints' ``moe_intermediate_size`` and
``num_shared_expert`` lists are not read by transformers (the experts and the shared MLP are
``intermediate_size`` wide); ``moe_topk`` may be a list, one per layer (trainmem takes one value for all layers).

LoRA (peft 0.21): no default targets. transformers converts hunyuan_v1_moe's v4 MoE names as Qwen2-MoE's
(conversion_mapping.py), but the router is ``gate.wg``, an ``nn.Linear``, not a ``gate.weight`` parameter, so the
router target of the conversion matches nothing (``target_modules=["gate"]`` is refused: ``NoMatchingPeftModuleError``)
and ``all-linear`` adapts ``wg`` as a linear module, the attention projections and both fused expert parameters,
not the shared MLP (whose ``gate_proj`` / ``up_proj`` / ``down_proj`` the conversion turns into expert targets;
checked with ``get_peft_model``). bitsandbytes quantises ``wg`` with the other ``nn.Linear`` modules.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from .blocks import ModuleNames, ParameterTensor
from .family import DecoderFamily, common_decoder_fields
from .fields import ConfigFields

HUNYUAN_DEFAULTS = dict(
    vocab_size=290943,
    hidden_size=4096,
    intermediate_size=11008,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=None,  # None: num_attention_heads (__post_init__)
    max_position_embeddings=2048,
    tie_word_embeddings=False,
)
"""``HunYuanDenseV1Config`` / ``HunYuanMoEV1Config`` defaults (the same in both, transformers 5.24)."""

HUNYUAN_MOE_TARGETS = {"gate_proj": "gate_up_proj", "up_proj": "gate_up_proj", "down_proj": "down_proj"}
"""PEFT's Qwen2-MoE conversion less its ``gate`` -> ``gate.weight`` entry, which matches no Hunyuan parameter."""


@dataclass(frozen=True)
class HunyuanNames(ModuleNames):
    q_norm: str = "self_attn.query_layernorm"
    k_norm: str = "self_attn.key_layernorm"
    router: str = "mlp.gate.wg"
    shared_expert: str = "mlp.shared_mlp"


class HunyuanProgram(LayerProgram):
    """Hunyuan's attention (RoPE, then per-head q/k norms) and MoE block (shared MLP first, ``nn.Linear`` gate)."""

    def _position_and_norm(self, q: Sym, k: Sym, produced: list[Sym]) -> tuple[Sym, Sym, bool]:
        tape, shape, names = self.tape, self.shape, self.names
        q_rot, k_rot = self._rope(q), self._rope(k)
        tape.release(*produced)
        tokens, d = shape.tokens, shape.head_dim
        q_normed = self.norm(names.q_norm, q_rot, tokens * shape.heads, d)
        k_normed = self.norm(names.k_norm, k_rot, tokens * shape.kv_heads, d)
        tape.release(q_rot, k_rot)
        return q_normed, k_normed, False

    def _moe(self, x: Sym) -> Sym:
        """``HunYuanMoEV1Moe.forward``: ``shared_mlp(x)`` first, then the gate and the experts, then the sum."""
        tape, full = self.tape, self.shape
        shared = self._dense_mlp(self.names.shared_expert, x, full.shared_intermediate)
        self.shape = replace(full, shared_intermediate=0)  # the routed part only
        try:
            routed = super()._moe(x)
        finally:
            self.shape = full
        out = tape.add(routed, shared)
        tape.release(routed, shared)
        return out

    def _route(self, x: Sym) -> Sym:
        """``HunYuanMoEV1Gate.forward``: ``wg`` (an ``nn.Linear``: LoRA and 4-bit loads apply), an fp32 softmax,
        top-k, the in-place renormalisation (saves the quotient and the sum), the cast to the logits' dtype."""
        arch, shape, tape = self.arch, self.shape, self.tape
        rows = shape.stream_tokens * shape.experts_per_token
        x_in = tape.to(x, "fp32") if self.kernels.weight_dtype == "fp32" else x  # if wg.weight is fp32: x.float()
        logits = self.linear(self.names.router, x_in, shape.hidden, arch.num_experts, False)
        if x_in is not x:
            tape.release(x_in)
        logits32 = tape.to(logits, "fp32")  # softmax(..., dtype=torch.float)
        probs = tape.unary_saving_result("softmax", logits32)
        if logits32 is not logits:
            tape.release(logits32)
        top = tape.gather(probs, rows, rows)  # torch.topk values
        tape.release(probs)
        total = tape.reduce(top, shape.stream_tokens)
        normalized = tape.mul(top, total)  # routing_weights /= sum
        tape.release(top, total)
        out = tape.to(normalized, logits.dtype)  # .to(router_logits.dtype)
        if out is not normalized:
            tape.release(normalized)
        tape.release(logits)
        return out


class HunyuanV1Dense(DecoderFamily):
    model_type = "hunyuan_v1_dense"
    names = HunyuanNames()
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        return Architecture(**self._common(fields), qk_norm=True)

    def _common(self, fields: ConfigFields) -> dict[str, object]:
        common = common_decoder_fields(fields, HUNYUAN_DEFAULTS)
        bias = fields.boolean("attention_bias", False)
        return {**common, "attention_qkv_bias": bias, "attention_output_bias": bias}

    def program(self) -> type[LayerProgram]:
        return HunyuanProgram


def experts_per_token(fields: ConfigFields, layers: int, experts: int) -> int:
    """``moe_topk``: an integer, or a list with one entry per layer (trainmem needs them equal)."""
    value = fields.config.get("moe_topk")
    if isinstance(value, list):
        per_layer = fields.integer_list("moe_topk", minimum=1)
        if len(per_layer) != layers:
            raise fields.fail("moe_topk", f"has {len(per_layer)} entries for {layers} layers")
        if len(set(per_layer)) != 1:
            raise fields.fail("moe_topk", f"different top-k per layer is not modelled yet, got {sorted(set(per_layer))}")
        per_token = per_layer[0]
    else:
        per_token = fields.integer("moe_topk", 1, aliases=("num_experts_per_tok",))
    if per_token > experts:
        raise fields.fail("moe_topk", f"cannot exceed num_experts ({experts}), got {per_token}")
    return per_token


class HunyuanV1Moe(HunyuanV1Dense):
    model_type = "hunyuan_v1_moe"
    moe_lora_conversion = HUNYUAN_MOE_TARGETS

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = self._common(fields)
        if isinstance(fields.config.get("num_experts"), list):
            raise fields.fail("num_experts", "one expert count per layer is not built by transformers: give an integer")
        experts = fields.integer("num_experts", 1, aliases=("num_local_experts",))
        per_token = experts_per_token(fields, common["num_hidden_layers"], experts)
        return Architecture(
            **common,
            qk_norm=True,
            num_experts=experts,
            num_experts_per_tok=per_token,
            shared_expert_intermediate_size=common["intermediate_size"],
        )

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        """The router is ``nn.Linear(h, E)``: listed with its features (what LoRA and bitsandbytes see)."""
        router = f"{self.names.router}.weight"
        return [
            ParameterTensor(t.name, t.group, t.shape, (arch.hidden_size, arch.num_experts)) if t.name == router else t
            for t in super().layer(arch)
        ]

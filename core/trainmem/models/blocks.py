"""Building blocks of a decoder's parameter inventory, shared by the family modules.

A family composes its layer from these (attention variants, MLP variants, norms, MoE), with its
own module names (:class:`ModuleNames`), exactly as the transformers module builds its
``nn.Parameter``\\ s. Counting rules (each checked against transformers on the meta device in
tests/test_families.py and tests/test_presets.py):

  attention  q: h×(a·d), k and v: h×(k·d), o: (a·d)×h, optional biases; fused: h×(a·d + 2·k·d)
  dense MLP  gated: 3·h·i (gate, up, down), fused gate_up 2·h·i; plain: 2·h·i plus biases i and h
  MoE MLP    router E×h; experts E×(2·i·h) gate_up and E×(h·i) down (transformers 5's fused 3-D
             layout); shared expert 3·h·i_s and its gate h
  norms      RMSNorm h, LayerNorm 2h (h without bias); qk_norm 2·d per layer (per head) or a·d + k·d
             (over the projections, OLMo 2)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional

from ..architecture import Architecture


NO_GRADIENT_GROUP = "no_gradient"
"""The group of parameters that ``requires_grad`` (counted as trainable, as the frameworks count them) but that no
gradient ever reaches: Qwen4-Exp's QSA indexer (its output is a boolean mask), DeepSeek-V3.2's lightning indexer
(run under ``torch.no_grad()``). They get no gradient and no optimizer state (``Plan.tensor_trains``)."""


class ParameterTensor(NamedTuple):
    """One parameter tensor (per layer, when it sits in a decoder layer)."""

    name: str
    """Hugging Face-style name inside its scope, e.g. ``self_attn.q_proj.weight``."""
    group: str
    """embeddings, attention, mlp, experts, router, norms or lm_head."""
    shape: tuple[int, ...]
    linear_features: Optional[tuple[int, int]] = None
    """(in_features, out_features) when the tensor is an ``nn.Linear`` weight: what LoRA adapts as a
    module and what bitsandbytes quantises."""

    @property
    def numel(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count

    @property
    def module(self) -> str:
        """The module path without the parameter's own name, e.g. ``self_attn.q_proj``
        (``mlp.experts`` for the fused expert parameters)."""
        return self.name.rsplit(".", 1)[0]


@dataclass(frozen=True)
class ModuleNames:
    """Module paths of a family, relative to the decoder layer (or the model, for the ends)."""

    embed_tokens: str = "embed_tokens"
    embed_positions: str = "embed_positions"
    final_norm: str = "norm"
    lm_head: str = "lm_head"
    input_norm: str = "input_layernorm"
    post_attention_norm: str = "post_attention_layernorm"
    pre_feedforward_norm: str = "pre_feedforward_layernorm"
    post_feedforward_norm: str = "post_feedforward_layernorm"
    q_proj: str = "self_attn.q_proj"
    k_proj: str = "self_attn.k_proj"
    v_proj: str = "self_attn.v_proj"
    qkv_proj: str = "self_attn.qkv_proj"
    o_proj: str = "self_attn.o_proj"
    q_norm: str = "self_attn.q_norm"
    k_norm: str = "self_attn.k_norm"
    mlp: str = "mlp"
    gate_proj: str = "gate_proj"
    up_proj: str = "up_proj"
    gate_up_proj: str = "gate_up_proj"
    down_proj: str = "down_proj"
    fc1: str = "fc1"
    fc2: str = "fc2"
    router: str = "mlp.gate"
    experts: str = "mlp.experts"
    shared_expert: str = "mlp.shared_expert"
    shared_expert_gate: str = "mlp.shared_expert_gate"

    def module_paths(self) -> tuple[str, ...]:
        """Every module path the layer and head programs may ask about (a hashable trainability key)."""
        mlp_prefixes = (self.mlp, self.shared_expert)
        mlp_modules = (self.gate_proj, self.up_proj, self.gate_up_proj, self.down_proj, self.fc1, self.fc2)
        return (
            self.input_norm,
            self.post_attention_norm,
            self.pre_feedforward_norm,
            self.post_feedforward_norm,
            self.q_proj,
            self.k_proj,
            self.v_proj,
            self.qkv_proj,
            self.o_proj,
            self.q_norm,
            self.k_norm,
            *(f"{prefix}.{module}" for prefix in mlp_prefixes for module in mlp_modules),
            self.router,
            self.experts,
            f"{self.experts}.gate_up_proj",
            f"{self.experts}.down_proj",
            self.shared_expert_gate,
            self.final_norm,
            self.embed_tokens,
            self.embed_positions,
            self.lm_head,
        )


def linear(module: str, group: str, in_features: int, out_features: int, bias: bool) -> list[ParameterTensor]:
    """``nn.Linear(in_features, out_features, bias)``: weight (out, in) and optional bias."""
    tensors = [ParameterTensor(f"{module}.weight", group, (out_features, in_features), (in_features, out_features))]
    if bias:
        tensors.append(ParameterTensor(f"{module}.bias", group, (out_features,)))
    return tensors


def norm(module: str, arch: Architecture, size: int) -> list[ParameterTensor]:
    """RMSNorm (weight) or LayerNorm (weight and bias) over ``size`` features."""
    tensors = [ParameterTensor(f"{module}.weight", "norms", (size,))]
    if arch.norm == "layernorm" and arch.norm_bias:
        tensors.append(ParameterTensor(f"{module}.bias", "norms", (size,)))
    return tensors


def attention(arch: Architecture, names: ModuleNames) -> list[ParameterTensor]:
    """Multi-head / grouped-query attention: q, k, v (or one fused projection), o, optional q/k norms."""
    h, q, kv = arch.hidden_size, arch.query_width, arch.key_value_width
    bias, out_bias = arch.attention_qkv_bias, arch.attention_output_bias
    if arch.fused_qkv:
        tensors = linear(names.qkv_proj, "attention", h, q + 2 * kv, bias)
    else:
        tensors = (
            linear(names.q_proj, "attention", h, q, bias)
            + linear(names.k_proj, "attention", h, kv, bias)
            + linear(names.v_proj, "attention", h, kv, bias)
        )
    tensors += linear(names.o_proj, "attention", q, h, out_bias)
    if arch.qk_norm:
        if arch.qk_norm_over == "projection":
            tensors += norm(names.q_norm, arch, q) + norm(names.k_norm, arch, kv)
        else:
            tensors += norm(names.q_norm, arch, arch.resolved_head_dim) + norm(names.k_norm, arch, arch.resolved_head_dim)
    return tensors


def dense_mlp(arch: Architecture, names: ModuleNames, prefix: str, width: int, group: str = "mlp") -> list[ParameterTensor]:
    """Gated ``down(act(gate(x)) * up(x))`` (optionally with gate and up fused) or plain ``fc2(act(fc1(x)))``."""
    h, bias = arch.hidden_size, arch.mlp_bias
    if arch.mlp == "plain":
        return linear(f"{prefix}.{names.fc1}", group, h, width, bias) + linear(
            f"{prefix}.{names.fc2}", group, width, h, bias
        )
    if arch.fused_gate_up:
        up = linear(f"{prefix}.{names.gate_up_proj}", group, h, 2 * width, bias)
    else:
        up = linear(f"{prefix}.{names.gate_proj}", group, h, width, bias) + linear(
            f"{prefix}.{names.up_proj}", group, h, width, bias
        )
    return up + linear(f"{prefix}.{names.down_proj}", group, width, h, bias)


def moe_mlp(arch: Architecture, names: ModuleNames) -> list[ParameterTensor]:
    """Router, routed experts stored as two 3-D tensors (transformers 5 layout), optional shared expert."""
    h, i, experts = arch.hidden_size, arch.intermediate_size, arch.num_experts
    tensors = [
        ParameterTensor(f"{names.router}.weight", "router", (experts, h)),
        ParameterTensor(f"{names.experts}.gate_up_proj", "experts", (experts, 2 * i, h)),
        ParameterTensor(f"{names.experts}.down_proj", "experts", (experts, h, i)),
    ]
    if arch.shared_expert_intermediate_size:
        tensors += dense_mlp(arch, names, names.shared_expert, arch.shared_expert_intermediate_size)
        if arch.shared_expert_gate:
            tensors += linear(names.shared_expert_gate, "mlp", h, 1, False)
    return tensors


def layer_norms(arch: Architecture, names: ModuleNames) -> list[ParameterTensor]:
    """The decoder layer's norms: two (pre- or post-norm), or four (Gemma's sandwich)."""
    h = arch.hidden_size
    modules = [names.input_norm, names.post_attention_norm]
    if arch.norm_position == "post":
        modules = [names.post_attention_norm, names.post_feedforward_norm]
    elif arch.norms_per_layer == 4:
        modules += [names.pre_feedforward_norm, names.post_feedforward_norm]
    return [tensor for module in modules for tensor in norm(module, arch, h)]

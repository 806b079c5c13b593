"""Every parameter tensor of a model, listed from its Architecture.

The inventory is the single place that knows which tensors a model has and how big they
are; parameter counts, model-state bytes, LoRA targets and per-layer ZeRO-3/FSDP gathers
are all derived from it. Names follow the Hugging Face modules (``self_attn.q_proj``,
``mlp.experts.gate_up_proj``, GPT-2's ``attn.c_attn``) so that LoRA ``target_modules``
match the way PEFT matches them: by the last components of the module path.

Counting rules (each checked against ``transformers`` in tests/test_presets.py):
  attention  q: h×(a·d), k and v: h×(k·d), o: (a·d)×h, optional biases
  dense MLP  gated: 3·h·i (gate, up, down); plain: 2·h·i plus biases i and h
  MoE MLP    router h×E; experts E×(2·i·h) gate_up and E×(h·i) down; shared expert 3·h·i_s and its gate h
  norms      RMSNorm h, LayerNorm 2h, per norm; qk_norm adds 2·d
  model      embeddings v×h (+ learned positions p×h), final norm, lm_head v×h unless tied
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple, Optional

from .architecture import Architecture

Scope = Literal["embedding", "layer", "head"]


class ParameterTensor(NamedTuple):
    """One parameter tensor (per layer, when its scope is ``layer``)."""

    name: str
    """Hugging Face-style name inside its scope, e.g. ``self_attn.q_proj.weight``."""
    group: str
    """embeddings, attention, mlp, experts, router, norms or lm_head."""
    shape: tuple[int, ...]
    linear_features: Optional[tuple[int, int]] = None
    """(in_features, out_features) when the tensor is an nn.Linear weight that LoRA can adapt."""

    @property
    def numel(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count

    @property
    def module(self) -> str:
        """The module path without the ``.weight`` / ``.bias`` suffix, e.g. ``self_attn.q_proj``."""
        return self.name.rsplit(".", 1)[0]


def _linear(module: str, group: str, in_features: int, out_features: int, bias: bool) -> list[ParameterTensor]:
    tensors = [ParameterTensor(f"{module}.weight", group, (out_features, in_features), (in_features, out_features))]
    if bias:
        tensors.append(ParameterTensor(f"{module}.bias", group, (out_features,)))
    return tensors


def _norm(module: str, arch: Architecture, size: int) -> list[ParameterTensor]:
    tensors = [ParameterTensor(f"{module}.weight", "norms", (size,))]
    if arch.norm == "layernorm":
        tensors.append(ParameterTensor(f"{module}.bias", "norms", (size,)))
    return tensors


def _attention(arch: Architecture) -> list[ParameterTensor]:
    h, q, kv = arch.hidden_size, arch.query_width, arch.key_value_width
    bias, out_bias = arch.attention_qkv_bias, arch.attention_output_bias
    if arch.model_type == "gpt2":
        return _linear("attn.c_attn", "attention", h, q + 2 * kv, bias) + _linear(
            "attn.c_proj", "attention", q, h, out_bias
        )
    if arch.fused_qkv:
        tensors = _linear("self_attn.qkv_proj", "attention", h, q + 2 * kv, bias)
    else:
        tensors = (
            _linear("self_attn.q_proj", "attention", h, q, bias)
            + _linear("self_attn.k_proj", "attention", h, kv, bias)
            + _linear("self_attn.v_proj", "attention", h, kv, bias)
        )
    tensors += _linear("self_attn.o_proj", "attention", q, h, out_bias)
    if arch.qk_norm:
        tensors += _norm("self_attn.q_norm", arch, arch.resolved_head_dim)
        tensors += _norm("self_attn.k_norm", arch, arch.resolved_head_dim)
    return tensors


def _dense_mlp(arch: Architecture, prefix: str, width: int, group: str = "mlp") -> list[ParameterTensor]:
    h, bias = arch.hidden_size, arch.mlp_bias
    if arch.model_type == "gpt2":
        return _linear(f"{prefix}.c_fc", group, h, width, bias) + _linear(f"{prefix}.c_proj", group, width, h, bias)
    if arch.mlp == "plain":
        return _linear(f"{prefix}.fc1", group, h, width, bias) + _linear(f"{prefix}.fc2", group, width, h, bias)
    if arch.fused_gate_up:
        up = _linear(f"{prefix}.gate_up_proj", group, h, 2 * width, bias)
    else:
        up = _linear(f"{prefix}.gate_proj", group, h, width, bias) + _linear(f"{prefix}.up_proj", group, h, width, bias)
    return up + _linear(f"{prefix}.down_proj", group, width, h, bias)


def _moe_mlp(arch: Architecture) -> list[ParameterTensor]:
    """Router, routed experts stored as two 3-D tensors (transformers 5 layout), optional shared expert."""
    h, i, experts = arch.hidden_size, arch.intermediate_size, arch.num_experts
    tensors = [
        ParameterTensor("mlp.gate.weight", "router", (experts, h)),
        ParameterTensor("mlp.experts.gate_up_proj", "experts", (experts, 2 * i, h)),
        ParameterTensor("mlp.experts.down_proj", "experts", (experts, h, i)),
    ]
    if arch.shared_expert_intermediate_size:
        tensors += _dense_mlp(arch, "mlp.shared_expert", arch.shared_expert_intermediate_size)
        if arch.shared_expert_gate:
            tensors += _linear("mlp.shared_expert_gate", "mlp", h, 1, False)
    return tensors


def _layer_norms(arch: Architecture) -> list[ParameterTensor]:
    h = arch.hidden_size
    if arch.model_type == "gpt2":
        return _norm("ln_1", arch, h) + _norm("ln_2", arch, h)
    names = ["input_layernorm", "post_attention_layernorm"]
    if arch.norms_per_layer == 4:
        names += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
    return [tensor for name in names for tensor in _norm(name, arch, h)]


@dataclass(frozen=True)
class ModelInventory:
    """The parameter tensors of a model, grouped by where they sit in the forward pass."""

    embedding: tuple[ParameterTensor, ...]
    layer: tuple[ParameterTensor, ...]
    """The tensors of one block; the model has ``num_layers`` copies."""
    head: tuple[ParameterTensor, ...]
    num_layers: int
    tied_embeddings: bool

    @property
    def embedding_numel(self) -> int:
        return sum(t.numel for t in self.embedding)

    @property
    def layer_numel(self) -> int:
        return sum(t.numel for t in self.layer)

    @property
    def head_numel(self) -> int:
        return sum(t.numel for t in self.head)

    @property
    def num_parameters(self) -> int:
        """Unique parameters, as ``sum(p.numel() for p in model.parameters())`` counts them."""
        return self.embedding_numel + self.num_layers * self.layer_numel + self.head_numel

    @property
    def largest_tensor_numel(self) -> int:
        return max(t.numel for t in (*self.embedding, *self.layer, *self.head))

    def linear_modules(self) -> list[ParameterTensor]:
        """The nn.Linear weights of one layer (what LoRA may adapt)."""
        return [t for t in self.layer if t.linear_features is not None]


def build_inventory(arch: Architecture) -> ModelInventory:
    """List the parameter tensors of ``arch`` in the order the forward pass uses them."""
    h = arch.hidden_size
    if arch.model_type == "gpt2":
        embedding = [ParameterTensor("wte.weight", "embeddings", (arch.vocab_size, h))]
        final_norm = _norm("ln_f", arch, h)
    else:
        embedding = [ParameterTensor("embed_tokens.weight", "embeddings", (arch.vocab_size, h))]
        final_norm = _norm("norm", arch, h)
    if arch.position_embedding == "learned":
        name = "wpe.weight" if arch.model_type == "gpt2" else "embed_positions.weight"
        embedding.append(ParameterTensor(name, "embeddings", (arch.max_position_embeddings, h)))

    mlp = _moe_mlp(arch) if arch.is_moe else _dense_mlp(arch, "mlp", arch.intermediate_size)
    layer = _attention(arch) + mlp + _layer_norms(arch)

    head = list(final_norm)
    if not arch.tie_word_embeddings:
        head.append(ParameterTensor("lm_head.weight", "lm_head", (arch.vocab_size, h), (h, arch.vocab_size)))
    return ModelInventory(
        embedding=tuple(embedding),
        layer=tuple(layer),
        head=tuple(head),
        num_layers=arch.num_hidden_layers,
        tied_embeddings=arch.tie_word_embeddings,
    )

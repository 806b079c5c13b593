"""Apertus (transformers/models/apertus, transformers 5.24): Swiss AI's Apertus-8B and -70B.

* **Layer** (``ApertusDecoderLayer``): Llama's pre-norm layer with its norms named ``attention_layernorm`` and
  ``feedforward_layernorm``; attention with an RMSNorm over each query and key head (``q_norm``, ``k_norm``,
  after the heads-first transpose, before RoPE: Qwen3's per-head norms); Llama 3 RoPE scaling by default.
* **MLP** (``ApertusMLP``): un-gated, ``down_proj(act_fn(up_proj(x)))`` without biases.
* **xIELU** (``XIELUActivation`` in transformers/activations.py; Huang 2024, "Deriving Activation Functions
  Using Integration", arXiv:2411.13010): two learned scalars per layer (``mlp.act_fn.alpha_p``,
  ``mlp.act_fn.alpha_n``, shape (1,), in the model's dtype) and two 0-dim buffers (``beta``, ``eps``). Without
  the optional CUDA extension (``xielu.ops``, not on PyPI) it runs ``_xielu_python``::

      alpha_p = softplus(self.alpha_p); alpha_n = beta + softplus(self.alpha_n)
      where(x > 0, alpha_p * x * x + beta * x, (expm1(min(x, eps)) - x) * alpha_n + beta * x)

  replayed op by op (:meth:`ApertusProgram._xielu`). Backward keeps, besides x: the bool mask ``x > 0``,
  ``alpha_p * x`` (what the second product needs), ``expm1``'s result and ``expm1(...) - x`` (what
  ``* alpha_n`` needs when alpha_n trains), i.e. three tensors of x's size and a bool one where SiLU keeps x
  alone. ``alpha_p`` and ``alpha_n`` are (1,)-shaped tensors, so under autocast they promote the bf16 products to
  fp32 (the positive branch, the negative branch after ``* alpha_n``, and the result); ``beta`` and ``eps`` are
  0-dim and do not.
* PEFT has no default targets for apertus; ``all-linear`` adapts q/k/v/o, up_proj and down_proj. A 4-bit load
  quantises those; the xIELU scalars and the norms keep the load dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from .blocks import ModuleNames, ParameterTensor
from .family import DecoderFamily, common_decoder_fields
from .fields import ConfigFields

APERTUS_DEFAULTS = dict(
    vocab_size=131072,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=None,
    hidden_act="xielu",
    max_position_embeddings=65536,
    tie_word_embeddings=False,
)
"""``ApertusConfig``'s defaults."""


@dataclass(frozen=True)
class ApertusNames(ModuleNames):
    """Apertus's layer norms and its un-gated MLP (``up_proj`` → ``act_fn`` → ``down_proj``)."""

    input_norm: str = "attention_layernorm"
    post_attention_norm: str = "feedforward_layernorm"
    fc1: str = "up_proj"
    fc2: str = "down_proj"
    activation: str = "mlp.act_fn"

    def module_paths(self) -> tuple[str, ...]:
        return super().module_paths() + (self.activation,)


class Apertus(DecoderFamily):
    model_type = "apertus"
    names = ApertusNames()
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, APERTUS_DEFAULTS)
        bias = fields.boolean("attention_bias", False)
        return Architecture(
            **common,
            mlp="plain",
            mlp_bias=False,
            qk_norm=True,
            attention_qkv_bias=bias,
            attention_output_bias=bias,
        )

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        tensors = super().layer(arch)
        if arch.hidden_act == "xielu":
            module = self.names.activation
            tensors += [ParameterTensor(f"{module}.alpha_p", "mlp", (1,)), ParameterTensor(f"{module}.alpha_n", "mlp", (1,))]
        return tensors

    def layer_buffer_numels(self, arch: Architecture) -> list[int]:
        """xIELU's 0-dim ``beta`` and ``eps`` buffers in every layer (cast with the model)."""
        return [1, 1] * arch.num_hidden_layers if arch.hidden_act == "xielu" else []

    def program(self) -> type[LayerProgram]:
        return ApertusProgram


class ApertusProgram(LayerProgram):
    """Apertus's layer on the tape: Llama's, with xIELU in the MLP."""

    def _activation(self, x: Sym) -> Sym:
        if self.arch.hidden_act != "xielu":
            return super()._activation(x)
        return self._xielu(x)

    def _xielu(self, x: Sym) -> Sym:
        """``XIELUActivation._xielu_python`` (see the module docstring), each temporary freed when its
        expression ends."""
        tape, module = self.tape, self.names.activation
        alpha_p_param = self.parameter(module, 1)
        alpha_n_param = self.parameter(module, 1)
        alpha_p = tape.unary_saving_input("softplus", alpha_p_param)
        soft_n = tape.unary_saving_input("softplus", alpha_n_param)
        alpha_n = tape.scale(soft_n)  # self.beta + softplus(...): a 0-dim buffer added
        tape.release(soft_n)
        positive_mask = tape.new(x.numel, "bool", False)  # x > 0
        tape.record("gt", [], [x], [positive_mask])
        # positive branch: alpha_p * x * x + beta * x
        scaled = tape.mul(alpha_p, x)
        squared = tape.mul(scaled, x)
        tape.release(scaled)
        linear = tape.scale(x)  # self.beta * x: a 0-dim tensor, no promotion
        positive = tape.add(squared, linear)
        tape.release(squared, linear)
        # negative branch: (expm1(min(x, eps)) - x) * alpha_n + beta * x
        clipped = tape.new(x.numel, x.dtype, x.requires_grad)  # torch.min(x, self.eps): minimum saves both inputs
        tape.record("minimum", [x], [x], [clipped])
        exp = tape.unary_saving_result("expm1", clipped)
        tape.release(clipped)
        shifted = tape.add(exp, x)  # expm1(...) - x
        tape.release(exp)
        weighted = tape.mul(shifted, alpha_n)
        tape.release(shifted)
        linear = tape.scale(x)
        negative = tape.add(weighted, linear)
        tape.release(weighted, linear)
        out = tape.new(x.numel, tape.promote(positive.dtype, negative.dtype), positive.requires_grad or negative.requires_grad)
        tape.record("where", [positive_mask], [positive_mask, positive, negative], [out])
        tape.release(positive_mask, positive, negative, alpha_p, alpha_n)
        return out

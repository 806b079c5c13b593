"""PEFT DoRA (``LoraConfig(use_dora=True)``, peft 0.21) on a linear layer, replayed on a tape.

DoRA (Liu et al. 2024, "DoRA: Weight-Decomposed Low-Rank Adaptation", arXiv:2402.09353) adds to every
adapted linear a trained magnitude vector ``m`` of ``out_features`` elements (``lora_magnitude_vector``,
in the adapter dtype: fp32) and rescales the output by ``m / ||W + s·BA||`` per output row. PEFT's
forward (peft/tuners/lora/variants.py ``DoraLinearVariant.forward`` and
peft/tuners/lora/dora.py ``DoraLinearLayer.forward``), with ``x`` already cast to the adapter dtype:

1. ``get_lora_weight``: ``lora_B(lora_A(eye(in_features))).T`` materialises ``BA`` (in × out) through
   the two adapter layers, so autograd saves the identity (its autocast copy) and ``lora_A(eye)``; the
   product is cast to ``x.dtype``. Its graph is never used in backward (only its detach is), and it
   goes when the forward returns.
2. ``weight = base_layer.weight.to(x.dtype)`` (a full fp32 copy when the base is 16-bit);
   ``get_weight_norm``: ``weight + scaling · BA.detach()`` (two in × out temporaries, no graph) and
   ``torch.linalg.norm(dim=1)``; the norm is detached (paper section 4.3).
3. ``mag_norm_scale = m / weight_norm``: the division saves the norm.
4. ``lora_result = lora_B(lora_A(x))`` as in plain LoRA; ``base_result`` is the base layer's output
   (without its bias) when dropout is off, else ``F.linear(dropout(x), weight)`` is computed again.
5. ``(mag_norm_scale - 1) · base_result + mag_norm_scale · lora_result · scaling``: each product saves
   its two operands and is fp32 (type promotion with the fp32 vector); the sum is added to the base
   output and cast back to the result dtype.

Modelled for plain LoRA on linear modules; QLoRA (the 4-bit base dequantised once more), fused MoE
expert parameters (PEFT's ``ParamWrapper`` refuses DoRA) and tensor parallelism are refused by
:func:`check_dora`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import FieldError
from .tape import Sym

if TYPE_CHECKING:  # pragma: no cover
    from .layers import LayerProgram

FIELD = "finetuning.lora.use_dora"


def check_dora(setup, targets) -> None:
    """Refuse what DoRA's model does not cover, naming ``finetuning.lora.use_dora``."""
    if not setup.finetuning.lora.use_dora or setup.finetuning.method == "full":
        return
    if setup.finetuning.method == "qlora":
        raise FieldError(FIELD, "DoRA on a 4-bit (QLoRA) base is not modelled; use method 'lora'")
    if setup.parallelism.tensor_parallel_size > 1:
        raise FieldError(FIELD, "DoRA under tensor parallelism is not modelled")
    experts = targets.experts
    if experts.router or experts.gate_up_proj or experts.down_proj:
        raise FieldError(FIELD, "PEFT refuses DoRA on fused expert parameters (ParamWrapper); target linear modules")


def dora_linear(
    program: LayerProgram, x: Sym, result: Sym, weight: Sym, in_features: int, out_features: int, bias: bool
) -> Sym:
    """``lora.Linear.forward`` with ``DoraLinearVariant`` for one adapter (see the module docstring)."""
    tape, kernels = program.tape, program.kernels
    rank, adapter_dtype = kernels.lora_rank, kernels.adapter_dtype
    result_dtype = result.dtype
    lora_a = Sym(in_features * rank, adapter_dtype, True, "parameter")
    lora_b = Sym(rank * out_features, adapter_dtype, True, "parameter")
    magnitude = Sym(out_features, adapter_dtype, True, "parameter")
    x_cast = tape.to(x, adapter_dtype)

    # 1. get_lora_weight: B(A(eye)), a graph that lives until the forward returns (allocated, never recorded).
    eye = tape.new(in_features * in_features, adapter_dtype, False)
    eye_in = tape.autocast_input("linear", eye)
    a_in = tape.autocast_input("linear", lora_a)
    a_eye = tape.new(in_features * rank, eye_in.dtype if tape.autocast else a_in.dtype, False)
    tape.autocast_input("linear", lora_b)
    product = tape.new(in_features * out_features, a_eye.dtype, False)
    if eye_in is not eye:
        tape.release(eye)  # get_lora_weight returns; lora_A's node holds the autocast copy
    lora_weight = product
    if product.dtype != x_cast.dtype:
        lora_weight = tape.new(product.numel, x_cast.dtype, False)
        tape.release(product)

    # 2. the weight norm over W + s·BA, without a graph
    weight_x = weight
    if weight.dtype != x_cast.dtype:
        weight_x = tape.new(weight.numel, x_cast.dtype, False)  # an explicit .to(): not autocast's copy
    scaled = tape.new(in_features * out_features, lora_weight.dtype, False)
    merged = tape.new(in_features * out_features, tape.promote(weight_x.dtype, scaled.dtype), False)
    tape.release(scaled)
    weight_norm = tape.new(out_features, weight_x.dtype, False)
    tape.release(merged)

    # 3. mag_norm_scale = magnitude / weight_norm (DivBackward saves the divisor)
    scale = tape.new(out_features, tape.promote(magnitude.dtype, weight_norm.dtype), True)
    tape.record("div", [weight_norm], [magnitude], [scale])
    tape.release(weight_norm)

    # 4. lora_result, and base_result
    dropped = tape.dropout(x_cast, kernels.lora_dropout)
    base = result
    if dropped is not x_cast:
        base = tape.linear(dropped, weight_x, out_features)
    elif bias:
        base = tape.scale(result)  # base_result - bias
    down = tape.linear(dropped, lora_a, rank)
    lora_result = tape.linear(down, lora_b, out_features)
    tape.release(down)
    if dropped is not x_cast:
        tape.release(dropped)

    # 5. (scale - 1) * base_result + scale * lora_result * scaling
    scale_minus_one = tape.scale(scale)
    base_part = tape.mul(scale_minus_one, base)
    tape.release(scale_minus_one)
    lora_part = tape.mul(scale, lora_result)
    tape.release(lora_result, scale)
    lora_scaled = tape.scale(lora_part)
    tape.release(lora_part)
    dora = tape.add(base_part, lora_scaled)
    tape.release(base_part, lora_scaled)
    tape.release(lora_weight, a_eye, eye_in)  # DoRA's forward returns: the BA graph goes
    if weight_x is not weight:
        tape.release(weight_x)
    if base is not result:
        tape.release(base)

    summed = tape.add(result, dora)
    tape.release(result, dora)
    if x_cast is not x:
        tape.release(x_cast)
    out = tape.to(summed, result_dtype)
    if out is not summed:
        tape.release(summed)
    return out

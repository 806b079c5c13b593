"""verl's log-probs from the whole logits (``training.log_prob_head: logits``; verl 0.9.1 without ``use_fused_kernels``).

Read from verl 0.9.1 ``verl/workers/engine/fsdp/transformer_impl.py`` (``FSDPEngineWithLMHead.prepare_model_outputs``)
and ``verl/utils/torch_functional.py``; not measured (the CUDA path needs flash-attn's Triton kernel):

* the model is called without labels: ``output.logits`` is the whole (tokens × vocabulary) tensor of the unpadded
  row (``use_remove_padding``) in the compute dtype; at temperature 1 it is not copied
  (``_scale_logits_by_temperature``);
* ``logprobs_from_logits``: on CUDA with flash-attn installed (the usual verl image), flash-attn's Triton
  ``cross_entropy_loss(logits, labels, inplace_backward=True)``: it keeps the logits and an fp32 log-sum-exp per
  token for backward and no fp32 copy of the logits; its backward writes the gradient into the logits' own storage.
  The tape's replay gives the node a new gradient instead: the head's backward is counted high by one logits-sized
  tensor at that moment (an upper bound, stated). Without flash-attn (CPU, or ``VERL_DISABLE_FLASH_ATTN_CE``)
  verl's ``logprobs_from_logits_v2`` runs ``log_softmax`` row by row on 16-bit logits (every row's result kept),
  or ``logsumexp`` row by row on fp32 logits; trainmem counts the flash-attn path for CUDA and the v2 path elsewhere;
* the entropy (``actor.entropy_coeff != 0`` or ``calculate_entropy``; ``entropy_from_logits``): ``softmax`` (its
  result kept), ``logsumexp`` of the logits, ``softmax · logits`` (kept by the product's backward, freed after
  the sum) and the per-token difference;
* then the PPO/GRPO policy loss over (tokens) elements: next to nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..layers import LayerKernels, LayerShape, Trace, Trainability
from ..tape import DTYPE_BYTES, Sym

if TYPE_CHECKING:
    from ..architecture import Architecture
    from ..plan import Plan


def uses_logits_head(plan: "Plan") -> bool:
    training = plan.setup.training
    return training.is_rl and training.resolved("log_prob_head") == "logits"


def trace_verl_log_prob_head(
    arch: "Architecture",
    shape: LayerShape,
    kernels: LayerKernels,
    trainability: Trainability,
    vocab: int,
    parameter_grads_exist: bool,
    entropy: bool,
) -> Trace:
    """The final norm, the whole logits, verl's log-probs (and entropy), the policy loss (module docstring)."""
    from ..ends import _finish, _head_logits, _tape_through_final_norm

    tape, x, normed = _tape_through_final_norm(arch, shape, kernels, trainability)
    logits = _head_logits(tape, arch, shape, kernels, trainability, normed, vocab)
    tokens = logits.numel // vocab
    terms = []
    if kernels.device == "cuda":  # flash-attn cross_entropy_loss: logits and the fp32 lse kept, no copy
        lse = tape.new(tokens, "fp32", False)
        log_probs = tape.new(tokens, "fp32", True)
        tape.record("flash_cross_entropy", [logits, lse], [logits], [log_probs])
    elif logits.dtype in ("fp32", "fp64"):  # logprobs_from_logits_v2: gather, then logsumexp row by row
        picked = tape.gather(logits, tokens, tokens)
        sums = tape.new(tokens, logits.dtype, True)
        tape.record("logsumexp", [logits, sums], [logits], [sums])
        log_probs = tape.add(picked, sums)
        tape.release(picked, sums)
    else:  # logprobs_from_logits_v2 on 16-bit logits: log_softmax row by row, each row's result kept
        rows = tape.unary_saving_result("log_softmax", logits)
        log_probs = tape.gather(rows, tokens, tokens)
        tape.release(rows)
    terms.append(log_probs)
    if entropy:
        probabilities = tape.unary_saving_result("softmax", logits)
        sums = tape.new(tokens, logits.dtype, True)
        tape.record("logsumexp", [logits, sums], [logits], [sums])
        product = tape.mul(probabilities, logits)
        expected = tape.sum(product, tokens)
        tape.release(product, probabilities)
        terms.append(tape.add(sums, expected))
        tape.release(sums, expected)
    tape.release(logits)
    loss = tape.new(1, "fp32", True)
    tape.record("policy_loss", list(terms), list(terms), [loss])
    tape.release(*terms)
    return _finish(tape, loss, parameter_grads_exist, x)


def no_grad_log_prob_bytes(plan: "Plan", tokens: int, hidden_bytes: int, entropy: bool) -> int:
    """A log-prob pass under no_grad with the logits head: the normed hidden states, the whole logits, the
    per-token log-sum-exp and log-probs (fp32), and the entropy's softmax and product when it is computed
    (verl's old-policy pass: ``calculate_entropy=True``; the reference's: not)."""
    arch = plan.architecture
    element = DTYPE_BYTES[plan.precision.compute_weight_dtype or plan.precision.stream_dtype]
    vocab = arch.vocab_size // plan.parallel.tensor_parallel_size
    logits = tokens * vocab * element
    return hidden_bytes + logits + tokens * 8 + (2 * logits if entropy else 0)


def verl_logits_warning(plan: "Plan") -> list[str]:
    if not uses_logits_head(plan):
        return []
    where = "flash-attn's cross-entropy (its in-place gradient counted as a new tensor: an upper bound)" if plan.device == "cuda" else "verl's logprobs_from_logits_v2"
    return [
        "The policy's log-probs come from the whole (tokens × vocabulary) logits, as verl computes them without "
        f"use_fused_kernels, through {where}; read from verl 0.9.1's source, not measured."
    ]

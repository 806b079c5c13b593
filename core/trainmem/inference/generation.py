"""Hugging Face ``model.generate`` (transformers 5.24), phase by phase: :func:`hf_generation_phase`.

What ``GenerationMixin.generate`` → ``_sample`` allocates above the weights (greedy search and
multinomial sampling are both ``_sample``; transformers/generation/utils.py):

1. **Prefill**: one forward of the whole prompt under ``torch.no_grad`` with
   ``logits_to_keep=1`` (``_supports_logits_to_keep``: the head runs on the last position only, so
   the logits are ``(batch, 1, vocab)``, not ``(batch, prompt, vocab)``). Alive through the forward:
   the embedding output (``inputs_embeds`` stays referenced by the model's forward), the rotary
   cos/sin tables, now ``(batch, tokens, rotary_dim)`` each because ``generate`` passes per-sequence
   ``position_ids``, the position ids themselves, the caches of the layers already run, and the current
   layer's working set. That working set is the training step's no-grad layer replayed on the tape
   (``trainmem.layers``), with one change: ``cache.update`` returns the cache's copies of K and V
   (``torch.cat`` of an empty tensor and the new states) and the attention forward rebinds its
   ``key_states``/``value_states`` to them, so K and V stay alive — in the cache — after attention.
2. **Token selection** after each forward: ``outputs.logits[:, -1].to(copy=True, dtype=float32)``
   (``(batch, vocab)`` fp32 next to the model-dtype logits, which ``del outputs`` frees at the end of
   the iteration); the logits processors (with ``do_sample``, transformers' default ``top_k=50``
   warper: ``torch.topk`` values and indices, a boolean mask and a ``masked_fill`` copy); then
   ``softmax`` to probabilities (fp32) and ``torch.multinomial``, or ``argmax`` for greedy search.
3. **Decode steps**: one token per forward. Each layer's ``DynamicLayer.update`` concatenates the old
   keys with the new one (``torch.cat``), so while it runs the old and the new tensor of that layer's
   K (then V) coexist: the transient is one layer's K or V at the new length. The cache after the last
   forward holds ``prompt + completion - 1`` tokens (the last token chosen is never fed back).
   ``input_ids`` and the attention mask grow by a ``torch.cat`` per step (int64).

The peak is the larger of the prefill's and the last decode step's. Weights are not included (they
are the plan's); the prompt ids are the caller's. Everything else counted here was measured with
``trainmem.measure.generation`` (``corpus_generation.jsonl``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from ..architecture import Architecture
from ..errors import FieldError
from ..layers import LayerShape, Trainability
from ..tape import DTYPE_BYTES, Sym, Tape
from .kv_cache import cache_architecture, kv_cache_bytes, kv_cache_bytes_by_layer, layer_cache_shapes

INT64_BYTES = 8
DEFAULT_TOP_K = 50
"""``GenerationConfig``'s default ``top_k`` (configuration_utils.py ``_get_default_generation_params``):
with ``do_sample=True`` and no ``top_k`` given, ``TopKLogitsWarper(50)`` runs."""


@dataclass(frozen=True)
class GenerationPhase:
    """Memory of one ``generate`` call above the weights, at its peak.

    ``parts`` name what is alive at the peak ("KV cache", "prefill activations", "logits", "sampling",
    "generate bookkeeping", "cache update"); they sum to ``peak_bytes``.
    """

    peak_bytes: int
    parts: dict[str, int]
    peak_at: str
    """"prefill" or "last decode step"."""
    kv_cache_bytes: int
    """The cache after the last forward (prompt + completion - 1 tokens)."""
    prefill_peak_bytes: int
    decode_peak_bytes: int
    notes: tuple[str, ...] = field(default_factory=tuple)


def _check_lengths(arch: Architecture, batch_size: Any, prompt_tokens: Any, completion_tokens: Any) -> None:
    for name, value in (("batch_size", batch_size), ("prompt_tokens", prompt_tokens), ("completion_tokens", completion_tokens)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise FieldError(name, f"must be an integer, got {type(value).__name__}")
        if value < 1:
            raise FieldError(name, f"must be at least 1, got {value}")
    if prompt_tokens + completion_tokens > arch.max_position_embeddings:
        raise FieldError(
            "completion_tokens",
            f"prompt_tokens + completion_tokens ({prompt_tokens + completion_tokens}) exceeds the model's "
            f"max_position_embeddings ({arch.max_position_embeddings})",
        )


def hf_generation_phase(
    plan: Any,
    batch_size: int,
    prompt_tokens: int,
    completion_tokens: int,
    *,
    do_sample: bool = False,
    top_k: Optional[int] = DEFAULT_TOP_K,
    hf_config: Optional[Mapping[str, Any]] = None,
) -> GenerationPhase:
    """The peak of ``model.generate(prompt of batch_size × prompt_tokens, max_new_tokens=completion_tokens)``
    with a ``DynamicCache``, above the weights (see the module docstring).

    ``plan``: a :class:`trainmem.plan.Plan` (its architecture, precision, attention and device are used).
    ``top_k``: the sampling warper's k (``None`` or 0: none); ignored for greedy search.
    ``hf_config``: the config.json, when the Architecture leaves out sliding layers the cache sees
    (:func:`~trainmem.inference.kv_cache.cache_architecture`).
    """
    arch = plan.architecture
    if arch is None:
        raise FieldError("model", "generation needs the model's architecture (a preset, hf_config or architecture)")
    _check_lengths(arch, batch_size, prompt_tokens, completion_tokens)
    if hf_config is None:
        hf_config = _plan_hf_config(plan)
    arch = cache_architecture(arch, hf_config)
    from ..simulate import _kernels

    kernels = _kernels(plan, False)
    dtype = kernels.autocast or kernels.weight_dtype
    dtype_bytes = DTYPE_BYTES[dtype]
    stream_bytes = DTYPE_BYTES[kernels.stream_dtype]
    b, s, c = batch_size, prompt_tokens, completion_tokens
    vocab = arch.vocab_size
    k = (top_k or 0) if do_sample else 0

    # ---- token selection (after each forward): logits, their fp32 copy, processors, sampling
    logits_bytes = b * vocab * dtype_bytes  # (b, 1, v) from the head on the last position
    scores_bytes = b * vocab * 4  # .to(copy=True, dtype=float32)
    sampling_bytes = _selection_bytes(b, vocab, k, do_sample)

    # ---- prefill
    prefill_parts = _prefill(plan, arch, kernels, b, s, dtype_bytes, stream_bytes)
    prefill_forward = sum(prefill_parts.values())
    prefill_cache = kv_cache_bytes(arch, b, s, dtype_bytes, last_forward_tokens=s)
    bookkeeping_prefill = _bookkeeping_bytes(b, s, 0)
    after_prefill = {
        "KV cache": prefill_cache,
        "logits": logits_bytes + scores_bytes,
        "sampling": sampling_bytes,
        "generate bookkeeping": bookkeeping_prefill,
    }
    prefill_peak_parts = max(
        ({**prefill_parts, "generate bookkeeping": bookkeeping_prefill}, after_prefill), key=lambda p: sum(p.values())
    )

    # ---- the last decode step (c >= 2): the cache at its largest
    decode_parts: dict[str, int] = {}
    if c >= 2:
        cached_before = s + c - 2  # tokens in the cache when the last forward starts
        final_cache = kv_cache_bytes(arch, b, cached_before + 1, dtype_bytes)
        update = _update_transient_bytes(arch, b, cached_before, s if c == 2 else 1, dtype_bytes)
        bookkeeping = _bookkeeping_bytes(b, s, c - 1)
        during_update = {"KV cache": final_cache, "cache update": update, "generate bookkeeping": bookkeeping}
        selecting = {
            "KV cache": final_cache,
            "logits": logits_bytes + scores_bytes,
            "sampling": sampling_bytes,
            "generate bookkeeping": bookkeeping,
        }
        decode_parts = max((during_update, selecting), key=lambda p: sum(p.values()))
    prefill_peak = sum(prefill_peak_parts.values())
    decode_peak = sum(decode_parts.values())
    if decode_peak > prefill_peak:
        parts, peak_at = decode_parts, "last decode step"
    else:
        parts, peak_at = prefill_peak_parts, "prefill"
    parts = {name: value for name, value in parts.items() if value}
    return GenerationPhase(
        peak_bytes=sum(parts.values()),
        parts=parts,
        peak_at=peak_at,
        kv_cache_bytes=kv_cache_bytes(arch, b, s + c - 1, dtype_bytes, last_forward_tokens=s if c == 1 else 1),
        prefill_peak_bytes=prefill_peak,
        decode_peak_bytes=decode_peak,
    )


def _plan_hf_config(plan: Any) -> Optional[Mapping[str, Any]]:
    model = getattr(plan.setup, "model", None)
    config = getattr(model, "hf_config", None)
    return config if isinstance(config, Mapping) else None


def _selection_bytes(batch: int, vocab: int, top_k: int, do_sample: bool) -> int:
    """Peak of the processors and the token choice above the fp32 scores (``(batch, vocab)`` each).

    ``TopKLogitsWarper``: ``scores < torch.topk(scores, k)[0][..., -1, None]`` (values fp32 and indices
    int64, ``(batch, k)``; a bool mask) and ``scores.masked_fill(mask, -inf)`` (fp32). Sampling then
    takes ``softmax`` (fp32) while the warped scores are alive; greedy takes ``argmax`` (int64, batch).
    """
    if not do_sample:
        return batch * INT64_BYTES
    warped = 0
    if top_k:
        warped = batch * vocab * 4  # masked_fill's copy, alive while softmax runs
    probs = batch * vocab * 4
    return warped + probs + batch * INT64_BYTES


def _bookkeeping_bytes(batch: int, prompt: int, steps_done: int) -> int:
    """``generate``'s own int64 tensors: position ids of the prompt (``cumsum`` and ``masked_fill``
    of the mask), and after ``steps_done`` decode steps the grown ``input_ids`` and attention mask."""
    if steps_done == 0:
        return 2 * batch * prompt * INT64_BYTES
    return 2 * batch * (prompt + steps_done) * INT64_BYTES


def _update_transient_bytes(arch: Architecture, batch: int, cached_before: int, last_forward: int, dtype_bytes: int) -> int:
    """The largest old tensor alive during one layer's ``torch.cat`` in the last decode step: the layer's
    previous keys (or values) storage next to the new one, which the final cache already counts. The
    previous storage is the previous forward's concatenation (``last_forward`` tokens added to it)."""
    largest = 0
    for shape in layer_cache_shapes(arch):
        old = shape.stored_tokens(cached_before - last_forward, last_forward)
        largest = max(largest, batch * old * max(shape.key_elements_per_token, shape.value_elements_per_token))
    return largest * dtype_bytes


def _prefill(plan: Any, arch: Architecture, kernels: Any, batch: int, prompt: int, dtype_bytes: int, stream_bytes: int) -> dict[str, int]:
    """The prefill forward at its peak: parts by name."""
    family = plan.family
    tokens = batch * prompt
    h = arch.hidden_size
    embeddings = tokens * h * stream_bytes
    rotary = 0
    if arch.position_embedding == "rope":
        per_set = sum(family.rotary_tables_bytes(arch, prompt, stream_bytes)) * batch
        rotary = per_set * arch.rope_sets
    caches = [0] + _cumulative(kv_cache_bytes_by_layer(arch, batch, prompt, dtype_bytes, last_forward_tokens=prompt))
    stream = tokens * h * stream_bytes
    candidates: list[dict[str, int]] = []
    for kind in arch.layer_kinds():
        working = _layer_working_bytes(plan, kind.architecture, kernels, batch, prompt)
        for index in kind.indices:
            layer_input = stream if index else 0  # layer 0 reads the embedding output itself
            candidates.append({"KV cache": caches[index], "prefill activations": embeddings + rotary + layer_input + working})
    head = _final_norm_bytes(plan, arch, kernels, batch, prompt)
    candidates.append({"KV cache": caches[-1], "prefill activations": embeddings + rotary + head})
    # lm_head on the last position, after the decoder returned (its embeddings and tables are gone)
    candidates.append({"KV cache": caches[-1], "prefill activations": stream, "logits": batch * arch.vocab_size * dtype_bytes})
    return max(candidates, key=lambda parts: sum(parts.values()))


def _cumulative(values: list[int]) -> list[int]:
    out, running = [], 0
    for value in values:
        running += value
        out.append(running)
    return out


def _layer_working_bytes(plan: Any, kind: Architecture, kernels: Any, batch: int, prompt: int) -> int:
    """Peak of one no-grad layer above its input, K and V kept (they are the cache's)."""
    shape = _shape(kind, batch, prompt)
    tape = Tape(device=kernels.device, autocast=kernels.autocast)
    x = tape.new(shape.stream_tokens * shape.hidden, kernels.stream_dtype, False)
    frozen = Trainability(lambda module: False, lambda module: False)
    from dataclasses import replace

    plain = replace(kernels, lora_rank=0)
    program_class = _caching_program(plan.family.program())
    program = program_class(kind, shape, plain, frozen, tape)
    program.layer(x)
    peak = tape.peak_live_bytes - x.nbytes
    if kind.is_mla:  # the latent cache is written before attention and kept
        peak += batch * prompt * ((kind.kv_lora_rank or 0) + kind.qk_rope_head_dim) * DTYPE_BYTES[kernels.autocast or kernels.weight_dtype]
    # this layer's own cache is counted in the layer's working set; the caller adds earlier layers' caches
    return peak


def _final_norm_bytes(plan: Any, arch: Architecture, kernels: Any, batch: int, prompt: int) -> int:
    tape = Tape(device=kernels.device, autocast=kernels.autocast)
    shape = _shape(arch, batch, prompt)
    x = tape.new(shape.stream_tokens * shape.hidden, kernels.stream_dtype, False)
    frozen = Trainability(lambda module: False, lambda module: False)
    program = plan.family.program()(arch, shape, kernels, frozen, tape)
    program.norm(program.names.final_norm, x, shape.stream_tokens, shape.hidden)
    return tape.peak_live_bytes


def _shape(kind: Architecture, batch: int, prompt: int) -> LayerShape:
    mask = kind.layer_sliding and kind.sliding_window is not None and prompt >= kind.sliding_window
    return LayerShape(
        batch=batch,
        seq=prompt,
        kv_seq=prompt,
        heads=kind.num_attention_heads,
        kv_heads=kind.kv_heads,
        head_dim=kind.resolved_head_dim,
        hidden=kind.hidden_size,
        intermediate=kind.intermediate_size,
        stream_tokens=batch * prompt,
        experts_per_token=kind.num_experts_per_tok if kind.is_moe else 0,
        local_experts=kind.num_experts if kind.is_moe else 0,
        shared_intermediate=kind.shared_expert_intermediate_size,
        attention_mask=mask,
    )


_CACHING_PROGRAMS: dict[type, type] = {}


def _caching_program(program: type) -> type:
    """The family's layer program, with ``cache.update`` between the projections and attention: the
    attention core reads the cache's copies of K and V, the originals are dropped, the copies stay."""
    found = _CACHING_PROGRAMS.get(program)
    if found is not None:
        return found

    class CachingProgram(program):  # type: ignore[misc, valid-type]
        def _attention_core(self, q: Sym, k: Sym, v: Sym) -> Sym:
            tape = self.tape
            k_cache = tape.new(k.numel, k.dtype, False)
            v_cache = tape.new(v.numel, v.dtype, False)
            if k.storage != q.storage:
                tape.release(k)
            if v.storage not in (q.storage, k.storage):
                tape.release(v)
            out = super()._attention_core(q, k_cache, v_cache)
            # Tape.fused_attention marks its output as requiring grad whatever its inputs; under
            # no_grad nothing does, and nothing downstream may save tensors for a backward.
            out.requires_grad = q.requires_grad or k.requires_grad or v.requires_grad
            return out

        def _dense_mlp(self, prefix: str, x: Sym, width: int, saved_input: Optional[Sym] = None) -> Sym:
            """``down(act(gate(x)) * up(x))`` evaluated as Python does without autograd: the gate
            projection dies as soon as the activation has read it, before ``up`` is computed."""
            arch, names, tape, h = self.arch, self.names, self.tape, self.shape.hidden
            if arch.mlp != "gated" or arch.fused_gate_up:
                return super()._dense_mlp(prefix, x, width, saved_input)
            gate = self.linear(f"{prefix}.{names.gate_proj}", x, h, width, arch.mlp_bias, saved_input)
            activated = self._activation(gate)
            tape.release(gate)
            up = self.linear(f"{prefix}.{names.up_proj}", x, h, width, arch.mlp_bias, saved_input)
            product = tape.mul(activated, up)
            tape.release(activated, up)
            out = self.linear(f"{prefix}.{names.down_proj}", product, width, h, arch.mlp_bias)
            tape.release(product)
            return out

    CachingProgram.__name__ = f"Caching{program.__name__}"
    _CACHING_PROGRAMS[program] = CachingProgram
    return CachingProgram

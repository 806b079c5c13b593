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
   ``softmax`` to probabilities (fp32) and ``torch.multinomial``, or ``argmax`` for greedy search. The
   loop's variables keep the previous step's copy, scores and probabilities alive until each is rebound,
   through the next forward and into the next selection.
3. **Decode steps**: one token per forward. Each layer's ``DynamicLayer.update`` concatenates the old
   keys with the new one (``torch.cat``), so while it runs the old and the new tensor of that layer's
   K (then V) coexist: the transient is one layer's K or V at the new length. The cache after the last
   forward holds ``prompt + completion - 1`` tokens (the last token chosen is never fed back).
   ``input_ids`` and the attention mask grow by a ``torch.cat`` per step (int64).

Eager attention runs ``eager_attention_forward`` (a contiguous copy of kᵀ, the fp32 softmax, and the
probabilities returned with the output, alive to the layer's end) over a ``(batch, 1, s, s)`` mask kept
through the prefill; SDPA needs a boolean ``(1, 1, s, s)`` mask only for sliding-window layers.

The peak is the larger of the prefill's and the last decode step's. Weights are not included (they
are the plan's); the prompt ids are the caller's. The rules were measured with
``trainmem.measure.generation`` on Llama, Qwen2, Mistral, Qwen3, Gemma 3 and Phi-3
(``corpus_generation.jsonl``); other
families follow the same rules through their own layer programs, unmeasured under ``generate``
(``GenerationPhase.notes`` says where the replay is the training step's).
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
    if arch.cross_attention:
        raise FieldError("model", f"generation with an encoder-decoder ({arch.model_type}) is not modelled yet")
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
    temperature: float = 1.0,
    hf_config: Optional[Mapping[str, Any]] = None,
) -> GenerationPhase:
    """The peak of ``model.generate(prompt of batch_size × prompt_tokens, max_new_tokens=completion_tokens)``
    with a ``DynamicCache``, above the weights (see the module docstring).

    ``plan``: a :class:`trainmem.plan.Plan` (its architecture, precision, attention and device are used).
    ``top_k``: the sampling warper's k (``None`` or 0: none); ``temperature``: != 1 adds
    ``TemperatureLogitsWarper``; both are ignored for greedy search, as ``generate`` ignores them.
    ``hf_config``: the config.json, when the Architecture leaves out sliding layers the cache sees
    (:func:`~trainmem.inference.kv_cache.cache_architecture`).
    """
    arch = plan.architecture
    if arch is None:
        raise FieldError("model", "generation needs the model's architecture (a preset, hf_config or architecture)")
    _check_lengths(arch, batch_size, prompt_tokens, completion_tokens)
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0):
        raise FieldError("top_k", f"must be a non-negative integer or null, got {top_k!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise FieldError("temperature", f"must be a positive number, got {temperature!r}")
    if hf_config is None:
        hf_config = _plan_hf_config(plan)
    # generate runs the model in eval mode: no dropout anywhere, so SDPA keeps its fused kernel
    arch = cache_architecture(arch, hf_config).model_copy(
        update={"attention_dropout": 0.0, "residual_dropout": 0.0, "embedding_dropout": 0.0}
    )
    from dataclasses import replace

    from ..simulate import _kernels

    kernels = _kernels(plan, False)
    dropout_fallback = plan.device == "cpu" and plan.architecture.attention_dropout > 0
    if kernels.attention == "math" and plan.setup.attention == "sdpa" and dropout_fallback:
        kernels = replace(kernels, attention="fused")  # the CPU math fallback was for the training dropout
    dtype = kernels.autocast or kernels.weight_dtype
    dtype_bytes = DTYPE_BYTES[dtype]
    stream_bytes = DTYPE_BYTES[kernels.stream_dtype]
    b, s, c = batch_size, prompt_tokens, completion_tokens
    vocab = arch.vocab_size
    k = (top_k or 0) if do_sample else 0

    # ---- token selection after each forward: what the loop's variables hold (see _selection)
    logits_bytes = b * vocab * dtype_bytes  # (b, 1, v) from the head on the last position
    first = _selection(b, vocab, do_sample, k, temperature, carried=0)
    later = _selection(b, vocab, do_sample, k, temperature, carried=first.carried_bytes)

    # ---- prefill
    prefill_parts = _prefill(plan, arch, kernels, b, s, dtype_bytes, stream_bytes)
    prefill_cache = kv_cache_bytes(arch, b, s, dtype_bytes, last_forward_tokens=s)
    bookkeeping_prefill = _bookkeeping_bytes(b, s, 0)
    after_prefill = {
        "KV cache": prefill_cache,
        "logits": logits_bytes,
        "sampling": first.peak_bytes,
        "generate bookkeeping": bookkeeping_prefill,
    }
    prefill_peak_parts = max(
        ({**prefill_parts, "generate bookkeeping": bookkeeping_prefill}, after_prefill), key=lambda p: sum(p.values())
    )

    # ---- the last decode step (c >= 2): the cache at its largest, last step's scores still held
    decode_parts: dict[str, int] = {}
    if c >= 2:
        cached_before = s + c - 2  # tokens in the cache when the last forward starts
        final_cache = kv_cache_bytes(arch, b, cached_before + 1, dtype_bytes)
        update = _update_transient_bytes(arch, b, cached_before, s if c == 2 else 1, dtype_bytes)
        bookkeeping = _bookkeeping_bytes(b, s, c)
        held = (first if c == 2 else later).carried_bytes
        during_update = {
            "KV cache": final_cache,
            "cache update": update,
            "decode activations": _decode_activation_bytes(plan, arch, b, stream_bytes),
            "sampling": held,
            "generate bookkeeping": bookkeeping,
        }
        head = {"KV cache": final_cache, "logits": logits_bytes, "sampling": held, "generate bookkeeping": bookkeeping}
        selecting = {
            "KV cache": final_cache,
            "logits": logits_bytes,
            "sampling": (first if c == 2 else later).peak_bytes,
            "generate bookkeeping": bookkeeping,
        }
        decode_parts = max((during_update, head, selecting), key=lambda p: sum(p.values()))
    prefill_peak = sum(prefill_peak_parts.values())
    decode_peak = sum(decode_parts.values())
    if decode_peak > prefill_peak:
        parts, peak_at = decode_parts, "last decode step"
    else:
        parts, peak_at = prefill_peak_parts, "prefill"
    parts = {name: value for name, value in parts.items() if value}
    notes = []
    if arch.final_logit_softcapping or arch.logits_scaling:
        notes.append("the head's logit soft-capping or scaling adds (batch, vocab) tensors that are not modelled")
    if kernels.attention == "eager" and (arch.attn_logit_softcapping or arch.attention_sinks):
        notes.append("eager attention with soft-capping or sinks: the prefill's attention is the training step's "
                     "no-grad replay (not measured under generate)")
    if arch.is_moe or arch.is_mla:
        notes.append("MoE and MLA prefill layers are the training step's no-grad replay (not measured under generate)")
    return GenerationPhase(
        peak_bytes=sum(parts.values()),
        parts=parts,
        peak_at=peak_at,
        kv_cache_bytes=kv_cache_bytes(arch, b, s + c - 1, dtype_bytes, last_forward_tokens=s if c == 1 else 1),
        prefill_peak_bytes=prefill_peak,
        decode_peak_bytes=decode_peak,
        notes=tuple(notes),
    )


def _plan_hf_config(plan: Any) -> Optional[Mapping[str, Any]]:
    """The config.json behind the plan's model (a preset's or the user's), for the cache's layer types."""
    model = getattr(plan.setup, "model", None)
    config = getattr(model, "hf_config", None)
    if isinstance(config, Mapping):
        return config
    preset = getattr(model, "preset", None)
    if isinstance(preset, str):
        from ..catalogs import presets

        found = presets().get(preset)
        return found.config if found is not None else None
    return None


@dataclass(frozen=True)
class _Selection:
    peak_bytes: int
    """Peak of the token selection above the cache and the logits, the previous step's tensors included."""
    carried_bytes: int
    """What the loop's variables still hold afterwards, through the next forward."""


def _selection(batch: int, vocab: int, do_sample: bool, top_k: int, temperature: float, carried: int) -> _Selection:
    """One token selection of ``GenerationMixin._sample``, replayed tensor by tensor.

    ``next_token_logits = outputs.logits[:, -1].to(copy=True, dtype=float32)``, then each logits processor
    returns a new ``(batch, vocab)`` fp32 tensor (``TemperatureLogitsWarper``: ``scores / t``;
    ``TopKLogitsWarper``: ``scores < topk(scores, k)[0][..., -1, None]``, a bool mask, then
    ``masked_fill``), then ``softmax`` (sampling) or ``argmax`` (greedy). The loop's variables
    (``next_token_logits``, ``next_token_scores``, ``probs``) keep the previous step's tensors alive until
    they are rebound, so each new tensor is allocated while its predecessor of the last step still lives
    (measured: torch 2.13 CPU, transformers 5.24, corpus_generation.jsonl).
    """
    v4 = batch * vocab * 4
    processors: list[int] = []  # extra bytes each processor allocates next to its output
    if do_sample and temperature != 1.0:
        processors.append(0)
    if do_sample and top_k:
        processors.append(batch * vocab)  # the bool mask
    previous_copy = v4 if carried else 0
    previous_scores = v4 if carried and processors else 0
    previous_probs = v4 if carried and do_sample else 0
    live = previous_copy + previous_scores + previous_probs
    peak = live
    live += v4  # the fp32 copy
    peak = max(peak, live)
    live -= previous_copy
    current = 0  # the processor chain's latest output (the copy itself at first)
    for extra in processors:
        peak = max(peak, live + extra + v4)
        live += v4
        live -= current
        current = v4
    live -= previous_scores
    if do_sample:
        peak = max(peak, live + v4)
        live += v4 - previous_probs
    peak = max(peak, live + batch * 8)  # the chosen ids
    return _Selection(peak_bytes=peak, carried_bytes=live)


def _bookkeeping_bytes(batch: int, prompt: int, forward_index: int) -> int:
    """``generate``'s own int64 tensors. In the prefill: the prompt's position ids (``cumsum`` of the
    mask, then ``masked_fill``). In decode forward ``n``: the prompt's position ids (kept), and the grown
    ``input_ids`` and attention mask (``torch.cat`` per step: ``prompt + n`` tokens each)."""
    if forward_index == 0:
        return 2 * batch * prompt * INT64_BYTES
    return batch * prompt * INT64_BYTES + 2 * batch * (prompt + forward_index) * INT64_BYTES


def _decode_activation_bytes(plan: Any, arch: Architecture, batch: int, stream_bytes: int) -> int:
    """One token's tensors alive in a decode layer while its cache is updated: the embedding output, the
    residual stream and its normed copy (h each), the new q, k and v, and the step's cos/sin tables."""
    per_token = 3 * arch.hidden_size + arch.query_width + 2 * arch.key_value_width
    rotary = 0
    if arch.position_embedding == "rope":
        rotary = sum(plan.family.rotary_tables_bytes(arch, 1, stream_bytes)) * arch.rope_sets
    return batch * (per_token * stream_bytes + rotary)


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
    learned = arch.position_embedding == "learned"
    if learned:  # GPT-2: inputs_embeds and position_embeds stay referenced; layer 0 reads their sum
        embeddings *= 2
    rotary = 0
    if arch.position_embedding == "rope":
        per_set = sum(family.rotary_tables_bytes(arch, prompt, stream_bytes)) * batch
        rotary = per_set * arch.rope_sets
    rotary += _mask_bytes(arch, kernels.attention, batch, prompt, dtype_bytes)
    caches = [0] + _cumulative(kv_cache_bytes_by_layer(arch, batch, prompt, dtype_bytes, last_forward_tokens=prompt))
    stream = tokens * h * stream_bytes
    candidates: list[dict[str, int]] = []
    for kind in arch.layer_kinds():
        working = _layer_working_bytes(plan, kind.architecture, kernels, batch, prompt)
        for index in kind.indices:
            layer_input = stream if index or learned else 0  # layer 0 reads the embedding output itself
            candidates.append({"KV cache": caches[index], "prefill activations": embeddings + rotary + layer_input + working})
    head = _final_norm_bytes(plan, arch, kernels, batch, prompt)
    candidates.append({"KV cache": caches[-1], "prefill activations": embeddings + rotary + head})
    # lm_head on the last position, after the decoder returned (its embeddings and tables are gone)
    candidates.append({"KV cache": caches[-1], "prefill activations": stream, "logits": batch * arch.vocab_size * dtype_bytes})
    return max(candidates, key=lambda parts: sum(parts.values()))


def _mask_bytes(arch: Architecture, kernel: str, batch: int, prompt: int, dtype_bytes: int) -> int:
    """The 4-D attention masks the prefill builds once and keeps through the forward (masking_utils.py):
    eager attention adds a ``(batch, 1, s, s)`` mask in the model dtype (``eager_mask``); SDPA needs none
    for causal full attention (``is_causal``) but a boolean ``(1, 1, s, s)`` one for sliding-window layers
    once the prompt reaches the window (measured, torch 2.13 CPU, transformers 5.24)."""
    if kernel in ("eager", "math"):
        return batch * prompt * prompt * dtype_bytes
    window = arch.sliding_window
    if window is not None and arch.window_layers() and prompt >= window:
        return prompt * prompt
    return 0


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
            if self.kernels.attention == "eager" and not self.arch.attn_logit_softcapping and not self.arch.attention_sinks:
                out = self._eager_core(q, k_cache, v_cache)
            else:
                out = super()._attention_core(q, k_cache, v_cache)
            # Tape.fused_attention marks its output as requiring grad whatever its inputs; under
            # no_grad nothing does, and nothing downstream may save tensors for a backward.
            out.requires_grad = q.requires_grad or k.requires_grad or v.requires_grad
            return out

        def _eager_core(self, q: Sym, k: Sym, v: Sym) -> Sym:
            """``eager_attention_forward`` without autograd: ``repeat_kv`` copies, a contiguous copy of kᵀ
            for the batched matmul, scores, scaled, masked, the fp32 softmax and its cast back; the
            probabilities are returned with the output and stay alive (the layer's ``_``) to its end."""
            shape, tape = self.shape, self.tape
            groups = shape.heads // shape.kv_heads
            if groups > 1:
                k = tape.copy(k, k.numel * groups)
                v = tape.copy(v, v.numel * groups)
            scores_numel = shape.batch * shape.heads * shape.seq * shape.kv_seq
            transposed = tape.copy(k)
            scores = tape.matmul(q, transposed, scores_numel)
            tape.release(transposed)
            scaled = tape.scale(scores)
            tape.release(scores)
            masked = tape.scale(scaled)  # + the causal mask
            tape.release(scaled)
            if self.family.eager_softmax_in_fp32:
                upcast = tape.to(masked, "fp32")
                soft = tape.new(upcast.numel, "fp32", False)
                if upcast is not masked:
                    tape.release(upcast)
                probs = tape.to(soft, q.dtype)
                if probs is not soft:
                    tape.release(soft)
            else:
                probs = tape.new(masked.numel, masked.dtype, False)
            tape.release(masked)
            context = tape.matmul(probs, v, self._context_numel(q, v))
            out = tape.copy(context)  # transpose(1, 2).contiguous()
            tape.release(context)
            if groups > 1:
                tape.release(k, v)
            self.held_to_layer_end.append(probs)
            return out

        frees_temporaries_once_read = True
        """GPT-2's ``gelu_new``, ``0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x ** 3)))``, is evaluated left
        to right: ``0.5 * x`` first, then each temporary dies as the next op has read it (LayerProgram._activation)."""

        def norm(self, module: str, x: Sym, rows: int, width: int) -> Sym:
            out = super().norm(module, x, rows, width)
            out.requires_grad = x.requires_grad  # Tape.layer_norm marks its output as requiring grad
            return out

        def layer(self, x: Sym) -> Sym:
            self.held_to_layer_end: list[Sym] = []
            out = super().layer(x)
            self.tape.release(*self.held_to_layer_end)
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

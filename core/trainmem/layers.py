"""The forward programs of a decoder layer, replayed on a symbolic :class:`~trainmem.tape.Tape`.

Each function below mirrors, op for op, the forward code of the Hugging Face module it
names (transformers 5.x), so that the tape records the tensors PyTorch really saves:

* ``LlamaRMSNorm``: ``x.to(float32)``, ``pow(2)``, ``mean``, ``rsqrt``, ``x * rsqrt``,
  ``.to(input_dtype)``, ``weight * x`` (Mistral, Mixtral, Qwen2, Phi-3 use the same norm);
  ``Gemma2RMSNorm`` multiplies in fp32 by ``1 + weight`` before casting back;
* attention: q/k/v projections (fused for GPT-2 and Phi-3), RoPE
  ``q * cos + rotate_half(q) * sin``, then either a fused SDPA/flash kernel or the eager
  path ``softmax(q kᵀ · scale + mask) [dropout] @ v`` (with K/V repeated for grouped-query
  attention when the kernel cannot do it natively), and the output projection;
* MLPs: gated ``down(act(gate(x)) * up(x))``, plain ``c_proj(act(c_fc(x)))`` with GPT-2's
  ``gelu_new`` written out in Python ops, and Mixtral-style routed experts;
* PEFT LoRA around a linear: ``base(x) + B(A(dropout(x.to(adapter_dtype)))) * scaling``
  followed by ``.to(result_dtype)``; QLoRA's base dequantises its 4-bit weight per call.

Per-rank sizes come in a :class:`LayerShape`; tensor parallelism divides heads and the
MLP width, sequence parallelism divides the residual-stream tensors, context parallelism
divides the sequence (see Korthikanti et al. 2022 for the layout these follow).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from .architecture import Architecture
from .tape import Sym, Tape

AttentionKernel = str  # "fused" (flash / memory-efficient SDPA), "eager", "math" (SDPA's math fallback)



@dataclass(frozen=True)
class LayerShape:
    """Sizes of one layer's tensors on one rank."""

    batch: int
    seq: int
    """Query positions on this rank (sequence_length / context_parallel_size)."""
    kv_seq: int
    """Key positions each query attends over."""
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    stream_tokens: int
    """Tokens of residual-stream tensors on this rank (÷ tensor parallel size with sequence parallelism)."""
    experts_per_token: int = 0
    local_experts: int = 0
    """Routed experts held by this rank (num_experts / expert_parallel_size)."""
    shared_intermediate: int = 0
    attention_mask: bool = False
    """transformers materialises a 4-D mask for SDPA (a sliding window shorter than the sequence, padding,
    packed rows); SDPA then repeats grouped K/V (:func:`sdpa_repeats_kv`)."""
    packed_row: bool = False
    """The mask is the block-diagonal mask of a packed row (``trainmem.packing``)."""
    cross_seq: int = 0
    """Encoder positions a decoder layer's cross-attention attends over (encoder-decoders); 0 for none."""

    @property
    def tokens(self) -> int:
        return self.batch * self.seq


SDPA_GQA_MAX_HEAD_DIM = 256
"""The widest head SDPA's grouped-query path takes on CPU/CUDA (transformers 5.24 sdpa_attention.py
``use_gqa_in_sdpa``: ``key.shape[-1] == value.shape[-1] <= 256``)."""


def sdpa_repeats_kv(shape: LayerShape) -> bool:
    """Whether transformers' SDPA path copies K and V to every query head (``repeat_kv``) instead of
    passing ``enable_gqa=True``.

    transformers 5.24 ``integrations/sdpa_attention.py`` ``sdpa_attention_forward``: with more query than
    key/value heads, ``use_gqa_in_sdpa`` allows GQA on CPU/CUDA only when ``attention_mask is None`` and
    the head dim is at most 256; otherwise ``repeat_kv`` (an expand + reshape, i.e. an ``aten.clone``
    per K and V) runs. A mask is passed whenever trainmem marks one materialised (sliding window shorter
    than the sequence, padding, packed rows). Measured, torch 2.13 CPU (OLMo 3, Mistral with a window,
    Gemma 3, Llama packed/padded): the repeated copies are what the fused kernel saves for backward;
    under autocast the copy of an fp32 (rotated) K dies in forward once its bf16 cast is saved.
    With one key/value head (multi-query attention) ``repeat_kv``'s reshape merges a size-1 dim with the
    stride-0 expanded one: a view, no copy (measured: no ``aten.clone``, head_dim 320, no mask).
    XPU and MPS take masked GQA natively; trainmem models CPU and CUDA only.
    """
    if shape.heads == shape.kv_heads or shape.kv_heads == 1:
        return False
    return shape.attention_mask or shape.head_dim > SDPA_GQA_MAX_HEAD_DIM


@dataclass(frozen=True)
class LayerKernels:
    """Which dtypes and kernels the layer's forward uses."""

    device: str
    autocast: Optional[str]
    weight_dtype: str
    """Dtype of the weights the forward reads (stored dtype, or the gathered dtype under FSDP/ZeRO-3)."""
    stream_dtype: str
    """Dtype of the residual stream: the embedding output's dtype."""
    attention: AttentionKernel
    selective_recompute: bool = False
    adapter_dtype: str = "fp32"
    lora_rank: int = 0
    lora_dropout: float = 0.0
    quantized_compute_dtype: Optional[str] = None
    """QLoRA: the dtype the 4-bit base weights are dequantised to for each matmul."""
    use_dora: bool = False
    """PEFT DoRA on every adapter (``trainmem.dora``)."""
    fp8_matmuls: bool = False
    """Transformer Engine fp8 linear layers."""
    saves_gathered_sequence: bool = False
    """Sequence parallelism as DTensor runs it (``PrepareModuleInput`` to ``Replicate``): the column-parallel
    linears save the all-gathered input, where Megatron's save the sequence shard and all-gather it again in
    backward (trainmem.parallel.dtensor_tp)."""
    linear_saves_input: bool = False
    """DeepSpeed ZeRO-3's ``LinearFunctionForZeroStage3``: every linear saves its input, frozen or not
    (trainmem.parallel.deepspeed.linear_saves_input)."""


@dataclass(frozen=True)
class Trainability:
    """Which of a layer's modules train, and which carry LoRA adapters."""

    trains: Callable[[str], bool]
    """module path (e.g. ``self_attn.q_proj``) -> whether its own weights train."""
    has_adapter: Callable[[str], bool]
    """module path -> whether LoRA adapts it."""


class LayerProgram:
    """Replays one decoder layer's forward pass on a tape."""

    frees_temporaries_once_read = False
    """True for a replay without autograd (``generate``, trainmem.inference.generation): a temporary no
    node saves dies as soon as the next op has read it, not at the end of its expression."""

    def __init__(
        self, arch: Architecture, shape: LayerShape, kernels: LayerKernels, trainability: Trainability, tape: Tape
    ):
        from .models import family_for  # models subclass LayerProgram: imported here, not at module level

        self.arch = arch
        self.family = family_for(arch)
        self.names = self.family.names
        self.shape = shape
        self.kernels = kernels
        self.trainability = trainability
        self.tape = tape

    # ------------------------------------------------------------------ parameters
    def parameter(self, module: str, numel: int, dtype: Optional[str] = None) -> Sym:
        return Sym(numel, dtype or self.kernels.weight_dtype, self.trainability.trains(module), "parameter")

    def module_parameter(self, module: str, role: str, numel: int, dtype: Optional[str] = None) -> Sym:
        """A module's ``role`` tensor (weight, bias), the same Sym each time the module runs in this layer: a
        module called twice (DeBERTa's query/key projections of the relative embeddings, ``share_att_key``)
        has one autocast cast (the cache is keyed by the weight) and one ``.grad`` (measured, torch 2.13 CPU)."""
        cache = self.__dict__.setdefault("_module_parameters", {})
        key = (module, role, numel, dtype)
        if key not in cache:
            cache[key] = self.parameter(module, numel, dtype)
        return cache[key]

    # ------------------------------------------------------------------ norms
    def norm(self, module: str, x: Sym, rows: int, width: int) -> Sym:
        if self.arch.norm == "layernorm":
            weight = self.parameter(module, width)
            bias = self.parameter(module, width) if self.arch.norm_bias else None
            return self.tape.layer_norm(x, rows, weight, bias)
        return self.rms_norm(module, x, rows, width)

    def _normalize_in_fp32(self, x: Sym, rows: int) -> Sym:
        """``x32 = x.float(); x32 * rsqrt(x32.pow(2).mean(-1) + eps)``: pow saves x32, rsqrt its result,
        the product both."""
        tape = self.tape
        x32 = tape.to(x, "fp32")
        squared = tape.unary_saving_input("pow", x32)
        # PowBackward0 (torch/csrc/autograd/FunctionsManual.cpp pow_backward): grad * (2 * x.pow(1)), two
        # temporaries of x's size besides the gradient it returns
        if tape.nodes and any(output is squared for output in tape.nodes[-1].outputs):
            tape.nodes[-1].extra_backward_bytes = 2 * x32.nbytes
        variance = tape.reduce(squared, rows)
        tape.release(squared)
        shifted = tape.scale(variance)
        tape.release(variance)
        inverse = tape.unary_saving_result("rsqrt", shifted)
        tape.release(shifted)
        normalized = tape.mul(x32, inverse)
        tape.release(inverse)
        if x32 is not x:
            tape.release(x32)
        return normalized

    def rms_norm(self, module: str, x: Sym, rows: int, width: int) -> Sym:
        """LlamaRMSNorm.forward: ``weight * normalized.to(input_dtype)``."""
        tape = self.tape
        normalized = self._normalize_in_fp32(x, rows)
        cast = tape.to(normalized, x.dtype)
        if cast is not normalized:
            tape.release(normalized)
        out = tape.mul(self.parameter(module, width), cast)
        tape.release(cast)
        return out

    def rms_norm_product_in_fp32(self, module: str, x: Sym, rows: int, width: int) -> Sym:
        """The RMSNorm of OLMo 2 and gpt-oss (``Olmo2RMSNorm.forward``, ``GptOssRMSNorm.forward``):
        ``(weight * normalized).to(input_dtype)``: the weight multiplies the fp32 normalized tensor and the
        product is cast back, where Llama casts first."""
        tape = self.tape
        normalized = self._normalize_in_fp32(x, rows)
        product = tape.mul(self.parameter(module, width), normalized)
        tape.release(normalized)
        out = tape.to(product, x.dtype)
        if out is not product:
            tape.release(product)
        return out

    def final_norm(self, x: Sym, rows: int) -> Sym:
        """The base model's last module before the head (``model.norm``); a hook for families that end otherwise
        (Qwen4-Exp's ``hyper_connection_mixer``)."""
        return self.norm(self.names.final_norm, x, rows, self.shape.hidden)

    # ------------------------------------------------------------------ linear layers
    def linear(
        self, module: str, x: Sym, in_features: int, out_features: int, bias: bool, saved_input: Optional[Sym] = None
    ) -> Sym:
        """``nn.Linear`` (or GPT-2's ``Conv1D``), with a LoRA adapter or a 4-bit base when configured.

        ``saved_input``: what backward keeps instead of ``x`` (sequence parallelism keeps the
        sequence-sharded tensor and all-gathers it again in backward).
        """
        tape = self.tape
        quantized = self.kernels.quantized_compute_dtype is not None
        weight_dtype = "uint8" if quantized else None
        weight = self.module_parameter(
            module, "weight", in_features * out_features if not quantized else in_features * out_features // 2, weight_dtype
        )
        bias_param = self.module_parameter(module, "bias", out_features) if bias else None
        if quantized:
            result = self._dequantized_matmul(x, weight, in_features, out_features)
        elif self.kernels.fp8_matmuls:
            result = tape.fp8_linear(x, weight, out_features, bias_param, saved_input)
        else:
            result = tape.linear(x, weight, out_features, bias_param, saved_input, saves_input=self.kernels.linear_saves_input)
        if not self.trainability.has_adapter(module):
            return result
        if saved_input is not None and saved_input is not x:
            # Sequence parallelism: PEFT's LoraParallelLinear (peft/tuners/lora/tp_layer.py) runs lora_A on
            # the module's own input, the sequence shard; lora_B, a ColumnParallelLinear, all-gathers the
            # rank-r activations over the sequence before its matmul.
            return self._lora(module, saved_input, result, in_features, out_features, gather_rows=x.numel // in_features)
        if self.kernels.use_dora:
            from .dora import dora_linear

            return dora_linear(self, x, result, weight, in_features, out_features, bias)
        return self._lora(module, x, result, in_features, out_features)

    def _dequantized_matmul(self, x: Sym, weight: Sym, in_features: int, out_features: int) -> Sym:
        """bitsandbytes ``MatMul4Bit``: dequantise the weight, matmul, free the copy; saves only the packed weight."""
        tape = self.tape
        compute = self.kernels.quantized_compute_dtype or "bf16"
        dequantized = tape.new(in_features * out_features, compute, False, "weight_copy")
        x_in = tape.to(x, compute)
        rows = x.numel // in_features
        out = tape.new(rows * out_features, compute, x.requires_grad)
        tape.record("matmul_4bit", [], [x], [out])
        tape.release(dequantized)
        if x_in is not x:
            tape.release(x_in)
        return out

    def _lora(
        self, module: str, x: Sym, result: Sym, in_features: int, out_features: int, gather_rows: int = 0
    ) -> Sym:
        """PEFT ``lora.Linear.forward`` for one active adapter (``gather_rows``: the rows lora_B's
        sequence-parallel all-gather makes of lora_A's sharded output)."""
        tape = self.tape
        rank = self.kernels.lora_rank
        result_dtype = result.dtype
        lora_a = Sym(in_features * rank, self.kernels.adapter_dtype, True, "parameter")
        lora_b = Sym(rank * out_features, self.kernels.adapter_dtype, True, "parameter")
        x_cast = tape.to(x, self.kernels.adapter_dtype)
        dropped = tape.dropout(x_cast, self.kernels.lora_dropout)
        down = tape.linear(dropped, lora_a, rank)
        if dropped is not x_cast:
            tape.release(dropped)
        if gather_rows:
            gathered = tape.new(gather_rows * rank, down.dtype, down.requires_grad)
            tape.record("all_gather", [], [down], [gathered])
            up = tape.linear(gathered, lora_b, out_features, saved_input=down)
            tape.release(gathered)
        else:
            up = tape.linear(down, lora_b, out_features)
        tape.release(down)
        scaled = tape.scale(up)
        tape.release(up)
        summed = tape.add(result, scaled)
        tape.release(result, scaled)
        out = tape.to(summed, result_dtype)
        if out is not summed:
            tape.release(summed)
        if x_cast is not x:
            # ``x = self._cast_input_dtype(x, lora_A.weight.dtype)`` rebinds forward's local: the cast lives
            # until ``lora.Linear.forward`` returns (measured, torch 2.13 CPU, AMP bf16 with fp32 adapters).
            tape.release(x_cast)
        return out

    # ------------------------------------------------------------------ attention
    def attention(self, x: Sym) -> Sym:
        arch, shape, tape = self.arch, self.shape, self.tape
        tokens, d = shape.tokens, shape.head_dim
        q_width, kv_width = shape.heads * d, shape.kv_heads * d
        x_tp = self._gather_sequence(x)
        names = self.names
        if arch.fused_qkv:
            qkv = self.linear(
                names.qkv_proj, x_tp, shape.hidden, q_width + 2 * kv_width, arch.attention_qkv_bias,
                self._saved_sequence_input(x, x_tp),
            )
            q, k, v = tape.split(qkv, [tokens * q_width, tokens * kv_width, tokens * kv_width])
            produced = [qkv]
        else:
            saved = self._saved_sequence_input(x, x_tp)
            q = self.linear(names.q_proj, x_tp, shape.hidden, q_width, arch.attention_qkv_bias, saved)
            k = self.linear(names.k_proj, x_tp, shape.hidden, kv_width, arch.attention_qkv_bias, saved)
            v = self.linear(names.v_proj, x_tp, shape.hidden, kv_width, arch.attention_qkv_bias, saved)
            produced = [q, k]
        if x_tp is not x:
            tape.release(x_tp)
        q, k, heads_first = self._position_and_norm(q, k, produced)
        if heads_first and self.kernels.attention == "fused":
            # The fused kernel returns its output in q's (b, heads, s, d) layout, so o_proj's input is a
            # contiguous copy (measured: torch 2.13 CPU, transformers 5.24 Phi-3).
            out = self._attention_core(q, k, v)
            merged = tape.copy(out)
            tape.release(out)
            out = merged
        else:
            out = self._attention_core(q, k, v)
        tape.release(q, k, v)
        projected = self.linear(names.o_proj, out, q_width, shape.hidden, arch.attention_output_bias)
        tape.release(out)
        return self._scatter_sequence(projected)

    def _position_and_norm(self, q: Sym, k: Sym, produced: list[Sym]) -> tuple[Sym, Sym, bool]:
        """q/k norms, then RoPE. Returns q, k and whether they are now laid out heads-first."""
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        tokens, d = shape.tokens, shape.head_dim
        if arch.qk_norm:
            if arch.qk_norm_over == "projection":  # OLMo 2: RMSNorm over the whole q and k projections
                q_normed = self.norm(names.q_norm, q, tokens, shape.heads * d)
                k_normed = self.norm(names.k_norm, k, tokens, shape.kv_heads * d)
            else:
                q_normed = self.norm(names.q_norm, q, tokens * shape.heads, d)
                k_normed = self.norm(names.k_norm, k, tokens * shape.kv_heads, d)
            tape.release(q, k)
            q, k = q_normed, k_normed
            produced = [q, k]
        heads_first = False
        if arch.position_embedding == "rope":
            q_rot, k_rot = self._rope(q), self._rope(k)
            tape.release(*produced)
            q, k = q_rot, k_rot
            if self.family.rope_concatenates:
                # torch.cat([rotated, passed-through], dim=-1): new tensors laid out (b, heads, s, d)
                q = tape.copy(q_rot, self._heads_numel(shape.heads))
                k = tape.copy(k_rot, self._heads_numel(shape.kv_heads))
                tape.release(q_rot, k_rot)
                heads_first = True
        return q, k, heads_first

    def _heads_numel(self, heads: int) -> int:
        return self.shape.tokens * heads * self.shape.head_dim

    def _rope(self, q: Sym) -> Sym:
        """``q * cos + rotate_half(q) * sin``; cos/sin carry the residual stream's dtype. With partial
        rotary (GPT-NeoX) the ops run on ``q[..., :rotary_dim]``, a view; the caller concatenates."""
        tape = self.tape
        rotary_dim = self.arch.rotary_dim
        if rotary_dim != self.shape.head_dim:
            # q[..., :rotary_dim]: a view whose backward hands a gradient of q's full size on to q (and from it to
            # the norm and the projection before it, whose parameter gradients follow)
            part = q.view(q.numel // self.shape.head_dim * rotary_dim)
            tape.record("slice", [], [q], [part])
            q = part
        cos = Sym(self.shape.seq * rotary_dim, self.kernels.stream_dtype, False, "external")
        sin = Sym(self.shape.seq * rotary_dim, self.kernels.stream_dtype, False, "external")
        with_cos = tape.mul(q, cos)
        # rotate_half: torch.cat((-x2, x1)) of two slices; each slice's backward makes full-size zeros
        rotated = tape.copy(q, backward_scratch_bytes=q.nbytes)
        with_sin = tape.mul(rotated, sin)
        tape.release(rotated)
        out = tape.add(with_cos, with_sin)
        tape.release(with_cos, with_sin)
        return out

    def _attention_core(self, q: Sym, k: Sym, v: Sym) -> Sym:
        """The attention kernel; returns the tensor fed to the output projection.

        Fused kernels save q, k, v, the output and the log-sum-exp. The eager path
        (transformers' ``eager_attention_forward``) saves q and kᵀ (after ``repeat_kv`` and
        autocast's casts), the softmax result, the probabilities fed to the second matmul
        (cast, dropped out) and v; Llama-family code asks for an fp32 softmax and casts it
        back to the query's dtype, GPT-2 casts to the value's dtype. SDPA's math fallback was
        measured to save what eager saves (torch 2.13, CPU).
        """
        arch, shape, tape, kernel = self.arch, self.shape, self.tape, self.kernels.attention
        lse_numel = shape.batch * shape.heads * shape.seq
        dropout = arch.attention_dropout
        if kernel == "fused":
            repeated = sdpa_repeats_kv(shape)
            if repeated:  # repeat_kv: expand + reshape copies of K and V, saved by the kernel in their place
                groups = shape.heads // shape.kv_heads
                k, v = tape.copy(k, k.numel * groups), tape.copy(v, v.numel * groups)
            mask = None
            if shape.attention_mask:
                # SDPA turns the boolean (b, 1, s, s) mask into an additive one (aten.where) in the dtype it runs
                # in (autocast's, else q's), per call, and keeps it for backward (measured, torch 2.13 CPU: one per
                # masked layer; packed rows, padding and sliding windows alike).
                mask = tape.new(shape.batch * shape.seq * shape.kv_seq, tape.autocast or q.dtype, False)
            out = tape.fused_attention(q, k, v, lse_numel, dropout > 0, also_keeps=(mask,) if mask is not None else ())
            if mask is not None:
                tape.release(mask)
            if repeated:
                tape.release(k, v)
            return out  # output laid out (b, s, a, d)
        if kernel == "math":
            return self._math_attention(q, k, v)
        groups = shape.heads // shape.kv_heads
        if groups > 1:  # repeat_kv: expand + reshape copies
            k = tape.copy(k, k.numel * groups)
            v = tape.copy(v, v.numel * groups)
        first_saved = len(tape.saved_storages)
        scores = tape.matmul(q, k, shape.batch * shape.heads * shape.seq * shape.kv_seq)
        scaled = tape.scale(scores)
        tape.release(scores)
        if arch.attn_logit_softcapping:  # Gemma 2: tanh(scores / cap) * cap
            divided = tape.scale(scaled)
            tape.release(scaled)
            capped = tape.unary_saving_result("tanh", divided)
            tape.release(divided)
            scaled = tape.scale(capped)
            tape.release(capped)
        if self.family.eager_softmax_in_fp32:
            masked = tape.scale(scaled)  # + the 4-D causal mask (a new tensor; add saves nothing)
            tape.release(scaled)
            probs = tape.unary_saving_result("softmax", masked, dtype="fp32")
            tape.release(masked)
            cast = tape.to(probs, q.dtype)
        else:
            probs = tape.unary_saving_result("softmax", scaled)
            tape.release(scaled)
            cast = tape.to(probs, v.dtype)
        dropped = tape.dropout(cast, dropout)
        context = tape.matmul(dropped, v, self._context_numel(q, v))
        tape.release(probs, cast, dropped)
        if groups > 1:
            tape.release(k, v)
        out = tape.copy(context)  # transpose(1, 2).reshape(...).contiguous()
        tape.release(context)
        if self.kernels.selective_recompute:
            self._forget_saved_since(first_saved, keep=(q, k, v))
        return out

    def _math_attention(self, q: Sym, k: Sym, v: Sym) -> Sym:
        """SDPA's math fallback (``_scaled_dot_product_attention_math``).

        Unless ``torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)``, 16-bit inputs
        are upcast to fp32 and the whole attention runs in fp32; q and k are scaled by
        sqrt(scale) before their product, grouped-query K/V are repeated, and the output is
        cast back. Saved: scaled q and k, the softmax, the dropout mask and output, v (all
        fp32 for 16-bit inputs; checked against torch 2.13 on CPU).
        """
        tape = self.tape
        q_in, k_in, v_in = (tape.autocast_input("sdpa", t) for t in (q, k, v))
        autocast, tape.autocast = tape.autocast, None  # the kernel's inner ops run below autocast
        try:
            return self._math_attention_inner(q, k, v, q_in, k_in, v_in)
        finally:
            tape.autocast = autocast

    def _math_attention_inner(self, q: Sym, k: Sym, v: Sym, q_in: Sym, k_in: Sym, v_in: Sym) -> Sym:
        arch, shape, tape = self.arch, self.shape, self.tape
        input_dtype = q_in.dtype
        q32, k32, v32 = (tape.to(t, "fp32") for t in (q_in, k_in, v_in))
        if v32 is v_in and shape.batch > 1:
            # matmul folds (b, heads) of v's transposed view into one batch dimension: a contiguous
            # copy, except for a batch of one, where the fold is a view of the projection's output.
            v32 = tape.copy(v_in)
        groups = shape.heads // shape.kv_heads
        if groups > 1:
            k32 = tape.copy(k32, k32.numel * groups)
            v32 = tape.copy(v32, v32.numel * groups)
        first_saved = len(tape.saved_storages)
        q_scaled, k_scaled = tape.scale(q32), tape.scale(k32)
        scores = tape.matmul(q_scaled, k_scaled, shape.batch * shape.heads * shape.seq * shape.kv_seq)
        tape.release(q_scaled, k_scaled)
        probs = tape.unary_saving_result("softmax", scores, dtype="fp32")
        tape.release(scores)
        dropped = tape.dropout(probs, arch.attention_dropout)
        context = tape.matmul(dropped, v32, self._context_numel(q, v))
        tape.release(probs, dropped)
        out = tape.to(context, input_dtype)
        contiguous = tape.copy(out)  # transpose(1, 2).reshape(...).contiguous()
        tape.release(context, out)
        for cast, original in ((q32, q), (k32, k), (v32, v), (q_in, q), (k_in, k), (v_in, v)):
            if cast is not original:
                tape.release(cast)
        if self.kernels.selective_recompute:
            self._forget_saved_since(first_saved, keep=())
        return contiguous

    def _context_numel(self, q: Sym, v: Sym) -> int:
        """Elements of ``probs @ v``: q's, unless values have their own head width (a hook for MLA)."""
        return q.numel

    def _forget_saved_since(self, first_index: int, keep: tuple[Sym, ...]) -> None:
        """Selective recomputation (Korthikanti et al. 2022): the attention core keeps only q, k, v."""
        kept = {t.storage for t in keep}
        storages = list(self.tape.saved_storages)[first_index:]
        for storage in storages:
            if storage in kept:
                continue
            tensor = self.tape.saved_storages.pop(storage)
            self.tape.release(tensor)
            for node in self.tape.nodes:
                node.saved = [t for t in node.saved if t.storage != storage]

    # ------------------------------------------------------------------ MLP
    def mlp(self, x: Sym) -> Sym:
        if self.arch.is_moe:
            return self._moe(x)
        x_tp = self._gather_sequence(x)
        out = self._dense_mlp(self.names.mlp, x_tp, self.shape.intermediate, saved_input=self._saved_sequence_input(x, x_tp))
        if x_tp is not x:
            self.tape.release(x_tp)
        return self._scatter_sequence(out)

    def _dense_mlp(self, prefix: str, x: Sym, width: int, saved_input: Optional[Sym] = None) -> Sym:
        arch, tape, h = self.arch, self.tape, self.shape.hidden
        names = self.names
        if arch.mlp == "plain":
            fc1, fc2 = f"{prefix}.{names.fc1}", f"{prefix}.{names.fc2}"
            hidden = self.linear(fc1, x, h, width, arch.mlp_bias, saved_input)
            activated = self._activation(hidden)
            tape.release(hidden)
            out = self.linear(fc2, activated, width, h, arch.mlp_bias)
            tape.release(activated)
            return out
        if arch.fused_gate_up:
            gate_up = self.linear(f"{prefix}.{names.gate_up_proj}", x, h, 2 * width, arch.mlp_bias, saved_input)
            gate, up = tape.split(gate_up, [gate_up.numel // 2, gate_up.numel // 2])
        else:
            gate = self.linear(f"{prefix}.{names.gate_proj}", x, h, width, arch.mlp_bias, saved_input)
            up = self.linear(f"{prefix}.{names.up_proj}", x, h, width, arch.mlp_bias, saved_input)
        activated = self._activation(gate)
        product = tape.mul(activated, up)
        tape.release(gate, up, activated)
        out = self.linear(f"{prefix}.{names.down_proj}", product, width, h, arch.mlp_bias)
        tape.release(product)
        return out

    def _activation(self, x: Sym) -> Sym:
        """The MLP activation; GPT-2's gelu_new is a chain of Python ops, others are one kernel."""
        tape = self.tape
        if self.arch.hidden_act == "quick_gelu":  # CLIP's QuickGELUActivation: x * sigmoid(1.702 * x)
            scaled = tape.scale(x)
            sigmoid = tape.unary_saving_result("sigmoid", scaled)
            tape.release(scaled)
            out = tape.mul(x, sigmoid)
            tape.release(sigmoid)
            return out
        if self.arch.hidden_act not in ("gelu_new", "gelu_fast"):
            return tape.unary_saving_input(self.arch.hidden_act, x)
        # NewGELUActivation: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))
        half = tape.scale(x)
        cubed = tape.unary_saving_input("pow", x)
        scaled_cube = tape.scale(cubed)
        tape.release(cubed)
        inner = tape.add(x, scaled_cube)
        tape.release(scaled_cube)
        scaled_inner = tape.scale(inner)
        tape.release(inner)
        tanh = tape.unary_saving_result("tanh", scaled_inner)
        tape.release(scaled_inner)
        one_plus = tape.scale(tanh)
        if self.frees_temporaries_once_read:
            tape.release(tanh)
        out = tape.mul(half, one_plus)
        tape.release(half, one_plus, tanh)
        return out

    def _moe(self, x: Sym) -> Sym:
        """Router (fp32 softmax, top-k) and routed experts, as transformers 5's ``grouped_mm`` experts run.

        Each token visits ``experts_per_token`` experts: the tokens are gathered in expert order
        (``hidden_states[perm // k]``), two ``torch._grouped_mm`` calls compute every expert at once,
        the outputs are scaled by the routing weights, put back in token order and summed over
        the k experts. ``_grouped_mm`` is on no autocast list, so under autocast the experts run
        in the residual stream's dtype, with no cast copies of their weights.
        """
        arch, shape, tape = self.arch, self.shape, self.tape
        h, experts = shape.hidden, shape.local_experts or arch.num_experts
        routed_rows = shape.stream_tokens * shape.experts_per_token
        names = self.names
        normalized = self._route(x)
        gathered = tape.gather(x, routed_rows * h, routed_rows)  # hidden_states[perm // k]
        weights = tape.gather(normalized, routed_rows, routed_rows)  # sample_weights[perm]
        tape.release(normalized)
        trains = self.trainability.trains(names.experts)
        rank = self.kernels.lora_rank
        gate_up_weight = self.expert_parameter(
            f"{names.experts}.gate_up_proj", experts * 2 * shape.intermediate * h, trains,
            2 * rank * experts * (2 * shape.intermediate + h),  # rank doubled: w1 and w3 fused (rank_pattern)
        )
        gate_up = tape.linear(gathered, gate_up_weight, 2 * shape.intermediate, in_features=h, op="grouped_mm")
        tape.release(gathered)
        gate, up = tape.split(gate_up, [gate_up.numel // 2, gate_up.numel // 2])
        activated = self._activation(gate)
        product = tape.mul(activated, up)
        tape.release(gate_up, activated)
        down_weight = self.expert_parameter(
            f"{names.experts}.down_proj", experts * shape.intermediate * h, trains, rank * experts * (shape.intermediate + h)
        )
        down = tape.linear(product, down_weight, h, in_features=shape.intermediate, op="grouped_mm")
        tape.release(product)
        tape.release(gate_up_weight, down_weight)  # the parametrization cache ends with the experts' forward
        weighted = tape.mul(down, weights)
        tape.release(down, weights)
        reordered = tape.gather(weighted, weighted.numel, routed_rows)  # weighted_out[inv_perm]
        tape.release(weighted)
        out = tape.reduce(reordered, shape.stream_tokens * h)  # .view(tokens, k, h).sum(dim=1)
        tape.release(reordered)
        cast = tape.to(out, x.dtype)
        if cast is not out:
            tape.release(out)
        out = cast
        if shape.shared_intermediate:
            shared = self._dense_mlp(names.shared_expert, x, shape.shared_intermediate)
            if arch.shared_expert_gate:
                gate_logit = self.linear(names.shared_expert_gate, x, h, 1, False)
                sigmoid = tape.unary_saving_result("sigmoid", gate_logit)
                tape.release(gate_logit)
                gated = tape.mul(sigmoid, shared)
                tape.release(sigmoid, shared)
                shared = gated
            total = tape.add(out, shared)
            tape.release(out, shared)
            out = total
        return out

    def expert_parameter(self, module: str, numel: int, trains: bool, factors_numel: int = 0) -> Sym:
        """A router weight or fused expert parameter as the forward reads it: the parameter itself, or,
        when LoRA adapts it, PEFT's ``ParamWrapper`` merge (peft/tuners/lora/layer.py ``_activate_lora``):
        for a 3-D expert stack ``_LoraFactorsProxy``, ``baddbmm(W, lhs, rhs)`` with autocast off (the
        factors cast to W's dtype), for the 2-D router ``_LoraParameterProxy``, ``W + (B @ A) * scaling``
        cast to W's dtype. The merged weight is a new tensor that requires grad, so the matmul that uses
        it saves it, and its input too. ``factors_numel``: elements of lhs and rhs (r·E·(in + out))."""
        weight = Sym(numel, self.kernels.weight_dtype, trains, "parameter")
        if not self.trainability.has_adapter(module):
            return weight
        tape = self.tape
        adapter = Sym(max(factors_numel, 1), self.kernels.adapter_dtype, True, "parameter")  # lora_A and lora_B
        autocast, tape.autocast = tape.autocast, None
        try:
            if module == self.names.router:
                delta = tape.new(numel, self.kernels.adapter_dtype, True)
                tape.record("mm", [], [adapter], [delta])
                delta_cast = tape.to(delta, weight.dtype)
                merged = tape.add(weight, delta_cast)
                tape.release(delta, delta_cast)
            else:
                factors = adapter  # lhs, rhs: views of lora_B, lora_A, or their .to(param.dtype) copies
                if adapter.dtype != weight.dtype:
                    factors = tape.new(adapter.numel, weight.dtype, True)  # not autocast's: an activation
                    tape.record("to_copy", [], [adapter], [factors])
                merged = tape.new(numel, weight.dtype, True)
                tape.record("baddbmm", [factors], [weight, factors], [merged])  # each factor's grad needs the other
                tape.release(factors)
        finally:
            tape.autocast = autocast
        return merged

    def _route(self, x: Sym) -> Sym:
        """The router: fp32 softmax over the experts, top-k, renormalised; returns the routing weights
        (one per token and chosen expert). A hook for families whose router differs."""
        arch, shape, tape = self.arch, self.shape, self.tape
        routed_rows = shape.stream_tokens * shape.experts_per_token
        router = self.expert_parameter(self.names.router, arch.num_experts * shape.hidden, self.trainability.trains(self.names.router))
        logits = tape.linear(x, router, arch.num_experts)
        logits32 = tape.to(logits, "fp32")
        probs = tape.unary_saving_result("softmax", logits32)
        tape.release(logits, logits32)
        top = tape.gather(probs, routed_rows, routed_rows)  # topk values (backward keeps the indices)
        tape.release(probs)
        normalized = tape.mul(top, Sym(shape.stream_tokens, "fp32", True))  # top /= top.sum(-1, keepdim=True)
        tape.release(top)
        return normalized

    # ------------------------------------------------------------------ sequence parallelism
    def _gather_sequence(self, x: Sym) -> Sym:
        """With sequence parallelism, the all-gather before a column-parallel linear (a transient)."""
        if self.shape.stream_tokens == self.shape.tokens:
            return x
        gathered = self.tape.new(self.shape.tokens * self.shape.hidden, x.dtype, x.requires_grad)
        self.tape.record("all_gather", [], [x], [gathered])
        return gathered

    def _saved_sequence_input(self, shard: Sym, gathered: Sym) -> Sym:
        """What a column-parallel linear saves under sequence parallelism: Megatron the sequence shard
        (re-gathered in backward), DTensor the gathered input itself (:attr:`LayerKernels.saves_gathered_sequence`)."""
        return gathered if self.kernels.saves_gathered_sequence else shard

    def _scatter_sequence(self, x: Sym) -> Sym:
        """With sequence parallelism, the reduce-scatter after a row-parallel linear."""
        if self.shape.stream_tokens == self.shape.tokens:
            return x
        scattered = self.tape.new(self.shape.stream_tokens * self.shape.hidden, x.dtype, x.requires_grad)
        self.tape.record("reduce_scatter", [], [x], [scattered])
        self.tape.release(x)
        return scattered

    # ------------------------------------------------------------------ the layer
    def layer(self, x: Sym) -> Sym:
        """``DecoderLayer.forward``: attention and MLP sub-blocks with residuals, normed before
        (Llama), around (Gemma's four norms) or after (OLMo 2) each sub-block."""
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        rows, h = shape.stream_tokens, shape.hidden
        if arch.parallel_residual:
            return self._parallel_residual_layer(x)
        post_only = arch.norm_position == "post"
        sandwich = arch.norms_per_layer == 4 and not post_only
        if post_only:
            attended = self.attention(x)
            normed_out = self.norm(names.post_attention_norm, attended, rows, h)
            tape.release(attended)
            attended = normed_out
        else:
            normed = self.norm(names.input_norm, x, rows, h)
            attended = self.attention(normed)
            tape.release(normed)
            if sandwich:
                post = self.norm(names.post_attention_norm, attended, rows, h)
                tape.release(attended)
                attended = post
        attended = self._residual_dropout(attended)
        hidden = tape.add(x, attended)
        tape.release(attended)
        if post_only:
            mixed = self.mlp(hidden)
            post = self.norm(names.post_feedforward_norm, mixed, rows, h)
            tape.release(mixed)
            mixed = post
        else:
            second = names.pre_feedforward_norm if sandwich else names.post_attention_norm
            normed = self.norm(second, hidden, rows, h)
            mixed = self.mlp(normed)
            tape.release(normed)
            if sandwich:
                post = self.norm(names.post_feedforward_norm, mixed, rows, h)
                tape.release(mixed)
                mixed = post
        mixed = self._residual_dropout(mixed)
        out = tape.add(hidden, mixed)
        tape.release(hidden, mixed)
        return out

    def _parallel_residual_layer(self, x: Sym) -> Sym:
        """``GPTNeoXLayer.forward`` with ``use_parallel_residual``:
        ``mlp(norm2(x)) + attention(norm1(x)) + x``, each branch after its dropout."""
        shape, tape, names = self.shape, self.tape, self.names
        rows, h = shape.stream_tokens, shape.hidden
        normed = self.norm(names.input_norm, x, rows, h)
        attended = self._residual_dropout(self.attention(normed))
        tape.release(normed)
        normed = self.norm(names.post_attention_norm, x, rows, h)
        mixed = self._residual_dropout(self.mlp(normed))
        tape.release(normed)
        branches = tape.add(mixed, attended)
        tape.release(mixed, attended)
        out = tape.add(branches, x)
        tape.release(branches)
        return out

    def _residual_dropout(self, x: Sym) -> Sym:
        """Dropout on a sub-block's output (Phi-3, GPT-2, StarCoder2), then Granite's residual multiplier."""
        dropped = self.tape.dropout(x, self.arch.residual_dropout)
        if dropped is not x:
            self.tape.release(x)
        if self.arch.residual_multiplier is not None:  # hidden_states * residual_multiplier: a new tensor
            scaled = self.tape.scale(dropped)
            self.tape.release(dropped)
            dropped = scaled
        return dropped


@dataclass(frozen=True)
class Trace:
    """What one piece of the model (a decoder layer, the embedding, the loss head) costs on a rank,
    from replaying its forward and backward on a tape."""

    saved_activation_bytes: int
    """Tensors saved for backward (activations)."""
    saved_weight_copy_bytes: int
    """Autocast low-precision copies of weights saved for backward (reported under parameters)."""
    cached_weight_copy_bytes: int
    """All of autocast's cached weight casts (saved or not): alive until the autocast region exits."""
    cache_only_weight_copy_bytes: int
    """Cached casts that nothing saved: freed when the autocast region exits."""
    forward_peak_bytes: int
    """Peak during the forward above what was alive before it (the input excluded)."""
    output_bytes: int
    """What the forward leaves alive besides the saved tensors (a layer: its output)."""
    backward_peak_bytes: int
    """Peak during backward, above what was alive before, including the saved tensors and the new
    parameter gradients."""
    backward_peak_grad_bytes: int
    """Parameter gradients among backward_peak_bytes (they may not all exist yet at the peak)."""
    backward_peak_saved_activation_bytes: int
    """Saved activations still alive at the backward peak (some may be released by then)."""
    backward_peak_saved_weight_copy_bytes: int
    backward_peak_activation_grad_bytes: int
    parameter_grad_bytes: int
    """Parameter gradients the backward leaves in ``.grad``."""
    input_grad_bytes: int
    input_saved: bool = False
    """Whether the piece saves its own input tensor for backward (it is then among the saved bytes)."""
    forward_events: tuple = ()
    """The forward's allocation log (``Tape.events``), for the CUDA caching-allocator replay."""
    backward_events: tuple = ()
    """The backward's allocation log (``BackwardReplay.events``)."""
    input_key: tuple = ()
    """(storage id, uid) of the piece's input tensor on its tape, () when it has none."""
    output_key: tuple = ()
    """(storage id, uid) of the output whose gradient starts the backward."""
    forward_peak_weight_copy_bytes: int = 0
    """Weight copies (autocast's casts) among the forward's peak: the parameters share of it."""


def replay(
    tape: Tape,
    outputs: list[Sym],
    forward_peak_bytes: int,
    output_bytes: int,
    input_saved: bool,
    parameter_grads_exist: bool,
    input_tensor: Optional[Sym] = None,
) -> Trace:
    """Replay the backward of a recorded forward and gather its figures into a :class:`Trace`."""
    forward_events = tuple(tape.events)
    activations = tape.saved_bytes(("activation",))
    weight_copies = tape.saved_bytes(("weight_copy",))
    backward = tape.backward(outputs, parameter_grads_exist)
    return Trace(
        saved_activation_bytes=activations,
        saved_weight_copy_bytes=weight_copies,
        cached_weight_copy_bytes=tape.cached_weight_copy_bytes,
        cache_only_weight_copy_bytes=tape.cache_only_weight_copy_bytes,
        forward_peak_bytes=forward_peak_bytes,
        output_bytes=output_bytes,
        backward_peak_bytes=backward.peak_bytes,
        backward_peak_grad_bytes=backward.peak_parameter_grad_bytes,
        backward_peak_saved_activation_bytes=backward.peak_saved_activation_bytes,
        backward_peak_saved_weight_copy_bytes=backward.peak_saved_weight_copy_bytes,
        backward_peak_activation_grad_bytes=backward.peak_activation_grad_bytes,
        parameter_grad_bytes=backward.parameter_grad_bytes,
        input_grad_bytes=backward.input_grad_bytes,
        input_saved=input_saved,
        forward_events=forward_events,
        backward_events=backward.events,
        input_key=(input_tensor.storage, input_tensor.uid) if input_tensor is not None else (),
        output_key=(outputs[0].storage, outputs[0].uid) if outputs else (),
        forward_peak_weight_copy_bytes=tape.peak_weight_copy_bytes,
    )


def trace_layer(
    arch: Architecture,
    shape: LayerShape,
    kernels: LayerKernels,
    trainability: Trainability,
    input_requires_grad: bool,
    parameter_grads_exist: bool = False,
) -> Trace:
    """Replay one decoder layer forward and backward."""
    tape = Tape(device=kernels.device, autocast=kernels.autocast)
    from .models import family_for

    x = tape.new(shape.stream_tokens * shape.hidden * family_for(arch).residual_streams(arch), kernels.stream_dtype, input_requires_grad)

    out = family_for(arch).program()(arch, shape, kernels, trainability, tape).layer(x)
    forward_peak = tape.peak_live_bytes - x.nbytes
    input_saved = x.storage in tape.saved_storages
    tape.release(x)
    return replay(tape, [out], forward_peak, out.nbytes, input_saved, parameter_grads_exist, x)

"""The Mamba-2 mixer, shared by the state-space hybrids (transformers 5.24 ``GraniteMoeHybridMambaLayer``,
``NemotronHMamba2Mixer``, ``Mamba2Mixer``: the same module under three names).

**Parameters** (``__init__``, in module order): ``conv1d`` (a depthwise ``nn.Conv1d`` over the
conv_dim = H·P + 2·G·N channels of x, B and C, kernel ``mamba_d_conv``, with a bias by default),
``in_proj`` (h → z, x·B·C, dt: 2·H·P + 2·G·N + H), ``dt_bias``, ``A_log`` (H each), the gated RMSNorm's
weight (H·P), ``D`` (H), ``out_proj`` (H·P → h).

**What the CPU path saves** (``forward`` → ``torch_forward``'s pieces, measured op by op with
trainmem's tracker and ``saved_tensors_hooks``, torch 2.13 CPU, tests/test_mamba.py):

* ``in_proj``'s output is split into z, x·B·C and dt (views); ``causal_conv1d_fn``'s torch fallback
  convolves the transposed x·B·C (``F.conv1d(x.to(weight.dtype), padding=K − 1, groups=conv_dim)``;
  autocast casts input, weight and bias to 16 bits), slices the first s positions and applies SiLU, which
  saves the slice (a view: the whole s + K − 1 output stays alive);
* ``mamba2_chunk_scan``: ``softplus(dt + dt_bias)`` and ``clamp`` (each saves its input); fp32 copies of
  x, B, C (``.float()``; x's copy is a view in fp32); B and C repeated over the H / G heads of each group
  (``repeat_interleave``: a copy unless G = H); ``D · pad(x)`` (``F.pad`` copies even when it pads
  nothing); ``x · dt`` and ``A · dt`` (fp32); every chunked operand padded again (four more copies);
  the intra-chunk decay ``exp(segment_sum(A))`` (b·H·c·l·l fp32, two masked fills, a cumsum); six
  ``einsum`` contractions, each a ``bmm`` over operands that einsum's permute-and-reshape copies
  (the copies are what ``bmm`` saves); the inter-chunk recurrence over c + 1 states (b·H·P·N each);
  the output ``Y_diag + Y_off`` made contiguous, plus ``D``'s residual;
* ``GraniteMoeHybridRMSNormGated``: ``x · silu(z.float())``, the group RMSNorm in fp32, the weight; the
  result is cast to the stream's dtype for ``out_proj``.

**On CUDA** transformers calls ``mamba_split_conv1d_scan_combined`` of mamba_ssm (or a Hub kernel) when
it is installed (``is_fast_path_available``): the whole mixer is one autograd function
(``MambaSplitConv1dScanCombinedFn`` in mamba_ssm/ops/triton/ssd_combined.py) whose
``ctx.save_for_backward`` keeps ``zxbcdt`` (in_proj's output), the conv weight and bias, the scan's
output ``out`` (b·s·H·P in the input's dtype, before the norm), dt_bias, A, D, the norm weight, the
per-row ``rstd`` (fp32) and the out_proj weight, and recomputes the conv, the chunk states and the
norm in backward; out_proj's input is recomputed too. trainmem replays that set on CUDA: an assumption
read from mamba_ssm 2.2's source, not measured (no GPU here); without mamba_ssm, CUDA runs the same torch
path as the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..architecture import Architecture
from ..errors import FieldError
from ..state_space import Mamba2Mixer
from ..tape import Sym
from . import blocks
from .blocks import ParameterTensor

CUDA_KERNEL_NOTE = (
    "Mamba-2 layers: on CPU as transformers' torch path runs them (measured); on CUDA what mamba_ssm's "
    "fused mamba_split_conv1d_scan_combined saves, read from its source (an assumption, not measured)"
)


@dataclass(frozen=True)
class Mamba2Names:
    """Module paths of a Mamba-2 mixer inside its layer (``mamba`` in Granite 4.0, ``mixer`` in Nemotron-H)."""

    prefix: str = "mamba"

    @property
    def in_proj(self) -> str:
        return f"{self.prefix}.in_proj"

    @property
    def conv1d(self) -> str:
        return f"{self.prefix}.conv1d"

    @property
    def dt_bias(self) -> str:
        return f"{self.prefix}.dt_bias"

    @property
    def a_log(self) -> str:
        return f"{self.prefix}.A_log"

    @property
    def d(self) -> str:
        return f"{self.prefix}.D"

    @property
    def norm(self) -> str:
        return f"{self.prefix}.norm"

    @property
    def out_proj(self) -> str:
        return f"{self.prefix}.out_proj"

    def module_paths(self) -> tuple[str, ...]:
        return (self.in_proj, self.conv1d, self.dt_bias, self.a_log, self.d, self.norm, self.out_proj)


def mamba2_fields(fields, hidden_size: int, prefix: str = "mamba_", heads_key: str = "mamba_n_heads",
                  head_dim_key: str = "mamba_d_head", defaults: dict | None = None,
                  heads_tile_expand: bool = False) -> Mamba2Mixer:
    """The mixer's sizes from config.json, with the configuration class's defaults (``defaults``):
    ``{prefix}n_heads``, ``{prefix}d_head`` (``"auto"``: expand · h / heads), ``{prefix}d_state``,
    ``{prefix}n_groups``, ``{prefix}d_conv``, ``{prefix}chunk_size``, ``{prefix}conv_bias``,
    ``{prefix}proj_bias``. The heads must tile ``expand · h`` exactly, as the configuration class checks
    (``validate_architecture``), and the groups must divide the heads (``repeat_interleave``). With an explicit
    ``{prefix}d_head``, ``heads_tile_expand`` asks for heads × d_head = expand · h as well (GraniteMoeHybridConfig's
    ``validate_architecture``: "The dimensions for the Mamba head state do not match the model intermediate_size")."""
    d = defaults or {}
    heads = fields.integer(heads_key, d.get("n_heads", 128))
    expand = fields.integer(f"{prefix}expand", d.get("expand", 2))
    head_dim_value = fields.raw(head_dim_key, d.get("d_head", "auto"))
    if head_dim_value == "auto":
        if (expand * hidden_size) % heads:
            raise fields.fail(heads_key, f"must divide {prefix}expand * hidden_size ({expand * hidden_size}), got {heads}")
        head_dim = expand * hidden_size // heads
    else:
        head_dim = fields.integer(head_dim_key)
        if heads_tile_expand and heads * head_dim != expand * hidden_size:
            raise fields.fail(
                head_dim_key,
                f"{heads_key} * {head_dim_key} ({heads} * {head_dim}) must equal {prefix}expand * hidden_size "
                f"({expand * hidden_size})",
            )
    groups = fields.integer(f"{prefix}n_groups", d.get("n_groups", 1))
    if heads % groups:
        raise fields.fail(f"{prefix}n_groups", f"must divide {heads_key} ({heads}), got {groups}")
    return Mamba2Mixer(
        num_heads=heads,
        head_dim=head_dim,
        state_size=fields.integer(f"{prefix}d_state", d.get("d_state", 256)),
        n_groups=groups,
        conv_kernel=fields.integer(f"{prefix}d_conv", d.get("d_conv", 4)),
        chunk_size=fields.integer(f"{prefix}chunk_size", d.get("chunk_size", 256)),
        conv_bias=fields.boolean(f"{prefix}conv_bias", d.get("conv_bias", True)),
        proj_bias=fields.boolean(f"{prefix}proj_bias", d.get("proj_bias", False)),
        norm_groups=groups if d.get("norm_per_group", True) else 1,
    )


def mamba2_tensors(arch: Architecture, names: Mamba2Names) -> list[ParameterTensor]:
    """The mixer's parameters in module order (``GraniteMoeHybridMambaLayer.__init__``)."""
    m = _mixer(arch)
    h, inner = arch.hidden_size, m.inner_width
    tensors = [ParameterTensor(f"{names.conv1d}.weight", "attention", (m.conv_dim, 1, m.conv_kernel))]
    if m.conv_bias:
        tensors.append(ParameterTensor(f"{names.conv1d}.bias", "attention", (m.conv_dim,)))
    tensors += blocks.linear(names.in_proj, "attention", h, m.projection_width, m.proj_bias)
    tensors += [
        ParameterTensor(names.dt_bias, "attention", (m.num_heads,)),
        ParameterTensor(names.a_log, "attention", (m.num_heads,)),
    ]
    if m.gated_norm != "gate_only":  # Falcon-H1 without mamba_rms_norm: nn.Identity, no weight
        tensors.append(ParameterTensor(f"{names.norm}.weight", "norms", (inner,)))
    tensors.append(ParameterTensor(names.d, "attention", (m.num_heads,)))
    return tensors + blocks.linear(names.out_proj, "attention", inner, h, m.has_out_proj_bias)


def _mixer(arch: Architecture) -> Mamba2Mixer:
    if arch.mamba is None:  # pragma: no cover - the family readers always set it with Mamba-2 layers
        raise ValueError("a Mamba-2 layer needs Architecture.mamba")
    return arch.mamba


class Mamba2Program:
    """A mixin for a ``LayerProgram``: :meth:`mamba2_mixer` replays the Mamba-2 mixer's training forward.

    The host program provides ``arch``, ``shape``, ``kernels``, ``tape``, ``parameter``, ``linear`` and
    ``mamba_names`` (a :class:`Mamba2Names`)."""

    mamba_names = Mamba2Names()
    mamba_family = "granitemoehybrid"
    """The model type that errors about the Mamba-2 layers name."""

    def mamba2_mixer(self, x: Sym) -> Sym:
        """``forward`` without a cache and without a padding mask (training): in_proj, the causal conv,
        the chunked SSD scan, the gated norm, out_proj (the fused kernel on CUDA)."""
        self._refuse_split_mamba()
        m, names, tape, shape = _mixer(self.arch), self.mamba_names, self.tape, self.shape
        tokens, h = shape.tokens, shape.hidden
        x_in = self._mamba_input(x)
        projected = self._mamba_projected(self.linear(names.in_proj, x_in, h, m.projection_width, m.proj_bias))
        if self.kernels.device == "cuda":
            if x_in is not x:
                tape.release(x_in)
            return self._fused_mamba2(x, projected, m)
        a = self._negated_exp_a_log(m.num_heads)  # A = -torch.exp(self.A_log.float())
        gate, xbc, dt = tape.split(projected, [tokens * m.inner_width, tokens * m.conv_dim, tokens * m.num_heads])
        activated = self._mamba_causal_conv1d(xbc, m)
        if x_in is not x:  # the forward's rebound local: dropped at the split after the conv
            tape.release(x_in)
        xs, b_in, c_in = tape.split(
            activated, [tokens * m.inner_width, tokens * m.n_groups * m.state_size, tokens * m.n_groups * m.state_size]
        )
        scan = self._chunk_scan(xs, dt, a, b_in, c_in, m)
        tape.release(activated, a)
        normed = self._mamba_gated_norm(scan, gate, m)
        tape.release(scan, projected)
        cast = tape.to(normed, x.dtype)  # out_proj(scan_output.to(dtype))
        if cast is not normed:
            tape.release(normed)
        out = self.linear(names.out_proj, cast, m.inner_width, h, m.has_out_proj_bias)
        tape.release(cast)
        return out

    def _mamba_input(self, x: Sym) -> Sym:
        """What in_proj reads: the mixer's input (a hook: Falcon-H1 scales it by ``ssm_in_multiplier`` first)."""
        return x

    def _mamba_projected(self, projected: Sym) -> Sym:
        """in_proj's output as the mixer splits it (a hook: Falcon-H1 multiplies it by its µP vector)."""
        return projected

    def _refuse_split_mamba(self) -> None:
        """Sequence and tensor parallelism of the Mamba-2 layers are not modelled: one FieldError."""
        shape = self.shape
        if shape.stream_tokens != shape.tokens:
            raise FieldError("parallelism.sequence_parallel", f"is not modelled for {self.mamba_family} yet")
        if shape.heads != self.arch.num_attention_heads:
            raise FieldError(
                "parallelism.tensor_parallel_size",
                f"tensor parallelism of {self.mamba_family}'s Mamba-2 layers is not modelled yet; use 1",
            )

    # ------------------------------------------------------------------ small pieces
    def _negated_exp_a_log(self, heads: int) -> Sym:
        tape = self.tape
        a_log = self.parameter(self.mamba_names.a_log, heads)
        a_log32 = tape.to(a_log, "fp32")
        rate = tape.unary_saving_result("exp", a_log32)
        if a_log32 is not a_log:
            tape.release(a_log32)
        negated = tape.scale(rate)
        tape.release(rate)
        return negated

    def _mamba_causal_conv1d(self, xbc: Sym, m: Mamba2Mixer) -> Sym:
        """``causal_conv1d_fn``'s torch fallback: ``F.conv1d(x.to(weight.dtype), weight, bias,
        padding=K − 1, groups=conv_dim)[..., :s]``, SiLU, ``.to(x.dtype)``. ``ConvolutionBackward0`` saves
        its (cast) input and weight; SiLU saves the slice, a view of the whole padded output."""
        tape, shape = self.tape, self.shape
        names = self.mamba_names
        weight = self.module_parameter(names.conv1d, "weight", m.conv_dim * m.conv_kernel)
        bias = self.module_parameter(names.conv1d, "bias", m.conv_dim) if m.conv_bias else None
        conv_in = tape.to(xbc, weight.dtype)
        x_in, w_in, b_in = conv_in, weight, bias
        if tape.autocast:  # conv1d is on autocast's lower-precision lists (CUDA and CPU)
            x_in = tape.to(conv_in, tape.autocast)
            w_in = tape.to(weight, tape.autocast, cache=weight.requires_grad)
            if bias is not None:
                b_in = tape.to(bias, tape.autocast, cache=bias.requires_grad)
        padded = tape.new(shape.batch * m.conv_dim * (shape.seq + m.conv_kernel - 1), x_in.dtype, True)
        inputs = [x_in, w_in] + ([b_in] if b_in is not None else [])
        tape.record("conv1d", [x_in, w_in], inputs, [padded])
        for cast, original in ((x_in, conv_in), (conv_in, xbc)):
            if cast is not original:
                tape.release(cast)
        if b_in is not bias and b_in is not None and not bias.requires_grad:
            tape.release(b_in)
        sliced = padded.view(shape.tokens * m.conv_dim)
        tape.record("slice", [], [padded], [sliced])
        activated = tape.unary_saving_input("silu", sliced)
        tape.release(padded)
        out = tape.to(activated, xbc.dtype)
        if out is not activated:
            tape.release(activated)
        return out

    def _einsum(self, a: Sym, b: Sym, out_numel: int, copy_a: bool, copy_b: bool) -> Sym:
        """``torch.einsum`` of two operands: each permuted into a (batch, m, k) layout, copied by the
        reshape when that layout is not a view (``copy_*``, measured per contraction), then ``bmm``, which
        saves each (copied) operand the other's gradient needs."""
        tape = self.tape
        a_in = tape.copy(a) if copy_a else a
        b_in = tape.copy(b) if copy_b else b
        out = tape.matmul(a_in, b_in, out_numel)
        if copy_a:
            tape.release(a_in)
        if copy_b:
            tape.release(b_in)
        return out

    def _segment_sum_exp(self, x: Sym, rows: int, length: int) -> Sym:
        """``exp(segment_sum(x))`` over the last dimension (``length``): x expanded to (…, l, l), masked
        with a strict lower-triangular bool mask (``masked_fill`` saves ``~mask``), cumsum, masked again
        with -inf above the diagonal; exp saves its result."""
        tape = self.tape
        pairs = rows * length * length
        expanded = tape.expand(x, pairs)
        filled = None
        source = expanded
        for _ in range(2):
            ones = tape.new(length * length, "bool", False)
            mask = tape.new(length * length, "bool", False)  # torch.tril(ones)
            tape.release(ones)
            inverted = tape.new(length * length, "bool", False)  # ~mask
            tape.release(mask)
            filled = tape.new(pairs, "fp32", source.requires_grad)
            tape.record("masked_fill", [inverted], [source], [filled])
            tape.release(inverted)
            if source is not expanded:
                tape.release(source)
            if _ == 0:
                summed = tape.copy(filled)  # torch.cumsum(dim=-2): backward needs no saved tensor
                tape.release(filled)
                source = summed
        out = tape.unary_saving_result("exp", filled)
        tape.release(filled)
        return out

    # ------------------------------------------------------------------ the SSD scan
    def _chunk_scan(self, xs: Sym, dt: Sym, a: Sym, b_in: Sym, c_in: Sym, m: Mamba2Mixer) -> Sym:
        """``mamba2_chunk_scan`` (granitemoehybrid's torch path, the chunked SSD of the Mamba-2 paper's
        listing 1) with D, dt_bias, softplus, the time-step clamp and no initial state."""
        tape, shape = self.tape, self.shape
        batch, seq = shape.batch, shape.seq
        heads, head_dim, state, groups = m.num_heads, m.head_dim, m.state_size, m.n_groups
        chunk = m.chunk_size
        pad = (chunk - seq % chunk) % chunk
        padded_seq = seq + pad
        chunks = padded_seq // chunk
        tokens = batch * seq
        # dt = clamp(softplus(dt + dt_bias.to(dt.dtype)))
        dt_bias = self.parameter(self.mamba_names.dt_bias, heads)
        dt_bias_in = tape.to(dt_bias, dt.dtype)
        shifted = tape.add(dt, dt_bias_in)
        if dt_bias_in is not dt_bias:
            tape.release(dt_bias_in)
        soft = tape.unary_saving_input("softplus", shifted)
        tape.release(shifted)
        clamped = tape.unary_saving_input("clamp", soft)
        tape.release(soft)
        xs32 = tape.to(xs, "fp32")
        b_rep = self._repeat_groups(b_in, tokens * heads * state, heads // groups)
        c_rep = self._repeat_groups(c_in, tokens * heads * state, heads // groups)
        # D_residual = D[..., None] * pad(x)
        d_param = self.parameter(self.mamba_names.d, heads)
        x_padded = tape.copy(xs32, batch * padded_seq * heads * head_dim)
        d_residual = tape.mul(d_param, x_padded)
        tape.release(x_padded)
        dt32 = tape.to(clamped, "fp32")
        x_dt = tape.mul(xs32, dt32)
        if dt32 is not clamped:
            tape.release(dt32)
        if xs32 is not xs:
            tape.release(xs32)
        dt32 = tape.to(clamped, "fp32")
        a_dt = tape.mul(a, dt32)
        if dt32 is not clamped:
            tape.release(dt32)
        tape.release(clamped)
        # reshape_into_chunks: F.pad (a copy, even of nothing), then views
        x_c = tape.copy(x_dt, batch * padded_seq * heads * head_dim)
        a_c = tape.copy(a_dt, batch * padded_seq * heads)
        b_c = tape.copy(b_rep, batch * padded_seq * heads * state)
        c_c = tape.copy(c_rep, batch * padded_seq * heads * state)
        tape.release(x_dt, a_dt)
        for t, source in ((b_rep, b_in), (c_rep, c_in)):
            if t.storage != source.storage:
                tape.release(t)
        a_cum = tape.copy(a_c)  # torch.cumsum(A, dim=-1)
        rows = batch * heads * chunks
        decay = self._segment_sum_exp(a_c, rows, chunk)  # L
        tape.release(a_c)
        pairs = rows * chunk * chunk
        # 1. the diagonal blocks
        scores = self._einsum(c_c, b_c, pairs, True, True)  # G = einsum("bclhn,bcshn->bclsh", C, B)
        masked = tape.mul(scores, decay)  # M = G * L.permute(...)
        tape.release(scores, decay)
        y_diag = self._einsum(masked, x_c, batch * padded_seq * heads * head_dim, False, True)
        tape.release(masked)
        # 2. each chunk's state
        to_end = tape.copy(a_cum)  # A_cumsum[:, :, :, -1:] - A_cumsum
        decay_states = tape.unary_saving_result("exp", to_end)
        tape.release(to_end)
        b_decay = tape.mul(b_c, decay_states)
        tape.release(decay_states)
        state_numel = batch * heads * head_dim * state
        states = self._einsum(b_decay, x_c, chunks * state_numel, True, True)
        tape.release(b_decay, x_c, b_c)
        # 3. the inter-chunk recurrence
        previous = tape.new(state_numel, "fp32", False)  # torch.zeros_like(states[:, :1])
        stacked = tape.new((chunks + 1) * state_numel, "fp32", True)
        tape.record("cat", [], [previous, states], [stacked])
        tape.release(previous, states)
        last = tape.new(batch * heads * (chunks + 1), "fp32", a_cum.requires_grad)  # F.pad(A_cumsum[..., -1], (1, 0))
        tape.record("constant_pad_nd", [], [a_cum], [last])
        decay_chunk = self._segment_sum_exp(last, batch * heads, chunks + 1)
        tape.release(last)
        new_states = self._einsum(decay_chunk, stacked, (chunks + 1) * state_numel, False, True)
        tape.release(decay_chunk, stacked)
        # 4. state -> output
        decay_out = tape.unary_saving_result("exp", a_cum)
        tape.release(a_cum)
        c_states = self._einsum(c_c, new_states.view(chunks * state_numel), batch * padded_seq * heads * head_dim, True, True)
        tape.release(c_c, new_states)
        y_off = tape.mul(c_states, decay_out)
        tape.release(c_states, decay_out)
        summed = tape.add(y_diag, y_off)
        tape.release(y_diag, y_off)
        contiguous = tape.copy(summed)  # (Y_diag + Y_off).contiguous(): the sum keeps einsum's permuted layout
        tape.release(summed)
        out = tape.add(contiguous, d_residual)
        tape.release(contiguous, d_residual)
        if pad:
            sliced = out.view(tokens * heads * head_dim)  # output[:, :seq_len]
            tape.record("slice", [], [out], [sliced])
            return sliced
        return out

    def _repeat_groups(self, x: Sym, out_numel: int, repeats: int) -> Sym:
        """``x.float().repeat_interleave(H // G, dim=2)``: an fp32 copy of a 16-bit x, then a new tensor
        unless each group has one head (a view then)."""
        tape = self.tape
        x32 = tape.to(x, "fp32")
        if repeats == 1:
            return x32
        out = tape.copy(x32, out_numel)
        if x32 is not x:
            tape.release(x32)
        return out

    def _mamba_gated_norm(self, x: Sym, gate: Sym, m: Mamba2Mixer) -> Sym:
        """The gate and the norm, in the mixer's order (``Mamba2Mixer.gated_norm``)."""
        if m.gated_norm == "gate_only":
            return self._mamba_silu_gate(x, gate, cast_gate=False)
        if m.gated_norm == "norm_then_gate":
            return self._mamba_norm_then_gate(x, gate, m)
        return self._mamba_gate_then_norm(x, gate, m)

    def _mamba_silu_gate(self, x: Sym, gate: Sym, cast_gate: bool) -> Sym:
        """``x * F.silu(gate)`` (Falcon-H1 without ``mamba_rms_norm``: ``scan_output * silu(gate)``, the gate in
        its own dtype) or ``x * F.silu(gate.to(float32))`` (``cast_gate``); silu saves its input, mul both."""
        tape = self.tape
        gate_in = tape.to(gate, "fp32") if cast_gate else gate
        activated = tape.unary_saving_input("silu", gate_in)
        if gate_in is not gate:
            tape.release(gate_in)
        gated = tape.mul(x, activated)
        tape.release(activated)
        return gated

    def _mamba_norm_then_gate(self, x: Sym, gate: Sym, m: Mamba2Mixer) -> Sym:
        """``FalconH1RMSNormGated`` with ``norm_before_gate``: the group RMSNorm of x in fp32,
        ``weight.view(G, -1) * normalized`` (the product in fp32), then ``* silu(gate.to(float32))`` and
        ``.to(input_dtype)`` (x is the scan's fp32 output: no cast)."""
        tape = self.tape
        rows = x.numel // m.inner_width * m.norm_groups
        normalized = self._normalize_in_fp32(x, rows)
        weighted = tape.mul(self.parameter(self.mamba_names.norm, m.inner_width), normalized)
        tape.release(normalized)
        gated = self._mamba_silu_gate(weighted, gate, cast_gate=True)
        tape.release(weighted)
        out = tape.to(gated, x.dtype)
        if out is not gated:
            tape.release(gated)
        return out

    def _mamba_gate_then_norm(self, x: Sym, gate: Sym, m: Mamba2Mixer) -> Sym:
        """``GraniteMoeHybridRMSNormGated(x, gate)``: ``x.float() * silu(gate.float())``, the RMSNorm of
        each group in fp32, ``weight * normalized.to(x.dtype)`` (x is the scan's fp32 output)."""
        tape = self.tape
        rows = x.numel // m.inner_width * m.norm_groups
        x32 = tape.to(x, "fp32")
        gate32 = tape.to(gate, "fp32")
        activated = tape.unary_saving_input("silu", gate32)
        if gate32 is not gate:
            tape.release(gate32)
        gated = tape.mul(x32, activated)
        tape.release(activated)
        if x32 is not x:
            tape.release(x32)
        normalized = self._normalize_in_fp32(gated, rows)
        tape.release(gated)
        cast = tape.to(normalized, x.dtype)
        if cast is not normalized:
            tape.release(normalized)
        out = tape.mul(self.parameter(self.mamba_names.norm, m.inner_width), cast)
        tape.release(cast)
        return out

    # ------------------------------------------------------------------ CUDA (assumed, not measured)
    def _fused_mamba2(self, x: Sym, projected: Sym, m: Mamba2Mixer) -> Sym:
        """mamba_ssm's ``mamba_split_conv1d_scan_combined`` with the norm and out_proj fused in
        (``MambaSplitConv1dScanCombinedFn.forward``, mamba_ssm 2.2 ops/triton/ssd_combined.py):
        ``ctx.save_for_backward(zxbcdt, conv1d_weight, conv1d_bias, out_x, A, D, dt_bias, ..., rmsnorm_weight,
        rstd, outproj_weight, outproj_bias)``: in_proj's output, the scan's output ``out_x`` (b·s·H·P in
        zxbcdt's dtype), ``A = -exp(A_log.float())`` (H, fp32, made by the module), the fp32 ``rstd`` of each
        row and norm group, and under autocast the 16-bit copy of the out_proj weight it makes
        (``outproj_weight.to(dtype)``, not autocast's cache). The conv output, the chunk states and
        out_proj's input are recomputed in backward. Assumed from the source, not measured (no GPU here)."""
        tape, shape = self.tape, self.shape
        names = self.mamba_names
        a = self._negated_exp_a_log(m.num_heads)
        out_weight = self.module_parameter(names.out_proj, "weight", m.inner_width * shape.hidden)
        saved_weight = out_weight
        if tape.autocast and out_weight.dtype != tape.autocast:
            saved_weight = tape.new(out_weight.numel, tape.autocast, out_weight.requires_grad, "weight_copy")
        weights = [
            self.module_parameter(names.conv1d, "weight", m.conv_dim * m.conv_kernel),
            self.parameter(names.dt_bias, m.num_heads),
            self.parameter(names.d, m.num_heads),
            self.parameter(names.norm, m.inner_width),
            out_weight,
        ]
        dtype = projected.dtype
        conv_out = tape.new(shape.tokens * m.conv_dim, dtype, False)  # xBC_conv, recomputed in backward
        scan_out = tape.new(shape.tokens * m.inner_width, dtype, False)  # out_x
        rstd = tape.new(shape.tokens * m.norm_groups, "fp32", False)
        normed = tape.new(shape.tokens * m.inner_width, tape.autocast or dtype, False)
        out = tape.new(shape.tokens * shape.hidden, tape.autocast or dtype, True)
        tape.record(
            "mamba_split_conv1d_scan_combined", [projected, scan_out, rstd, a, saved_weight], [projected, a, *weights], [out]
        )
        tape.release(conv_out, normed, scan_out, rstd, a, projected)
        if saved_weight is not out_weight:
            tape.release(saved_weight)
        return out

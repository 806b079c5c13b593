"""Falcon-H1 (transformers/models/falcon_h1, transformers 5.24): TII's Falcon-H1 0.5B to 34B and Falcon-H1-Tiny,
attention and a Mamba-2 mixer side by side in *every* layer, their outputs summed (Zuo et al. 2025, "Falcon-H1:
A Family of Hybrid-Head Language Models", arXiv:2507.22448).

* **A layer** (``FalconH1DecoderLayer.forward``): ``n = input_layernorm(x)``; ``m = mamba(n) · ssm_out_multiplier``;
  ``a = self_attn(n · attention_in_multiplier) · attention_out_multiplier``; ``h = x + (m + a)``; then
  ``h + feed_forward(pre_ff_layernorm(h))``. ``m`` and ``a`` are locals of the layer's forward: they stay alive
  through the MLP until the layer returns.
* **The mixer** is the shared Mamba-2 mixer of :mod:`trainmem.models.mamba2_mixer` (``mamba.*``) with Falcon-H1's
  differences (``FalconH1Mixer``): its inner width is ``mamba_d_ssm`` (else ``mamba_expand · h``); its input is
  scaled by ``ssm_in_multiplier`` and in_proj's output multiplied by the µP vector (``mup_vector``, a (1, 1, P)
  buffer in the model's dtype: under AMP it is fp32, so the bf16 product turns fp32 and the whole mixer after
  in_proj runs in fp32); ``out_proj`` has a bias with ``projectors_bias``; without ``mamba_rms_norm`` (every
  published checkpoint) there is no norm, only ``scan_output * silu(gate)``; with it ``FalconH1RMSNormGated``
  normalises before the gate (``mamba_norm_before_gate``) or after it.
* **Attention**: grouped-query attention with RoPE, ``k_proj(x) · key_multiplier`` (a new tensor before RoPE).
* **MLP** (``FalconH1MLP``): ``down_proj(up_proj(x) * act(gate_proj(x) · gate_multiplier)) · down_multiplier``.
* **Ends**: ``embed_tokens(ids) · embedding_multiplier`` and ``lm_head(h) · lm_head_multiplier`` (one more logits
  tensor), ``final_layernorm``. The multipliers' values change no byte: each product is made whatever its value.
* PEFT has no default targets for falcon_h1 and refuses LoRA on ``out_proj`` / ``conv1d`` (peft 0.21
  ``_check_lora_target_modules_mamba``: falcon_h1 is on its list), so ``all-linear`` is refused in one line. A
  4-bit load quantises the ``nn.Linear`` modules (in_proj, out_proj, q/k/v/o, the MLP); conv1d, A_log, D,
  dt_bias and the norms keep the load dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..architecture import Architecture
from ..layers import LayerProgram
from ..state_space import Mamba2Mixer
from ..tape import Sym
from . import blocks
from .blocks import ModuleNames, ParameterTensor
from .family import DecoderFamily, common_decoder_fields
from .fields import ConfigFields
from .mamba2_mixer import CUDA_KERNEL_NOTE, Mamba2Names, Mamba2Program, mamba2_tensors
from .nemotron_h import PEFT_REFUSED_MAMBA_TARGETS

FALCON_H1_DEFAULTS = dict(
    vocab_size=128000,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    max_position_embeddings=8192,
    tie_word_embeddings=False,
)
"""``FalconH1Config``'s defaults."""

MULTIPLIERS = ("attention_in_multiplier", "attention_out_multiplier", "key_multiplier", "ssm_in_multiplier",
               "ssm_out_multiplier", "embedding_multiplier")
"""The µP scalars of ``FalconH1Config`` (each a Python float multiplying a tensor: a new tensor whatever its value)."""


@dataclass(frozen=True)
class FalconH1Names(ModuleNames):
    """Falcon-H1's module paths: ``feed_forward`` after ``pre_ff_layernorm``, the mixer under ``mamba``,
    ``final_layernorm`` at the end."""

    final_norm: str = "final_layernorm"
    post_attention_norm: str = "pre_ff_layernorm"
    mlp: str = "feed_forward"

    def module_paths(self) -> tuple[str, ...]:
        return super().module_paths() + Mamba2Names("mamba").module_paths()


def _number_list(fields: ConfigFields, name: str, length: int) -> None:
    """``mlp_multipliers`` (2) / ``ssm_multipliers`` (5): null or a list of that many numbers (read for their type)."""
    value = fields.config.get(name)
    if value is None:
        return
    if (
        not isinstance(value, list)
        or len(value) != length
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        raise fields.fail(name, f"expected a list of {length} numbers or null, got {value!r}")


def falcon_h1_mixer(fields: ConfigFields, hidden_size: int) -> Mamba2Mixer:
    """``FalconH1Mixer``'s sizes: inner width ``mamba_d_ssm`` (class default 1024; ``null``: ``mamba_expand · h``),
    ``mamba_d_head`` (``"auto"``: inner / heads); ``FalconH1Config.validate_architecture`` checks that the heads
    tile the inner width."""
    heads = fields.integer("mamba_n_heads", 128)
    expand = fields.integer("mamba_expand", 2)
    inner = fields.optional_integer("mamba_d_ssm") if "mamba_d_ssm" in fields.config else 1024
    if inner is None:
        inner = expand * hidden_size
    if inner % heads:
        raise fields.fail("mamba_n_heads", f"must divide the Mamba inner width ({inner}), got {heads}")
    head_dim_value = fields.raw("mamba_d_head", "auto")
    head_dim = inner // heads if head_dim_value == "auto" else fields.integer("mamba_d_head")
    if head_dim * heads != inner:
        raise fields.fail("mamba_d_head", f"times mamba_n_heads ({heads}) must equal the Mamba inner width ({inner})")
    groups = fields.integer("mamba_n_groups", 1)
    if heads % groups:
        raise fields.fail("mamba_n_groups", f"must divide mamba_n_heads ({heads}), got {groups}")
    if fields.boolean("mamba_rms_norm", False):
        gated_norm = "norm_then_gate" if fields.boolean("mamba_norm_before_gate", True) else "gate_then_norm"
    else:
        fields.boolean("mamba_norm_before_gate", True)  # read for its type: without the norm it changes nothing
        gated_norm = "gate_only"
    return Mamba2Mixer(
        num_heads=heads,
        head_dim=head_dim,
        state_size=fields.integer("mamba_d_state", 256),
        n_groups=groups,
        conv_kernel=fields.integer("mamba_d_conv", 4),
        chunk_size=fields.integer("mamba_chunk_size", 256),
        conv_bias=fields.boolean("mamba_conv_bias", True),
        proj_bias=fields.boolean("mamba_proj_bias", False),
        out_proj_bias=fields.boolean("projectors_bias", False),
        norm_groups=groups,
        gated_norm=gated_norm,
    )


class FalconH1(DecoderFamily):
    model_type = "falcon_h1"
    names = FalconH1Names()
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, FALCON_H1_DEFAULTS)
        if common["hidden_act"] != "silu":  # the conv's activation too (FalconH1Mixer.activation)
            raise fields.fail("hidden_act", f"only silu is modelled for falcon_h1, got {common['hidden_act']!r}")
        for name in MULTIPLIERS:
            fields.number(name, 1.0)
        lm_head_multiplier = fields.number("lm_head_multiplier", 1.0, minimum=1e-30)
        _number_list(fields, "mlp_multipliers", 2)
        _number_list(fields, "ssm_multipliers", 5)
        bias = fields.boolean("attention_bias", False)
        layers = common["num_hidden_layers"]
        return Architecture(
            **common,
            attention_qkv_bias=bias,
            attention_output_bias=bias,
            mlp_bias=fields.boolean("mlp_bias", False),
            embedding_multiplier=fields.number("embedding_multiplier", 1.0),
            logits_scaling=1.0 / lm_head_multiplier,
            linear_attention_layers=tuple(range(layers)),  # every layer holds a Mamba-2 mixer (beside attention)
            mamba=falcon_h1_mixer(fields, common["hidden_size"]),
            not_counted=(CUDA_KERNEL_NOTE,),
        )

    # ------------------------------------------------------------------ inventory
    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        names = self.names
        return (
            blocks.dense_mlp(arch, names, names.mlp, arch.intermediate_size)
            + mamba2_tensors(arch, Mamba2Names("mamba"))
            + blocks.attention(arch, names)
            + blocks.layer_norms(arch, names)
        )

    def layer_buffer_numels(self, arch: Architecture) -> list[int]:
        """``FalconH1Model.__init__`` registers ``mup_vector`` (1, 1, in_proj width) on every layer's mixer
        (``register_buffer(..., persistent=False)``), cast with the model."""
        return [arch.mamba.projection_width] * arch.num_hidden_layers

    def unsupported_lora_targets(self, targets) -> Optional[str]:
        """PEFT refuses LoRA on any module named ``out_proj`` or ``conv1d`` of falcon_h1 (peft 0.21
        tuners_utils.py ``_check_lora_target_modules_mamba``), and ``all-linear`` reaches mamba.out_proj."""
        refused = sorted({m.rsplit(".", 1)[-1] for m in targets.modules} & set(PEFT_REFUSED_MAMBA_TARGETS))
        if not refused:
            return None
        return (
            f"PEFT refuses LoRA on {', '.join(refused)} of falcon_h1's Mamba-2 mixers (and so all-linear); list the "
            "modules instead, e.g. [in_proj, q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]"
        )

    def program(self) -> type[LayerProgram]:
        return FalconH1Program


class FalconH1Program(Mamba2Program, LayerProgram):
    """A Falcon-H1 layer on the tape: the Mamba-2 mixer and attention in parallel, then the MLP."""

    mamba_names = Mamba2Names("mamba")
    mamba_family = "falcon_h1"

    def layer(self, x: Sym) -> Sym:
        shape, tape, names = self.shape, self.tape, self.names
        rows, h = shape.stream_tokens, shape.hidden
        normed = self.norm(names.input_norm, x, rows, h)
        mixed = self.mamba2_mixer(normed)
        mamba_out = tape.scale(mixed)  # * ssm_out_multiplier
        tape.release(mixed)
        attention_in = tape.scale(normed)  # hidden_states * attention_in_multiplier: the argument of self_attn
        attended = self.attention(attention_in)
        tape.release(attention_in)
        attention_out = tape.scale(attended)  # * attention_out_multiplier
        tape.release(attended)
        summed = tape.add(mamba_out, attention_out)
        tape.release(normed)  # hidden_states is rebound to the sum
        hidden = tape.add(x, summed)
        tape.release(summed)
        second = self.norm(names.post_attention_norm, hidden, rows, h)
        mlp_out = self.mlp(second)
        tape.release(second)
        out = tape.add(hidden, mlp_out)
        tape.release(hidden, mlp_out, mamba_out, attention_out)  # the branch outputs are locals until the layer returns
        return out

    # ------------------------------------------------------------------ the mixer's multipliers
    def _mamba_input(self, x: Sym) -> Sym:
        return self.tape.scale(x)  # hidden_states * self.ssm_in_multiplier

    def _mamba_projected(self, projected: Sym) -> Sym:
        """``projected_states * self.mup_vector``: a (1, 1, P) buffer in the model's dtype (fp32 under AMP, so a
        16-bit in_proj output is promoted); mul saves the buffer only (it needs no grad)."""
        tape = self.tape
        mup_vector = Sym(self.arch.mamba.projection_width, self.kernels.weight_dtype, False, "external")
        scaled = tape.mul(projected, mup_vector)
        tape.release(projected)
        return scaled

    # ------------------------------------------------------------------ attention and MLP
    def _position_and_norm(self, q: Sym, k: Sym, produced: list[Sym]) -> tuple[Sym, Sym, bool]:
        """``k_proj(hidden_states)...transpose(1, 2) * self.key_multiplier``: a new key tensor before RoPE."""
        tape = self.tape
        scaled = tape.scale(k)
        tape.release(k)
        return super()._position_and_norm(q, scaled, [q, scaled])

    def _dense_mlp(self, prefix: str, x: Sym, width: int, saved_input: Optional[Sym] = None) -> Sym:
        """``FalconH1MLP.forward``: ``y = up_proj(x) * act(gate_proj(x) * gate_multiplier)``,
        ``down_proj(y) * down_multiplier``."""
        arch, tape, h, names = self.arch, self.tape, self.shape.hidden, self.names
        up = self.linear(f"{prefix}.{names.up_proj}", x, h, width, arch.mlp_bias, saved_input)
        gate = self.linear(f"{prefix}.{names.gate_proj}", x, h, width, arch.mlp_bias, saved_input)
        scaled_gate = tape.scale(gate)
        tape.release(gate)
        activated = self._activation(scaled_gate)
        tape.release(scaled_gate)
        product = tape.mul(up, activated)
        tape.release(up, activated)
        down = self.linear(f"{prefix}.{names.down_proj}", product, width, h, arch.mlp_bias)
        scaled = tape.scale(down)
        tape.release(down, product)
        return scaled

"""Nemotron-H (transformers/models/nemotron_h, transformers 5.24): NVIDIA Nemotron-H 8B/47B/56B and Nemotron
Nano 2 (9B, 12B) — blocks of one kind each, from ``hybrid_override_pattern`` (``M`` Mamba-2, ``*`` attention,
``-`` MLP, ``E`` MoE) or ``layers_block_type``.

* **A block** (``NemotronHBlock.forward``) is ``x + mixer(norm(x))``: one ``NemotronHRMSNorm``
  (``(weight.to(float32) * normalized).to(input_dtype)``, the product in fp32), then the block's mixer:
  the shared Mamba-2 mixer of :mod:`trainmem.models.mamba2_mixer` (under ``mixer``, its gated norm over
  ``n_groups`` groups), grouped-query attention without any position embedding (``NemotronHAttention``
  applies no RoPE), or a plain MLP ``down_proj(relu2(up_proj(x)))`` (``ReLUSquaredActivation``:
  ``square(relu(x))``). The model's embedding is ``embeddings``, its final norm ``norm_f``.
* **MoE blocks** (``E``: Nemotron 3's ``NemotronHMoE``, sigmoid router with a correction bias,
  un-gated experts, a shared expert, an optional latent projection) are not modelled yet: a config with
  one is refused naming ``layer_types``.
* PEFT's default targets for nemotron_h are q/k/v/o_proj (peft/utils/constants.py); ``all-linear``
  adds in_proj, out_proj, up_proj and down_proj. A 4-bit load quantises those ``nn.Linear`` modules;
  conv1d, A_log, D, dt_bias and the norms keep the load dtype.
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
from .family import DecoderFamily
from .fields import ConfigFields
from .mamba2_mixer import CUDA_KERNEL_NOTE, Mamba2Names, Mamba2Program, mamba2_tensors

NEMOTRON_H_DEFAULTS = dict(
    vocab_size=131072,
    hidden_size=4096,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=21504,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
    layer_types=("linear_attention", "moe", "full_attention", "mlp"),
)
"""``NemotronHConfig``'s defaults (its default ``layers_block_type`` is M, E, *, -)."""

PATTERN_LETTERS = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}
"""``NemotronHConfig._pattern_to_list``."""

PEFT_REFUSED_MAMBA_TARGETS = ("out_proj", "conv1d")
"""peft 0.21 ``_check_lora_target_modules_mamba``: ``incompatible_modules``."""

BLOCK_TYPES = {"linear_attention", "full_attention", "mlp", "moe", "mamba", "attention"}
LEGACY_BLOCK_TYPES = {"mamba": "linear_attention", "attention": "full_attention"}


@dataclass(frozen=True)
class NemotronHNames(ModuleNames):
    """Every block's mixer is ``mixer``; its norm is ``norm``; the model's ends are ``embeddings`` / ``norm_f``."""

    embed_tokens: str = "embeddings"
    final_norm: str = "norm_f"
    input_norm: str = "norm"
    q_proj: str = "mixer.q_proj"
    k_proj: str = "mixer.k_proj"
    v_proj: str = "mixer.v_proj"
    o_proj: str = "mixer.o_proj"
    mlp: str = "mixer"
    fc1: str = "up_proj"
    fc2: str = "down_proj"

    def module_paths(self) -> tuple[str, ...]:
        return super().module_paths() + Mamba2Names("mixer").module_paths()


def read_block_types(fields: ConfigFields) -> list[str]:
    """``layers_block_type`` (or ``layer_types``), else ``hybrid_override_pattern``, else the class default."""
    listed = fields.string_list("layers_block_type") or fields.string_list("layer_types")
    if listed:
        unknown = sorted(set(listed) - BLOCK_TYPES)
        if unknown:
            raise fields.fail(
                "layers_block_type", f"unknown block type {unknown[0]!r}; allowed: linear_attention, full_attention, mlp, moe"
            )
        return [LEGACY_BLOCK_TYPES.get(kind, kind) for kind in listed]
    pattern = fields.config.get("hybrid_override_pattern")
    if pattern is None:
        return list(NEMOTRON_H_DEFAULTS["layer_types"])
    if not isinstance(pattern, str) or not pattern:
        raise fields.fail("hybrid_override_pattern", f"expected a string of M, *, - and E, got {pattern!r}")
    unknown = sorted(set(pattern) - set(PATTERN_LETTERS))
    if unknown:
        raise fields.fail("hybrid_override_pattern", f"unknown block letter {unknown[0]!r}; allowed: M, *, -, E")
    return [PATTERN_LETTERS[letter] for letter in pattern]


def _alias_integer(fields: ConfigFields, name: str, legacy: str, default: int) -> int:
    """``NemotronHConfig.__post_init__`` lets the ``mamba_*`` spelling override the field."""
    return fields.integer(legacy) if fields.has(legacy) else fields.integer(name, default)


class NemotronH(DecoderFamily):
    model_type = "nemotron_h"
    names = NemotronHNames()
    lora_default_targets = ("q_proj", "k_proj", "v_proj", "o_proj")

    def read_config(self, fields: ConfigFields) -> Architecture:
        d = NEMOTRON_H_DEFAULTS
        block_types = read_block_types(fields)
        if "moe" in block_types:
            raise fields.fail("hybrid_override_pattern", "Nemotron-H MoE blocks ('E', moe) are not modelled yet")
        if len(block_types) > 1024:
            raise fields.fail("hybrid_override_pattern", f"has {len(block_types)} blocks; at most 1024")
        mamba_act = fields.string("mamba_hidden_act", "silu")
        if mamba_act != "silu":
            raise fields.fail("mamba_hidden_act", f"only silu is modelled, got {mamba_act!r}")
        heads = fields.integer("num_attention_heads", d["num_attention_heads"])
        groups = _alias_integer(fields, "n_groups", "mamba_n_groups", 8)
        mamba_heads = fields.integer("mamba_num_heads", 128)
        if mamba_heads % groups:
            raise fields.fail("n_groups", f"must divide mamba_num_heads ({mamba_heads}), got {groups}")
        use_conv_bias = fields.boolean("mamba_conv_bias") if fields.has("mamba_conv_bias") else fields.boolean("use_conv_bias", True)
        mixer = Mamba2Mixer(
            num_heads=mamba_heads,
            head_dim=fields.integer("mamba_head_dim", 64),
            state_size=fields.integer("ssm_state_size", 128),
            n_groups=groups,
            conv_kernel=_alias_integer(fields, "conv_kernel", "mamba_d_conv", 4),
            chunk_size=_alias_integer(fields, "chunk_size", "mamba_chunk_size", 128),
            conv_bias=use_conv_bias,
            proj_bias=fields.boolean("use_bias", False),
            norm_groups=groups,
        )
        layers = len(block_types)
        # NemotronHForCausalLM._tied_weights_keys is {}: lm_head is never tied, whatever the file says (read for its type)
        fields.boolean("tie_word_embeddings", False)
        mamba_layers = tuple(i for i, kind in enumerate(block_types) if kind == "linear_attention")
        return Architecture(
            model_type=fields.string("model_type"),
            vocab_size=fields.integer("vocab_size", d["vocab_size"]),
            hidden_size=fields.integer("hidden_size", d["hidden_size"]),
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=fields.integer("num_key_value_heads", d["num_key_value_heads"]),
            head_dim=fields.integer("head_dim", d["head_dim"]),
            intermediate_size=fields.integer("intermediate_size", d["intermediate_size"]),
            mlp="plain",
            hidden_act=fields.activation("mlp_hidden_act", "relu2"),
            mlp_bias=fields.boolean("mlp_bias", False),
            max_position_embeddings=fields.integer("max_position_embeddings", d["max_position_embeddings"]),
            tie_word_embeddings=False,
            attention_dropout=fields.probability("attention_dropout"),
            nope_layers=tuple(range(layers)),
            linear_attention_layers=mamba_layers,
            mlp_only_layers=tuple(i for i, kind in enumerate(block_types) if kind == "mlp"),
            mamba=mixer,
            not_counted=(CUDA_KERNEL_NOTE,) if mamba_layers else (),
        )

    # ------------------------------------------------------------------ inventory
    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        names = self.names
        norm = blocks.norm(names.input_norm, arch, arch.hidden_size)
        if arch.layer_linear_attention:
            return norm + mamba2_tensors(arch, Mamba2Names("mixer"))
        if arch.layer_mlp_only:
            return norm + blocks.dense_mlp(arch, names, names.mlp, arch.intermediate_size)
        return norm + blocks.attention(arch, names)

    def unsupported_lora_targets(self, targets) -> Optional[str]:
        """PEFT refuses LoRA on any module named ``out_proj`` or ``conv1d`` of a Mamba-based model
        (peft 0.21 tuners_utils.py ``_check_lora_target_modules_mamba``; nemotron_h is on its list), and
        ``all-linear`` reaches out_proj."""
        refused = sorted({m.rsplit(".", 1)[-1] for m in targets.modules} & set(PEFT_REFUSED_MAMBA_TARGETS))
        if not refused:
            return None
        return (
            f"PEFT refuses LoRA on {', '.join(refused)} of nemotron_h's Mamba-2 layers (and so all-linear); list the "
            "modules instead, e.g. [in_proj, q_proj, k_proj, v_proj, o_proj, up_proj, down_proj]"
        )

    def has_rotary_embedding(self, arch: Architecture) -> bool:
        """``NemotronHModel`` has no rotary embedding (no inv_freq buffers)."""
        return False

    def rotary_tables_bytes(self, arch: Architecture, seq: int, stream_bytes: int) -> list[int]:
        """``NemotronHModel`` has no rotary embedding."""
        return []

    def program(self) -> type[LayerProgram]:
        return NemotronHProgram


class NemotronHProgram(Mamba2Program, LayerProgram):
    """A Nemotron-H block on the tape: one norm, one mixer, one residual add."""

    mamba_names = Mamba2Names("mixer")
    mamba_family = "nemotron_h"

    def layer(self, x: Sym) -> Sym:
        """``NemotronHBlock.forward``: ``residual + mixer(norm(x.to(norm.weight.dtype)))`` (the cast is a
        no-op in every recipe trainmem models: the stream has the norm weight's dtype)."""
        arch, shape, tape = self.arch, self.shape, self.tape
        normed = self.norm(self.names.input_norm, x, shape.stream_tokens, shape.hidden)
        if arch.layer_linear_attention:
            mixed = self.mamba2_mixer(normed)
        elif arch.layer_mlp_only:
            mixed = self.mlp(normed)
        else:
            mixed = self.attention(normed)
        tape.release(normed)
        out = tape.add(x, mixed)
        tape.release(mixed)
        return out

    def _position_and_norm(self, q: Sym, k: Sym, produced: list[Sym]) -> tuple[Sym, Sym, bool]:
        return q, k, False  # NemotronHAttention applies no position embedding

    def rms_norm(self, module: str, x: Sym, rows: int, width: int) -> Sym:
        """``NemotronHRMSNorm``: ``(self.weight.to(float32) * normalized).to(input_dtype)``."""
        tape = self.tape
        normalized = self._normalize_in_fp32(x, rows)
        weight = self.parameter(module, width)
        weight32 = tape.to(weight, "fp32")
        product = tape.mul(weight32, normalized)
        tape.release(normalized)
        if weight32 is not weight:
            tape.release(weight32)
        out = tape.to(product, x.dtype)
        if out is not product:
            tape.release(product)
        return out

    def _activation(self, x: Sym) -> Sym:
        """``relu2``: ``torch.square(F.relu(x))``; relu saves its result, square (``pow``) its input: the same tensor."""
        if self.arch.hidden_act != "relu2":
            return super()._activation(x)
        tape = self.tape
        relu = tape.unary_saving_result("relu", x)
        squared = tape.unary_saving_input("pow", relu)
        tape.release(relu)
        return squared

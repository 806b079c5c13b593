"""Mamba-2 (transformers/models/mamba2, transformers 5.24): a stack of Mamba-2 blocks, no attention, no MLP
(state-spaces/mamba2-130m … 2.7b, Mamba-Codestral-7B).

* **A block** (``Mamba2Block.forward``) is ``x + mixer(norm(x.to(norm.weight.dtype)))`` with Llama's RMSNorm
  (``Mamba2RMSNorm``: ``weight * normalized.to(input_dtype)``) and the shared Mamba-2 mixer of
  :mod:`trainmem.models.mamba2_mixer` under ``mixer`` (its inner width is ``expand · hidden_size``, which the
  configuration class requires to equal ``num_heads · head_dim``). The model's embedding is ``embeddings``,
  its final norm ``norm_f``; ``lm_head`` is tied to the embedding when ``tie_word_embeddings`` is set.
* ``residual_in_fp32`` (the class default: true) casts each block's residual to fp32 before the add, so in a
  16-bit run the residual stream is fp32 from the first block on: that changes the dtype of every layer's
  input and is not modelled (a pure bf16/fp16 run with it is refused in one line; fp32 and AMP runs keep an
  fp32 stream, where the cast is a no-op).
* PEFT has no default LoRA targets for mamba2 and refuses ``out_proj`` and ``conv1d``
  (``_check_lora_target_modules_mamba``): ``all-linear`` is refused in one line; list ``in_proj``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..architecture import Architecture
from ..errors import FieldError
from ..layers import LayerProgram
from ..state_space import Mamba2Mixer
from ..tape import Sym
from . import blocks
from .blocks import ModuleNames, ParameterTensor
from .family import DecoderFamily
from .fields import ConfigFields
from .mamba2_mixer import CUDA_KERNEL_NOTE, Mamba2Names, Mamba2Program, mamba2_tensors
from .nemotron_h import PEFT_REFUSED_MAMBA_TARGETS

MAMBA2_DEFAULTS = dict(vocab_size=32768, hidden_size=4096, num_hidden_layers=64, num_heads=128, head_dim=64, state_size=128,
                       expand=2, conv_kernel=4, n_groups=8, chunk_size=256, tie_word_embeddings=False)
"""``Mamba2Config``'s defaults."""

@dataclass(frozen=True)
class Mamba2LMNames(ModuleNames):
    """``backbone.embeddings``, ``backbone.layers.*.norm`` / ``.mixer``, ``backbone.norm_f``."""

    embed_tokens: str = "embeddings"
    final_norm: str = "norm_f"
    input_norm: str = "norm"

    def module_paths(self) -> tuple[str, ...]:
        return super().module_paths() + Mamba2Names("mixer").module_paths()


class Mamba2(DecoderFamily):
    model_type = "mamba2"
    names = Mamba2LMNames()
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        d = MAMBA2_DEFAULTS
        hidden = fields.integer("hidden_size", d["hidden_size"])
        heads = fields.integer("num_heads", d["num_heads"])
        head_dim = fields.integer("head_dim", d["head_dim"])
        expand = fields.integer("expand", d["expand"])
        if heads * head_dim != expand * hidden:
            raise fields.fail(
                "num_heads", f"num_heads * head_dim ({heads * head_dim}) must equal expand * hidden_size ({expand * hidden})"
            )
        groups = fields.integer("n_groups", d["n_groups"])
        if heads % groups:
            raise fields.fail("n_groups", f"must divide num_heads ({heads}), got {groups}")
        act = fields.string("hidden_act", "silu")
        if act != "silu":
            raise fields.fail("hidden_act", f"only silu is modelled, got {act!r}")
        layers = fields.layers(d["num_hidden_layers"])
        mixer = Mamba2Mixer(
            num_heads=heads, head_dim=head_dim, state_size=fields.integer("state_size", d["state_size"]), n_groups=groups,
            conv_kernel=fields.integer("conv_kernel", d["conv_kernel"]), chunk_size=fields.integer("chunk_size", d["chunk_size"]),
            conv_bias=fields.boolean("use_conv_bias", True), proj_bias=fields.boolean("use_bias", False), norm_groups=groups,
        )
        residual_in_fp32 = fields.boolean("residual_in_fp32", True)
        return Architecture(
            model_type=fields.string("model_type"),
            vocab_size=fields.integer("vocab_size", d["vocab_size"]),
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,  # the mixer's heads: what tensor parallelism would split
            head_dim=head_dim,
            intermediate_size=heads * head_dim,
            max_position_embeddings=2**20,  # no position limit: a state-space model has no position embedding
            tie_word_embeddings=fields.boolean("tie_word_embeddings", d["tie_word_embeddings"]),
            nope_layers=tuple(range(layers)),
            linear_attention_layers=tuple(range(layers)),
            mamba=mixer,
            residual_in_fp32=residual_in_fp32,
            not_counted=(CUDA_KERNEL_NOTE,),
        )

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        return blocks.norm(self.names.input_norm, arch, arch.hidden_size) + mamba2_tensors(arch, Mamba2Names("mixer"))

    def has_rotary_embedding(self, arch: Architecture) -> bool:
        """``Mamba2Model`` has no rotary embedding (no inv_freq buffers)."""
        return False

    def rotary_tables_bytes(self, arch: Architecture, seq: int, stream_bytes: int) -> list[int]:
        return []

    def unsupported_lora_targets(self, targets) -> Optional[str]:
        refused = sorted({m.rsplit(".", 1)[-1] for m in targets.modules} & set(PEFT_REFUSED_MAMBA_TARGETS))
        if not refused:
            return None
        return f"PEFT refuses LoRA on {', '.join(refused)} of mamba2 (and so all-linear); list in_proj instead"

    def program(self) -> type[LayerProgram]:
        return Mamba2BlockProgram


class Mamba2BlockProgram(Mamba2Program, LayerProgram):
    """``Mamba2Block``: one RMSNorm, the mixer, the residual add."""

    mamba_names = Mamba2Names("mixer")
    mamba_family = "mamba2"

    def layer(self, x: Sym) -> Sym:
        if x.dtype != "fp32" and self.arch.residual_in_fp32:
            raise FieldError(
                "precision",
                "mamba2 with residual_in_fp32 (the default) keeps an fp32 residual stream in a 16-bit run, which is "
                "not modelled yet; use amp-bf16 or fp32, or a config with residual_in_fp32 false",
            )
        shape, tape = self.shape, self.tape
        normed = self.norm(self.names.input_norm, x, shape.stream_tokens, shape.hidden)
        mixed = self.mamba2_mixer(normed)
        tape.release(normed)
        out = tape.add(x, mixed)
        tape.release(mixed)
        return out

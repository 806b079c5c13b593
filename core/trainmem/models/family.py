"""What a model family is to trainmem: one class per transformers ``models/<family>/`` module.

A :class:`DecoderFamily` keeps together everything trainmem knows about one family, as the
transformers code for it does (transformers 5.24):

* ``read_config``: the fields of its ``config.json`` with the defaults of its configuration class
  (through :class:`~trainmem.models.fields.ConfigFields`, so wrong types are named, never coerced);
* ``embedding`` / ``layer`` / ``head``: its parameter tensors, composed from the shared blocks in
  ``models/blocks.py`` with its module names (:class:`~trainmem.models.blocks.ModuleNames`);
* ``program``: the class that replays its decoder layer on the tape (``layers.LayerProgram`` or a
  subclass in the family's module for ops of its own);
* ``lora_default_targets``: PEFT's default ``target_modules`` for its ``model_type``
  (peft/utils/constants.py ``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``; ``None`` where
  PEFT has none and asks the user for them);
* ``moe_lora_conversion``: for MoE families, PEFT's v4→v5 target conversion
  (peft/utils/transformers_weight_conversion.py ``_MOE_TARGET_MODULE_MAPPING``): the v4 module
  names that now mean the router and the fused expert parameters;
* ``quantized_by_bitsandbytes``: which of its tensors a 4-/8-bit load quantises (``nn.Linear``
  weights only: ``replace_with_bnb_linear`` in transformers/integrations/bitsandbytes.py swaps
  ``nn.Linear`` modules; fused 3-D experts and custom router modules keep the load dtype, and
  the output embedding is skipped by ``get_keys_to_not_convert``).

Adding a family means adding one module to ``trainmem/models/`` that defines a subclass and
registers it in ``trainmem/models/__init__.py`` (see the README's contributing section).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Optional

from ..architecture import Architecture
from . import blocks
from .blocks import ModuleNames, ParameterTensor
from .fields import ConfigFields

if TYPE_CHECKING:  # layers imports nothing from models; the import is deferred to avoid a cycle
    from ..layers import LayerProgram

#: PEFT's conversion of v4 MoE target names (peft 0.21, transformers 5.24), by conversion pattern.
MIXTRAL_STYLE_MOE_TARGETS = {"gate": "router", "w1": "gate_up_proj", "w3": "gate_up_proj", "w2": "down_proj"}
QWEN2_MOE_STYLE_TARGETS = {"gate": "router", "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj", "down_proj": "down_proj"}


class DecoderFamily:
    """A decoder-only transformer family (the Llama layout unless a subclass says otherwise)."""

    model_type: str = ""
    """config.json's ``model_type`` this family reads."""
    names: ModuleNames = ModuleNames()
    lora_default_targets: Optional[tuple[str, ...]] = ("q_proj", "v_proj")
    moe_lora_conversion: Mapping[str, str] = {}
    """v4 module name -> ``router`` / ``gate_up_proj`` / ``down_proj`` (empty: no conversion)."""
    eager_softmax_in_fp32: bool = True
    """transformers' shared ``eager_attention_forward`` asks for an fp32 softmax (GPT-2's own does not)."""
    rope_concatenates: bool = False
    """RoPE ends with ``torch.cat([rotated, passed_through], dim=-1)`` (Phi-3's partial rotary)."""
    rotary_tables_per_sample: bool = False
    """The rotary tables have one row per sample, (b, s, d), not (1, s, d) (Qwen3.5's multimodal RoPE expands
    the position ids over the batch): ``rotary_tables_bytes`` is then multiplied by the micro-batch rows."""
    layers_save_rotary_tables: bool = True
    """Some layer saves the model's cos/sin tables themselves, so they live until the backward. False when
    each layer saves only its own copies (GLM-4 and ERNIE 4.5 repeat_interleave them inside
    ``apply_rotary_pos_emb``): the model's tables die when its forward returns (measured: one pair less)."""
    not_counted: tuple[str, ...] = ()
    """Parts of the checkpoint the inventory leaves out (stated in the report)."""

    # ------------------------------------------------------------------ config
    def read_config(self, fields: ConfigFields) -> Architecture:
        raise NotImplementedError

    # ------------------------------------------------------------------ inventory
    def embedding(self, arch: Architecture) -> list[ParameterTensor]:
        h = arch.hidden_size
        tensors = [ParameterTensor(f"{self.names.embed_tokens}.weight", "embeddings", (arch.vocab_size, h))]
        if arch.position_embedding == "learned":
            tensors.append(
                ParameterTensor(f"{self.names.embed_positions}.weight", "embeddings", (arch.max_position_embeddings, h))
            )
        return tensors

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        """The tensors of one decoder layer of a homogeneous kind (see ``Architecture.layer_kinds``)."""
        names = self.names
        mlp = blocks.moe_mlp(arch, names) if arch.is_moe else blocks.dense_mlp(arch, names, names.mlp, arch.intermediate_size)
        return blocks.attention(arch, names) + mlp + blocks.layer_norms(arch, names)

    def head(self, arch: Architecture) -> list[ParameterTensor]:
        tensors = blocks.norm(self.names.final_norm, arch, arch.hidden_size)
        if not arch.tie_word_embeddings:
            tensors.append(
                ParameterTensor(
                    f"{self.names.lm_head}.weight", "lm_head", (arch.vocab_size, arch.hidden_size), (arch.hidden_size, arch.vocab_size)
                )
            )
        return tensors

    def rotary_tables_bytes(self, arch: Architecture, seq: int, stream_bytes: int) -> list[int]:
        """The tensors one forward's rotary embedding returns per rope set: cos and sin, (1, s, d) each
        in the residual stream's dtype (``LlamaRotaryEmbedding.forward``), before the allocator's rounding."""
        return [seq * arch.rotary_dim * stream_bytes] * 2

    def forward_locals_bytes(self, arch: Architecture, rows: int, seq: int, attention: str) -> list[tuple[str, int, str]]:
        """Tensors the base model's forward makes once for all layers and keeps until it returns, besides the
        rotary tables: (part name, bytes before the allocator's rounding, detail). ``attention`` is the kernel
        that runs (``simulate.attention_kernel``). None by default."""
        return []

    def residual_streams(self, arch: Architecture) -> int:
        """Copies of the hidden state the residual stream between layers holds side by side (Qwen4-Exp's
        hyper-connections: ``hc_count``); the layers' input and output are (tokens, streams · hidden). 1 by default."""
        return 1

    def layer_buffer_numels(self, arch: Architecture) -> list[int]:
        """Elements of the non-persistent floating-point buffers the decoder registers besides the rotary
        embedding's, one entry per buffer (cast with the model's dtype). None by default; Falcon-H1 keeps one
        µP vector per layer."""
        return []

    def quantized_by_bitsandbytes(self, tensor: ParameterTensor) -> bool:
        """A 4-/8-bit load replaces ``nn.Linear`` modules of the decoder layers (not the output head)."""
        return tensor.linear_features is not None and tensor.group != "lm_head"

    def unsupported_attention(self, attention: str, device: str, compute_dtype: str = "bf16") -> Optional[str]:
        """Why transformers cannot train this family with ``attention`` on ``device`` when the attention
        computes in ``compute_dtype`` (None: it can). A hook for ``Setup`` validation, so that the refusal is
        one line naming ``attention``."""
        return None

    def unsupported_lora_targets(self, targets) -> Optional[str]:
        """Why a training step with PEFT adapters on ``targets`` (a ``lora_targets.LoraTargets``) fails
        for this family (None: it runs). A hook for ``Setup`` validation, reported naming
        ``finetuning.lora.target_modules``."""
        return None

    # ------------------------------------------------------------------ the tape
    def program(self) -> type[LayerProgram]:
        from ..layers import LayerProgram

        return LayerProgram


def common_decoder_fields(fields: ConfigFields, defaults: Mapping[str, object]) -> dict[str, object]:
    """The fields every Llama-style config has, with the family's class defaults."""
    heads = fields.integer("num_attention_heads", defaults["num_attention_heads"])
    return {
        "model_type": fields.string("model_type"),
        "vocab_size": fields.integer("vocab_size", defaults["vocab_size"]),
        "hidden_size": fields.integer("hidden_size", defaults["hidden_size"]),
        "num_hidden_layers": fields.layers(defaults["num_hidden_layers"]),
        "num_attention_heads": heads,
        "num_key_value_heads": _key_value_heads(fields, defaults, heads),
        "head_dim": _head_dim(fields, defaults),
        "intermediate_size": fields.integer("intermediate_size", defaults["intermediate_size"]),
        "hidden_act": fields.activation("hidden_act", defaults.get("hidden_act", "silu"), aliases=("hidden_activation",)),
        "max_position_embeddings": fields.integer("max_position_embeddings", defaults["max_position_embeddings"]),
        "tie_word_embeddings": fields.boolean("tie_word_embeddings", defaults["tie_word_embeddings"]),
        "attention_dropout": fields.probability("attention_dropout"),
    }


def _set_to_null(fields: ConfigFields, name: str) -> bool:
    """The file names ``name`` with ``null``: transformers then gets None, which is not the class default."""
    return name in fields.config and fields.config[name] is None


def _key_value_heads(fields: ConfigFields, defaults: Mapping[str, object], heads: int) -> int:
    """``num_key_value_heads``: the class default when the file leaves it out; ``null`` means one K/V head per
    query head (``if num_key_value_heads is None: num_key_value_heads = num_attention_heads`` in the Llama-style
    ``__post_init__`` of Qwen2Config, Qwen3Config, SeedOssConfig, Ernie4_5Config)."""
    if _set_to_null(fields, "num_key_value_heads"):
        return heads
    return fields.integer("num_key_value_heads", defaults.get("num_key_value_heads") or heads)


def _head_dim(fields: ConfigFields, defaults: Mapping[str, object]) -> Optional[int]:
    """``head_dim``: the class default when the file leaves it out; ``null`` means ``hidden_size //
    num_attention_heads`` (the attention modules' ``getattr(config, "head_dim", None) or hidden_size //
    num_attention_heads``; SeedOssConfig takes None)."""
    if _set_to_null(fields, "head_dim"):
        return None
    return fields.optional_integer("head_dim") or defaults.get("head_dim")  # type: ignore[return-value]


ATTENTION_LAYER_TYPES = ("sliding_attention", "full_attention")


def checked_layer_types(fields: ConfigFields, layers: int, allowed: tuple[str, ...] = ATTENTION_LAYER_TYPES) -> list[str]:
    """The file's ``layer_types`` ([] when it has none), one entry per layer, each one of ``allowed``: else one
    FieldError naming ``layer_types`` (transformers' ``layer_type_validation``, configuration_utils.py)."""
    layer_types = fields.string_list("layer_types")
    if not fields.has("layer_types"):  # null or left out; [] has 0 entries (layer_type_validation refuses it)
        return []
    if len(layer_types) != layers:
        raise fields.fail("layer_types", f"has {len(layer_types)} entries for {layers} layers")
    unknown = sorted(set(layer_types) - set(allowed))
    if unknown:
        raise fields.fail("layer_types", f"unknown layer type {unknown[0]!r}; allowed: {', '.join(allowed)}")
    return layer_types


def sliding_window_fields(
    fields: ConfigFields,
    layers: int,
    default_window: Optional[int],
    default_layers: Optional[tuple[int, ...]] = None,
    types: tuple[str, ...] = ("sliding_attention",),
) -> dict[str, object]:
    """``sliding_window`` and the layers that use it, for the Architecture.

    The window is the file's ``sliding_window`` (``null`` turns it off), else the class default. The
    layers are those ``layer_types`` marks as ``types`` (``sliding_attention``; Llama 4's
    ``chunked_attention``), else ``default_layers`` (the class's pattern), else every layer (Mistral,
    Phi-3, StarCoder2 apply the window everywhere: ``create_sliding_window_causal_mask``).
    """
    window = fields.optional_integer("sliding_window") if "sliding_window" in fields.config else default_window
    if window is None:
        return {}
    layer_types = fields.string_list("layer_types")
    if layer_types:
        if len(layer_types) != layers:
            raise fields.fail("layer_types", f"has {len(layer_types)} entries for {layers} layers")
        return {"sliding_window": window, "sliding_layers": tuple(i for i, kind in enumerate(layer_types) if kind in types)}
    return {"sliding_window": window, "sliding_layers": default_layers}

"""Gemma 4's per-layer variations of the decoder (transformers 5.24 ``models/gemma4/modeling_gemma4.py``).

Gemma 4's layers are not all alike, and transformers builds each from the config's ``per_layer_config``
(``Gemma4TextConfig.__post_init__``) and ``kv_sharing_modes``:

* global (``full_attention``) layers have their own head width ``global_head_dim`` and, when
  ``attention_k_eq_v``, their own key/value heads ``num_global_key_value_heads`` and no ``v_proj``: the
  values are the keys' projection (``value_states = key_states`` before ``k_norm``/``v_norm``);
* the last ``num_kv_shared_layers`` layers have no ``k_proj``/``v_proj``/``k_norm``: they attend over the
  keys and values of the last earlier layer of their type (``shared_kv_states``), and with
  ``use_double_wide_mlp`` their MLP is twice ``intermediate_size`` (``Gemma4TextMLP``);
* with ``hidden_size_per_layer_input`` (PLE, the E2B/E4B models) every layer adds a gated projection of
  its slice of the per-layer inputs (``per_layer_input_gate``, ``per_layer_projection``,
  ``post_per_layer_input_norm``), computed once per forward from ``embed_tokens_per_layer`` and
  ``per_layer_model_projection``;
* with ``enable_moe_block`` (26B-A4B) every layer runs a routed MoE beside its dense MLP (router over the
  residual, experts over ``pre_feedforward_layernorm_2`` of it, the two outputs normed and summed).

:class:`Gemma4Layout` holds these; ``Architecture.layer_kinds`` splits the layers by them
(:meth:`Gemma4Layout.kind_update`).
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field, NonNegativeInt, PositiveInt

from ._base import FrozenModel


class Gemma4Layout(FrozenModel):
    """What Gemma 4 varies from layer to layer, and its per-layer inputs."""

    global_head_dim: PositiveInt = Field(description="head_dim of the full_attention layers (global_head_dim).")
    global_key_value_heads: Optional[PositiveInt] = Field(
        default=None,
        description="Key/value heads of the full_attention layers (num_global_key_value_heads, applied only with "
        "attention_k_eq_v); None: num_key_value_heads.",
    )
    attention_k_eq_v: bool = Field(default=False, description="full_attention layers take the values from k_proj.")
    kv_shared_layers: tuple[NonNegativeInt, ...] = Field(
        default=(), description="Layers reusing an earlier layer's keys and values (the last num_kv_shared_layers)."
    )
    double_wide_mlp: bool = Field(default=False, description="KV-shared layers' MLP is 2 x intermediate_size.")
    per_layer_input_size: NonNegativeInt = Field(
        default=0, description="hidden_size_per_layer_input (PLE); 0 for none."
    )
    per_layer_vocab_size: NonNegativeInt = Field(default=0, description="vocab_size_per_layer_input (PLE rows).")
    moe_intermediate_size: NonNegativeInt = Field(
        default=0, description="Width of each routed expert (enable_moe_block); 0 for no MoE block."
    )
    layer_types: tuple[str, ...] = Field(default=(), description="config.json's layer_types, one per layer.")
    layer_global: bool = Field(default=False, description="Set on a full_attention layer kind.")
    layer_kv_shared: bool = Field(default=False, description="Set on a KV-shared layer kind.")

    @property
    def has_per_layer_inputs(self) -> bool:
        return self.per_layer_input_size > 0

    def kind_update(self, arch, sliding: bool, shared: bool) -> dict:
        """The Architecture fields of one layer kind (``per_layer_config``, ``kv_sharing_modes``)."""
        update: dict = {"gemma4": self.model_copy(update={"layer_global": not sliding, "layer_kv_shared": shared})}
        if not sliding:
            update["head_dim"] = self.global_head_dim
            if self.attention_k_eq_v and self.global_key_value_heads is not None:
                update["num_key_value_heads"] = self.global_key_value_heads
        if shared and self.double_wide_mlp:
            update["intermediate_size"] = 2 * arch.intermediate_size
        return update

    def kv_source_layer(self, index: int) -> Optional[int]:
        """The layer whose keys and values a KV-shared layer reads (the last non-shared layer of its type)."""
        if index not in self.kv_shared_layers or not self.layer_types:
            return None
        first_shared = min(self.kv_shared_layers)
        kind = self.layer_types[index]
        earlier = [i for i in range(first_shared) if self.layer_types[i] == kind]
        return earlier[-1] if earlier else None

"""Ministral 3 (``ministral3``: mistralai/Ministral-3-3B/8B/14B-*-2512; transformers/models/ministral3, 5.24).

The text model of the Ministral 3 checkpoints, which are ``mistral3`` multimodal wrappers whose ``text_config``
names ``ministral3`` (read through it: the Pixtral tower and projector are stated as not counted, or read by
``trainmem.vision`` where it reads them). ``Ministral3ForCausalLM`` is ``MistralForCausalLM`` (the same modules and
parameters: GQA with an explicit ``head_dim``, SwiGLU, RMSNorm, no biases) with one op more in
``Ministral3Attention.forward``: after RoPE the query is multiplied by Llama 4's position-dependent temperature,
``query_states * get_llama_4_attn_scale(position_ids, beta, original_max_position_embeddings).to(query_states.dtype)``
(``1 + beta * log(1 + floor(pos / original_max))``, a ``(1, 1, s, 1)`` fp32 tensor made from the int64 position
ids, cast to the query's dtype). That product is a new query-sized tensor, and autograd saves the small scale
tensor for the query's gradient (the scale needs no gradient, so the query itself is not saved by the product).

The class's defaults are those of Ministral-3-8B-Base-2512 (``Ministral3Config``: 34 layers, hidden 4096,
vocabulary 131072, YaRN ``rope_parameters`` with ``llama_4_scaling_beta`` 0.1). PEFT 0.21 has no default LoRA
targets for ``ministral3`` (peft/utils/constants.py), so ``get_peft_model`` asks for ``target_modules``, and so
does trainmem.
"""

from __future__ import annotations

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from .family import DecoderFamily, common_decoder_fields, sliding_window_fields
from .fields import ConfigFields

MINISTRAL3_DEFAULTS = dict(
    vocab_size=131072,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=34,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=262144,
    tie_word_embeddings=False,
)
"""``Ministral3Config``'s defaults (configuration_ministral3.py; those of Ministral-3-8B-Base-2512)."""

LLAMA4_SCALING_KEYS = ("llama_4_scaling_beta", "original_max_position_embeddings")
"""The ``rope_parameters`` entries ``get_llama_4_attn_scale`` reads (transformers fails without them)."""


def check_llama4_scaling(fields: ConfigFields) -> None:
    """Refuse ``rope_parameters`` without the entries the query temperature needs (the class default has them)."""
    rope = fields.mapping("rope_parameters")
    if rope is None:
        return
    for key in LLAMA4_SCALING_KEYS:
        value = rope.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fields.fail(
                f"rope_parameters.{key}",
                f"expected a number (Ministral 3 / Mistral 4 scale the query by Llama 4's temperature, which reads it), "
                f"got {value!r}",
            )


class QueryTemperatureProgram(LayerProgram):
    """The Mistral layer with the query scaled after RoPE (``Ministral3Attention.forward``)."""

    def _position_and_norm(self, q: Sym, k: Sym, produced: list[Sym]) -> tuple[Sym, Sym, bool]:
        q, k, heads_first = super()._position_and_norm(q, k, produced)
        return scale_query_by_temperature(self, q), k, heads_first


def scale_query_by_temperature(program: LayerProgram, q: Sym) -> Sym:
    """``q * get_llama_4_attn_scale(...).to(q.dtype)``: a new q-sized tensor; the ``(1, 1, s, 1)`` scale, made per
    layer, is saved by the product for q's gradient (its fp32 intermediates are transient and small)."""
    tape = program.tape
    scale = tape.new(program.shape.seq, q.dtype, False)
    scaled = tape.mul(q, scale)
    tape.release(q, scale)
    return scaled


class Ministral3(DecoderFamily):
    model_type = "ministral3"
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        check_llama4_scaling(fields)
        common = common_decoder_fields(fields, MINISTRAL3_DEFAULTS)
        return Architecture(**common, **sliding_window_fields(fields, common["num_hidden_layers"], None))

    def program(self) -> type[LayerProgram]:
        return QueryTemperatureProgram

"""The text tower of a CLIP or SigLIP dual encoder, and the tensors the ``contrastive`` task adds to its vision tower.

transformers 5.24 ``CLIPModel`` / ``SiglipModel`` (models/clip/modeling_clip.py, models/siglip/modeling_siglip.py)
hold a vision tower (``vision_model``, listed by ``models/vision_encoders.py``) and a text tower (``text_model``):

  text_model.embeddings  token_embedding vocab×h, position_embedding max_positions×h (an int64 position_ids buffer)
  text_model.encoder     num_hidden_layers pre-LN layers (layer_norm1, self_attn q/k/v/out_proj with biases,
                         layer_norm2, mlp.fc1/fc2), CLIP's with a causal mask, SigLIP's bidirectional
  text_model.final_layer_norm
  CLIP    visual_projection hv×p and text_projection h×p (no bias; p = CLIPConfig.projection_dim), logit_scale ()
  SigLIP  text_model.head h×p + p (p = projection_size, default h), logit_scale (1,), logit_bias (1,)

The defaults are those of ``CLIPTextConfig`` / ``SiglipTextConfig`` (vocab 49408 / 32000, 77 / 64 positions).
"""

from __future__ import annotations

from typing import Any, Literal, Mapping

from pydantic import PositiveInt

from ._base import FrozenModel

TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "clip": dict(vocab_size=49408, hidden_size=512, intermediate_size=2048, num_hidden_layers=12,
                 num_attention_heads=8, max_position_embeddings=77, hidden_act="quick_gelu"),
    "siglip": dict(vocab_size=32000, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                   num_attention_heads=12, max_position_embeddings=64, hidden_act="gelu_pytorch_tanh"),
}
"""``CLIPTextConfig`` / ``SiglipTextConfig`` defaults (transformers 5.24 configuration_clip.py / configuration_siglip.py)."""
CLIP_PROJECTION_DIM = 512
"""``CLIPConfig.projection_dim``'s default."""


class TextTower(FrozenModel):
    """The shape of a dual encoder's text tower and its projections."""

    kind: Literal["clip", "siglip"]
    vocab_size: PositiveInt
    hidden_size: PositiveInt
    intermediate_size: PositiveInt
    num_hidden_layers: PositiveInt
    num_attention_heads: PositiveInt
    max_position_embeddings: PositiveInt
    hidden_act: str
    projection_dim: PositiveInt
    """CLIP: both projections' output; SigLIP: the text head's output (projection_size, default hidden_size)."""

    @property
    def causal(self) -> bool:
        """CLIP's text transformer runs with a causal mask (``create_causal_mask``); SigLIP's is bidirectional."""
        return self.kind == "clip"


def read_text_tower(kind: str, fields: Any) -> TextTower | None:
    """The ``text_config`` of a ``clip`` / ``siglip`` config (``fields``: the top-level ConfigFields). A config
    without one gets the text tower of the class defaults, as ``CLIPConfig`` / ``SiglipConfig`` build it
    ("text_config is None. Initializing the CLIPTextConfig with default values.")."""
    from .models.fields import ConfigFields

    text: Mapping[str, Any] = fields.mapping("text_config") or {}
    sub = ConfigFields(dict(text), fields.path("text_config"))
    d = TEXT_DEFAULTS[kind]
    hidden = sub.integer("hidden_size", d["hidden_size"])
    heads = sub.integer("num_attention_heads", d["num_attention_heads"])
    if hidden % heads:
        raise sub.fail("hidden_size", f"hidden_size ({hidden}) must be a multiple of num_attention_heads ({heads})")
    if kind == "clip":
        projection = fields.integer("projection_dim", CLIP_PROJECTION_DIM)
    else:
        projection = sub.integer("projection_size", hidden) if text.get("projection_size") is not None else hidden
    return TextTower(
        kind=kind,  # type: ignore[arg-type]
        vocab_size=sub.integer("vocab_size", d["vocab_size"]),
        hidden_size=hidden,
        intermediate_size=sub.integer("intermediate_size", d["intermediate_size"]),
        num_hidden_layers=sub.layers(d["num_hidden_layers"]),
        num_attention_heads=heads,
        max_position_embeddings=sub.integer("max_position_embeddings", d["max_position_embeddings"]),
        hidden_act=sub.string("hidden_act", d["hidden_act"]),
        projection_dim=projection,
    )


TEXT_GROUP = "text_tower"
"""``ParameterTensor.group`` of the text tower's tensors (trained with the head: their gradients appear in its backward)."""


def text_tower_tensors(text: TextTower) -> list:
    """``text_model.*`` in ``named_parameters()`` order."""
    from .models.blocks import ParameterTensor

    h, i, g = text.hidden_size, text.intermediate_size, TEXT_GROUP
    out = [
        ParameterTensor("text_model.embeddings.token_embedding.weight", g, (text.vocab_size, h)),
        ParameterTensor("text_model.embeddings.position_embedding.weight", g, (text.max_position_embeddings, h)),
    ]
    for index in range(text.num_hidden_layers):
        p = f"text_model.encoder.layers.{index}."
        out += [ParameterTensor(p + "layer_norm1.weight", g, (h,)), ParameterTensor(p + "layer_norm1.bias", g, (h,))]
        for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):
            out += [ParameterTensor(p + f"self_attn.{proj}.weight", g, (h, h), (h, h)),
                    ParameterTensor(p + f"self_attn.{proj}.bias", g, (h,))]
        out += [ParameterTensor(p + "layer_norm2.weight", g, (h,)), ParameterTensor(p + "layer_norm2.bias", g, (h,)),
                ParameterTensor(p + "mlp.fc1.weight", g, (i, h), (h, i)), ParameterTensor(p + "mlp.fc1.bias", g, (i,)),
                ParameterTensor(p + "mlp.fc2.weight", g, (h, i), (i, h)), ParameterTensor(p + "mlp.fc2.bias", g, (h,))]
    out += [ParameterTensor("text_model.final_layer_norm.weight", g, (h,)),
            ParameterTensor("text_model.final_layer_norm.bias", g, (h,))]
    return out


def contrastive_tensors(text: TextTower, vision_hidden: int) -> list:
    """The text tower, the projections and the logit scale (and SigLIP's bias), in ``named_parameters()`` order
    after the vision tower."""
    from .models.blocks import ParameterTensor

    h, p = text.hidden_size, text.projection_dim
    if text.kind == "clip":  # CLIPModel: text_model, vision_model, visual_projection, text_projection, logit_scale
        return [
            ParameterTensor("visual_projection.weight", "lm_head", (p, vision_hidden), (vision_hidden, p)),
            ParameterTensor("text_projection.weight", "lm_head", (p, h), (h, p)),
            ParameterTensor("logit_scale", "lm_head", ()),
        ]
    return [
        ParameterTensor("text_model.head.weight", "lm_head", (p, h), (h, p)),
        ParameterTensor("text_model.head.bias", "lm_head", (p,)),
        ParameterTensor("logit_scale", "lm_head", (1,)),
        ParameterTensor("logit_bias", "lm_head", (1,)),
    ]

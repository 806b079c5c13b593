"""Gemma 4's vision and audio towers, counted as transformers 5.24 builds them (``models/gemma4/modeling_gemma4.py``).

``Gemma4ForConditionalGeneration`` holds, besides the language model (``models/gemma4.py``), a vision tower
when the config has a ``vision_config`` and an audio tower when it has an ``audio_config`` (``Gemma4Model``;
either left out or ``null`` builds none), each with its ``Gemma4MultimodalEmbedder`` into the language
model (``embed_vision``, ``embed_audio``: a weightless RMSNorm and a projection):

* vision (``Gemma4VisionModel``): ``patch_embedder.input_proj`` (3·p² → h, no bias) and a
  ``position_embedding_table`` (2, ``position_embedding_size``, h); ``num_hidden_layers`` encoder layers of
  q/k/v/o (``Gemma4ClippableLinear``: an ``nn.Linear`` named ``linear``, no bias), per-head q/k norms, a
  gated MLP and four norms; a parameter-free pooler (``standardize``'s bias and scale are buffers);
* audio (``Gemma4AudioModel``, a conformer): two 3×3 conv + LayerNorm subsampling layers, an input
  projection, ``num_hidden_layers`` layers of two feed-forwards (h → 4h → h, two norms each), chunked
  attention (q/k/v/``post``, ``relative_k_proj``, ``per_dim_scale``), a light conv block (``linear_start``
  h → 2h, a depthwise conv of ``conv_kernel_size``, ``linear_end``, two norms) and three norms;
  ``output_proj`` (h → ``output_proj_dims``, with bias).

What is modelled: the towers' weights (and, as PyTorch runs a text-only step, no gradient and no optimizer
state for them: they never run, so their ``.grad`` stays None and AdamW keeps no state). Images and audio
through the towers are not modelled: ``images`` is refused in one line (``VisionStack.images_modelled``).
"""

from __future__ import annotations

from typing import Optional

from ..models.blocks import ParameterTensor
from ..models.fields import ConfigFields
from .tower import TokenRule, VisionStack, linear, norm

VISION_DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=16, num_attention_heads=12,
                       num_key_value_heads=12, head_dim=64, patch_size=16, position_embedding_size=10 * 1024,
                       pooling_kernel_size=3)
"""``Gemma4VisionConfig``'s defaults."""

AUDIO_DEFAULTS = dict(hidden_size=1024, num_hidden_layers=12, num_attention_heads=8, conv_kernel_size=5,
                      output_proj_dims=1536)
"""``Gemma4AudioConfig``'s defaults (``subsampling_conv_channels`` (128, 32))."""


def _vision_layer(fields: ConfigFields) -> tuple[list[ParameterTensor], dict]:
    h = fields.integer("hidden_size", VISION_DEFAULTS["hidden_size"])
    i = fields.integer("intermediate_size", VISION_DEFAULTS["intermediate_size"])
    heads = fields.integer("num_attention_heads", VISION_DEFAULTS["num_attention_heads"])
    kv_heads = fields.integer("num_key_value_heads", VISION_DEFAULTS["num_key_value_heads"])
    d = fields.integer("head_dim", VISION_DEFAULTS["head_dim"])
    if heads % kv_heads:
        raise fields.fail("num_key_value_heads", f"num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads})")
    group = "vision_tower"
    layer = (
        linear("self_attn.q_proj.linear", group, h, heads * d, False)
        + linear("self_attn.k_proj.linear", group, h, kv_heads * d, False)
        + linear("self_attn.v_proj.linear", group, h, kv_heads * d, False)
        + linear("self_attn.o_proj.linear", group, heads * d, h, False)
        + norm("self_attn.q_norm", group, d, False)
        + norm("self_attn.k_norm", group, d, False)
        + linear("mlp.gate_proj.linear", group, h, i, False)
        + linear("mlp.up_proj.linear", group, h, i, False)
        + linear("mlp.down_proj.linear", group, i, h, False)
    )
    for module in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"):
        layer += norm(module, group, h, False)
    shape = dict(hidden_size=h, intermediate_size=i, num_heads=heads, head_dim=d)
    return layer, shape


def audio_tower_tensors(fields: ConfigFields, text_hidden: int) -> list[ParameterTensor]:
    """``model.audio_tower`` and ``model.embed_audio`` (names relative to ``model.``)."""
    h = fields.integer("hidden_size", AUDIO_DEFAULTS["hidden_size"])
    layers = fields.integer("num_hidden_layers", AUDIO_DEFAULTS["num_hidden_layers"], minimum=0)
    heads = fields.integer("num_attention_heads", AUDIO_DEFAULTS["num_attention_heads"])
    kernel = fields.integer("conv_kernel_size", AUDIO_DEFAULTS["conv_kernel_size"])
    out = fields.integer("output_proj_dims", AUDIO_DEFAULTS["output_proj_dims"])
    channels = fields.integer_list("subsampling_conv_channels", (128, 32), minimum=1)
    if len(channels) != 2:
        raise fields.fail("subsampling_conv_channels", f"expected two channel counts, got {len(channels)}")
    if h % heads:
        raise fields.fail("num_attention_heads", f"hidden_size ({h}) must be a multiple of num_attention_heads ({heads})")
    c0, c1 = channels
    group, prefix = "audio_tower", "audio_tower"
    tensors = [
        ParameterTensor(f"{prefix}.subsample_conv_projection.layer0.conv.weight", group, (c0, 1, 3, 3)),
        ParameterTensor(f"{prefix}.subsample_conv_projection.layer0.norm.weight", group, (c0,)),
        ParameterTensor(f"{prefix}.subsample_conv_projection.layer1.conv.weight", group, (c1, c0, 3, 3)),
        ParameterTensor(f"{prefix}.subsample_conv_projection.layer1.norm.weight", group, (c1,)),
        *linear(f"{prefix}.subsample_conv_projection.input_proj_linear", group, (c0 // 4) * c1, h, False),
    ]
    layer: list[ParameterTensor] = []
    for ff in ("feed_forward1", "feed_forward2"):
        layer += linear(f"{ff}.ffw_layer_1.linear", group, h, 4 * h, False) + linear(f"{ff}.ffw_layer_2.linear", group, 4 * h, h, False)
        layer += norm(f"{ff}.pre_layer_norm", group, h, False) + norm(f"{ff}.post_layer_norm", group, h, False)
    layer.append(ParameterTensor("self_attn.per_dim_scale", group, (h // heads,)))
    for module in ("q_proj", "k_proj", "v_proj", "post"):
        layer += linear(f"self_attn.{module}.linear", group, h, h, False)
    layer += linear("self_attn.relative_k_proj", group, h, h, False)
    layer += linear("lconv1d.linear_start.linear", group, h, 2 * h, False) + linear("lconv1d.linear_end.linear", group, h, h, False)
    layer.append(ParameterTensor("lconv1d.depthwise_conv1d.weight", group, (h, 1, kernel)))
    layer += norm("lconv1d.pre_layer_norm", group, h, False) + norm("lconv1d.conv_norm", group, h, False)
    for module in ("norm_pre_attn", "norm_post_attn", "norm_out"):
        layer += norm(module, group, h, False)
    for index in range(layers):
        tensors += [t._replace(name=f"{prefix}.layers.{index}.{t.name}") for t in layer]
    tensors += linear(f"{prefix}.output_proj", group, h, out, True)
    tensors += linear("embed_audio.embedding_projection", group, out, text_hidden, False)
    return tensors


def read_gemma4(config: ConfigFields) -> Optional[VisionStack]:
    """The towers of a ``gemma4`` config.json (None when it has neither)."""
    text = config.mapping("text_config") or {}
    text_hidden = ConfigFields(text, config.path("text_config")).integer("hidden_size", 2304)
    vision = config.mapping("vision_config")
    audio = config.mapping("audio_config")
    if vision is None and audio is None:
        return None
    others: list[ParameterTensor] = []
    if audio is not None:
        others = audio_tower_tensors(ConfigFields(audio, config.path("audio_config")), text_hidden)
    fields = ConfigFields(vision or {}, config.path("vision_config"))
    layer, shape = _vision_layer(fields)
    layers = fields.integer("num_hidden_layers", VISION_DEFAULTS["num_hidden_layers"], minimum=0) if vision is not None else 0
    patch = fields.integer("patch_size", VISION_DEFAULTS["patch_size"])
    positions = fields.integer("position_embedding_size", VISION_DEFAULTS["position_embedding_size"])
    h = shape["hidden_size"]
    prelude: list[ParameterTensor] = []
    projector: list[ParameterTensor] = []
    if vision is not None:
        prelude = [
            *linear("patch_embedder.input_proj", "vision_tower", 3 * patch * patch, h, False),
            ParameterTensor("patch_embedder.position_embedding_table", "vision_tower", (2, positions, h)),
        ]
        projector = linear("embedding_projection", "projector", h, text_hidden, False)
    return VisionStack(
        wrapper="gemma4", tower_type="gemma4_vision", tower_prefix="model.vision_tower",
        projector_prefix="model.embed_vision", num_layers=layers, norm="rmsnorm", mlp="gated",
        hidden_act="gelu_pytorch_tanh", attention_bias=False, mlp_bias=False, fused_qkv=False, rope=True,
        prelude=tuple(prelude), layer=tuple(layer), postlude=(), projector=tuple(projector),
        projector_in_features=h, projector_hidden=0, projector_out_features=text_hidden,
        tokens=TokenRule("fixed", patch, image_size=patch, tokens_per_image=1), other_towers=tuple(others),
        images_modelled=False,
        notes=("Gemma 4's vision and audio towers: weights counted; a text-only step leaves them without gradients "
               "and optimizer states (they never run); images and audio through them are not modelled",),
        **shape,
    )

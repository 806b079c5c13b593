"""Reading a VLM's ``vision_config`` (and the wrapper's projector fields) into a :class:`VisionStack`.

One reader per transformers 5.24 wrapper, with the defaults of its configuration classes
(``configuration_<family>.py``): a field the file leaves out takes the tower class's default when
``vision_config`` is given, and the wrapper's default vision tower when it is not (LLaVA's default is
CLIP ViT-L/14-336). Module names and shapes follow the modeling files, checked on the meta device
(tests/test_vlm.py):

* LLaVA (``modeling_llava.py``, CLIP ``modeling_clip.py``): class embedding, conv patch embedding,
  ``(image/patch)² + 1`` positions, ``pre_layrnorm``, LayerNorm layers with biased q/k/v/out_proj and
  ``fc1``/``fc2``, ``post_layernorm``; projector ``linear_1`` (vision × feature layers → text),
  GELU, ``linear_2``;
* Gemma 3 (``modeling_gemma3.py``, SigLIP ``modeling_siglip.py``): biased conv patch embedding, positions,
  SigLIP layers, ``post_layernorm`` and, with ``vision_use_head``, the attention-pooling head; projector
  ``mm_soft_emb_norm`` (RMSNorm) and ``mm_input_projection_weight`` (vision × text) after an average pool
  to ``mm_tokens_per_image``;
* Idefics3 / SmolVLM: SigLIP-style tower without head; connector ``modality_projection.proj``
  (vision × scale_factor² → text) after pixel-unshuffle;
* Mistral 3 (Pixtral ``modeling_pixtral.py``): conv without bias, RMSNorm ``ln_pre``, layers with
  RMSNorm and gated MLP, no biases, 2-D RoPE; projector RMSNorm, ``patch_merger.merging_layer``
  (vision × merge² → vision), ``linear_1``, ``linear_2``;
* Qwen2.5-VL (``modeling_qwen2_5_vl.py``): Conv3d patch embedding (temporal patch 2, no bias), RMSNorm
  blocks with fused biased ``qkv``/``proj`` and a biased SwiGLU MLP, window attention except
  ``fullatt_block_indexes``; merger RMSNorm ``ln_q`` and ``mlp.0``/``mlp.2``;
* Qwen3-VL (``modeling_qwen3_vl.py``): biased Conv3d, learned ``pos_embed`` (interpolated), LayerNorm
  blocks with ``linear_fc1``/``linear_fc2``; merger (LayerNorm over the vision width) and one DeepStack
  merger per ``deepstack_visual_indexes`` (LayerNorm over the merged width);
* Llama 4 (``modeling_llama4.py``): unfold + linear patch embedding, class embedding, positions,
  LayerNorm pre/post, biased layers with 2-D RoPE, the pixel-shuffle ``vision_adapter`` MLP, projector
  ``linear_1`` (vision_output_dim → text).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from ..models.blocks import ParameterTensor
from ..models.fields import ConfigFields
from .tower import TokenRule, VisionStack, encoder_layer, linear, norm
from .gemma4 import read_gemma4

_CLIP_SIGLIP_NAMES = {
    "norm1": "layer_norm1", "norm2": "layer_norm2", "q": "self_attn.q_proj", "k": "self_attn.k_proj",
    "v": "self_attn.v_proj", "o": "self_attn.out_proj", "fc1": "mlp.fc1", "fc2": "mlp.fc2",
}
_PIXTRAL_NAMES = {
    "norm1": "attention_norm", "norm2": "ffn_norm", "q": "attention.q_proj", "k": "attention.k_proj",
    "v": "attention.v_proj", "o": "attention.o_proj", "gate": "feed_forward.gate_proj",
    "up": "feed_forward.up_proj", "down": "feed_forward.down_proj",
}
_QWEN_VL_NAMES = {
    "norm1": "norm1", "norm2": "norm2", "qkv": "attn.qkv", "o": "attn.proj", "gate": "mlp.gate_proj",
    "up": "mlp.up_proj", "down": "mlp.down_proj", "fc1": "mlp.linear_fc1", "fc2": "mlp.linear_fc2",
}
_LLAMA4_NAMES = {
    "norm1": "input_layernorm", "norm2": "post_attention_layernorm", "q": "self_attn.q_proj",
    "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj", "fc1": "mlp.fc1", "fc2": "mlp.fc2",
}

#: LlavaConfig's default vision tower when the file has no vision_config (CLIP ViT-L/14 at 336 px).
LLAVA_DEFAULT_VISION = {
    "model_type": "clip_vision_model", "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
    "num_attention_heads": 16, "image_size": 336, "patch_size": 14, "hidden_act": "quick_gelu",
}

#: Tower class defaults (transformers 5.24 configuration classes), by vision_config.model_type.
TOWER_DEFAULTS: dict[str, dict[str, Any]] = {
    "clip_vision_model": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                              image_size=224, patch_size=32, hidden_act="quick_gelu", num_channels=3),
    "siglip_vision_model": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                                image_size=224, patch_size=16, hidden_act="gelu_pytorch_tanh", num_channels=3,
                                vision_use_head=True),
    "idefics3_vision": dict(hidden_size=1152, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=16,
                            image_size=224, patch_size=32, hidden_act="gelu_pytorch_tanh", num_channels=3),
    "pixtral": dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                    image_size=1024, patch_size=16, hidden_act="gelu", num_channels=3, head_dim=64),
    "qwen2_5_vl": dict(hidden_size=3584, intermediate_size=3420, depth=32, num_heads=16, patch_size=14,
                       hidden_act="silu", spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=3584,
                       in_channels=3),
    "qwen3_vl": dict(hidden_size=1152, intermediate_size=4304, depth=27, num_heads=16, patch_size=16,
                     hidden_act="gelu_pytorch_tanh", spatial_merge_size=2, temporal_patch_size=2,
                     out_hidden_size=3584, num_position_embeddings=2304, deepstack_visual_indexes=[8, 16, 24],
                     in_channels=3),
    "llama4_vision_model": dict(hidden_size=768, intermediate_size=5632, num_hidden_layers=34,
                                num_attention_heads=16, image_size=448, patch_size=14, hidden_act="gelu",
                                num_channels=3, vision_output_dim=7680, pixel_shuffle_ratio=0.5,
                                projector_input_dim=4096, projector_output_dim=4096),
}
TOWER_DEFAULTS["smolvlm_vision"] = TOWER_DEFAULTS["idefics3_vision"]

#: Processor defaults (transformers 5.24 image processors) that decide the visual token count.
QWEN2_VL_MIN_PIXELS = 56 * 56
"""Qwen2VLImageProcessor ``size['shortest_edge']`` default (min_pixels)."""
QWEN2_VL_MAX_PIXELS = 28 * 28 * 1280
"""Qwen2VLImageProcessor ``size['longest_edge']`` default (max_pixels = 1,003,520)."""
LLAMA4_MAX_TILES = 16
"""Llama4ImageProcessorFast ``max_patches`` default."""
IDEFICS3_RESIZE_TILES = 4
"""Idefics3ImageProcessor / SmolVLMImageProcessor: ``size['longest_edge']`` is 4 × ``max_image_size``."""


class _Tower:
    """Typed fields of ``vision_config`` with the tower class's defaults."""

    def __init__(self, fields: ConfigFields, tower_type: str):
        self.fields = fields
        self.defaults = TOWER_DEFAULTS[tower_type]

    def integer(self, name: str, **kwargs: Any) -> int:
        return self.fields.integer(name, self.defaults.get(name), **kwargs)

    def string(self, name: str) -> str:
        return self.fields.string(name, self.defaults.get(name))

    def boolean(self, name: str, default: bool) -> bool:
        return self.fields.boolean(name, self.defaults.get(name, default))

    def number(self, name: str) -> float:
        return self.fields.number(name, self.defaults.get(name), minimum=0.0, maximum=1.0)


def _vision_fields(config: ConfigFields, default: Optional[Mapping[str, Any]] = None) -> tuple[ConfigFields, str]:
    vision = config.mapping("vision_config")
    if vision is None:
        vision = default or {}
    return ConfigFields(vision, config.path("vision_config")), str(vision.get("model_type") or "")


def _text_hidden(config: ConfigFields, default: int) -> int:
    text = config.mapping("text_config")
    if text is not None:
        return ConfigFields(text, config.path("text_config")).integer("hidden_size", default)
    return config.integer("hidden_size", default)


def _divides(fields: ConfigFields, name: str, size: int, by: int, by_name: str) -> None:
    if size % by:
        raise fields.fail(name, f"{name} ({size}) must be a multiple of {by_name} ({by})")


# ---------------------------------------------------------------------------- CLIP / SigLIP family


def _clip_like(
    fields: ConfigFields, tower_type: str, *, class_token: bool, pre_norm: bool, head: bool, patch_bias: bool
) -> tuple[dict[str, Any], list[ParameterTensor], list[ParameterTensor], list[ParameterTensor]]:
    tower = _Tower(fields, tower_type)
    h, i = tower.integer("hidden_size"), tower.integer("intermediate_size")
    layers = tower.integer("num_hidden_layers", maximum=1024)
    heads = tower.integer("num_attention_heads")
    image, patch = tower.integer("image_size"), tower.integer("patch_size")
    channels = tower.integer("num_channels")
    _divides(fields, "hidden_size", h, heads, "num_attention_heads")
    if patch > image:
        raise fields.fail("patch_size", f"patch_size ({patch}) cannot exceed image_size ({image})")
    patches = (image // patch) ** 2
    prelude: list[ParameterTensor] = []
    if class_token:
        prelude.append(ParameterTensor("embeddings.class_embedding", "vision_tower", (h,)))
    prelude.append(ParameterTensor("embeddings.patch_embedding.weight", "vision_tower", (h, channels, patch, patch)))
    if patch_bias:
        prelude.append(ParameterTensor("embeddings.patch_embedding.bias", "vision_tower", (h,)))
    prelude.append(
        ParameterTensor("embeddings.position_embedding.weight", "vision_tower", (patches + int(class_token), h))
    )
    if pre_norm:
        prelude += norm("pre_layrnorm", "vision_tower", h, True)
    layer = encoder_layer(
        h, i, names=_CLIP_SIGLIP_NAMES, layernorm=True, attention_bias=True, mlp_bias=True, gated=False, fused_qkv=False
    )
    postlude = norm("post_layernorm", "vision_tower", h, True)
    if head:  # SiglipMultiheadAttentionPoolingHead
        postlude += [
            ParameterTensor("head.probe", "vision_tower", (1, 1, h)),
            ParameterTensor("head.attention.in_proj_weight", "vision_tower", (3 * h, h)),
            ParameterTensor("head.attention.in_proj_bias", "vision_tower", (3 * h,)),
            *linear("head.attention.out_proj", "vision_tower", h, h, True),
            *norm("head.layernorm", "vision_tower", h, True),
            *linear("head.mlp.fc1", "vision_tower", h, i, True),
            *linear("head.mlp.fc2", "vision_tower", i, h, True),
        ]
    common = dict(
        tower_type=tower_type, hidden_size=h, intermediate_size=i, num_layers=layers, num_heads=heads,
        head_dim=h // heads, norm="layernorm", mlp="plain", hidden_act=tower.string("hidden_act"),
        attention_bias=True, mlp_bias=True, fused_qkv=False, rope=False,
    )
    common["_image"], common["_patch"] = image, patch
    return common, prelude, layer, postlude


def _feature_layers(config: ConfigFields, default: int) -> int:
    value = config.raw("vision_feature_layer", default)
    if isinstance(value, list):
        return len(config.integer_list("vision_feature_layer", minimum=-1024, maximum=1024))
    config.integer("vision_feature_layer", default, minimum=-1024, maximum=1024)
    return 1


def _unused_layers(config: ConfigFields, default: int, num_layers: int) -> int:
    """Layers after the deepest one ``vision_feature_layer`` selects from ``hidden_states`` (num_layers + 1
    entries: the embeddings, then each layer's output)."""
    value = config.raw("vision_feature_layer", default)
    selected = value if isinstance(value, list) else [value]
    indices = [index if index >= 0 else num_layers + 1 + index for index in selected if isinstance(index, int)]
    if not indices or any(not 0 <= index <= num_layers for index in indices):
        raise config.fail("vision_feature_layer", f"must select among the {num_layers + 1} hidden states of the tower, got {value!r}")
    return num_layers - max(indices)


def read_llava(config: ConfigFields) -> VisionStack:
    fields, tower_type = _vision_fields(config, LLAVA_DEFAULT_VISION)
    tower_type = tower_type or "clip_vision_model"
    if tower_type not in ("clip_vision_model", "siglip_vision_model"):
        raise fields.fail("model_type", f"LLaVA's vision tower {tower_type!r} is not supported; supported: clip_vision_model, siglip_vision_model")
    clip = tower_type == "clip_vision_model"
    common, prelude, layer, postlude = _clip_like(
        fields, tower_type, class_token=clip, pre_norm=clip, head=False if clip else fields.boolean("vision_use_head", True),
        patch_bias=not clip,
    )
    image, patch = common.pop("_image"), common.pop("_patch")
    text_h = _text_hidden(config, 4096)
    feature_layers = _feature_layers(config, -2)
    bias = config.boolean("multimodal_projector_bias", True)
    strategy = config.string("vision_feature_select_strategy", "default")
    if strategy not in ("default", "full"):
        raise config.fail("vision_feature_select_strategy", f"expected 'default' or 'full', got {strategy!r}")
    vision_in = common["hidden_size"] * feature_layers
    projector = linear("linear_1", "projector", vision_in, text_h, bias) + linear("linear_2", "projector", text_h, text_h, bias)
    patches = (image // patch) ** 2
    keep_class = strategy == "full" and clip
    return VisionStack(
        wrapper="llava", tower_prefix="model.vision_tower", projector_prefix="model.multi_modal_projector",
        prelude=tuple(prelude), layer=tuple(layer), postlude=tuple(postlude), projector=tuple(projector),
        projector_in_features=vision_in, projector_hidden=text_h, projector_out_features=text_h,
        tokens=TokenRule("fixed", patch, image_size=image, tokens_per_image=patches + int(keep_class), class_token=clip),
        selected_layers=feature_layers, keeps_all_hidden_states=True, outputs_in_model_output=True,
        unused_layers=_unused_layers(config, -2, common["num_layers"]),
        unused_postlude=tuple(t.name for t in postlude if clip or t.name.startswith("head.")), **common,
    )


def read_gemma3(config: ConfigFields) -> VisionStack:
    fields, tower_type = _vision_fields(config)
    tower_type = tower_type or "siglip_vision_model"
    common, prelude, layer, postlude = _clip_like(
        fields, "siglip_vision_model", class_token=False, pre_norm=False,
        head=fields.boolean("vision_use_head", True), patch_bias=True,
    )
    image, patch = common.pop("_image"), common.pop("_patch")
    text_h = _text_hidden(config, 2304)
    tokens = config.integer("mm_tokens_per_image", 256)
    side = round(tokens**0.5)
    if side * side != tokens:
        raise config.fail("mm_tokens_per_image", f"must be a square number (the pooled grid), got {tokens}")
    h = common["hidden_size"]
    projector = [
        ParameterTensor("mm_input_projection_weight", "projector", (h, text_h), (h, text_h)),
        ParameterTensor("mm_soft_emb_norm.weight", "projector", (h,)),
    ]
    return VisionStack(
        wrapper="gemma3", tower_prefix="model.vision_tower", projector_prefix="model.multi_modal_projector",
        prelude=tuple(prelude), layer=tuple(layer), postlude=tuple(postlude), projector=tuple(projector),
        projector_in_features=h, projector_hidden=0, projector_out_features=text_h,
        tokens=TokenRule("fixed", patch, image_size=image, tokens_per_image=tokens),
        unused_postlude=tuple(t.name for t in postlude if t.name.startswith("head.")), **common,
    )


def _read_idefics3_like(config: ConfigFields, wrapper: str) -> VisionStack:
    fields, tower_type = _vision_fields(config)
    common, prelude, layer, postlude = _clip_like(
        fields, f"{wrapper}_vision", class_token=False, pre_norm=False, head=False, patch_bias=True
    )
    image, patch = common.pop("_image"), common.pop("_patch")
    text_h = _text_hidden(config, 4096)
    scale = config.integer("scale_factor", 2)
    side = image // patch
    h = common["hidden_size"]
    projector = linear("modality_projection.proj", "projector", h * scale * scale, text_h, False)
    return VisionStack(
        wrapper=wrapper, tower_prefix="model.vision_model", projector_prefix="model.connector",
        prelude=tuple(prelude), layer=tuple(layer), postlude=tuple(postlude), projector=tuple(projector),
        projector_in_features=h * scale * scale, projector_hidden=0, projector_out_features=text_h,
        tokens=TokenRule(
            "tiles", patch, image_size=image, tile_size=image, tokens_per_tile=side * side // (scale * scale),
            resize_longest_edge=IDEFICS3_RESIZE_TILES * image, max_tiles=IDEFICS3_RESIZE_TILES**2,
        ),
        **common,
    )


def read_idefics3(config: ConfigFields) -> VisionStack:
    return _read_idefics3_like(config, "idefics3")


def read_smolvlm(config: ConfigFields) -> VisionStack:
    return _read_idefics3_like(config, "smolvlm")


# ---------------------------------------------------------------------------- Pixtral (Mistral 3)


def read_mistral3(config: ConfigFields) -> VisionStack:
    fields, _ = _vision_fields(config)
    tower = _Tower(fields, "pixtral")
    h, i = tower.integer("hidden_size"), tower.integer("intermediate_size")
    layers, heads = tower.integer("num_hidden_layers", maximum=1024), tower.integer("num_attention_heads")
    head_dim = fields.integer("head_dim", h // heads)
    image, patch, channels = tower.integer("image_size"), tower.integer("patch_size"), tower.integer("num_channels")
    text_h = _text_hidden(config, 5120)
    merge = config.integer("spatial_merge_size", 2)
    bias = config.boolean("multimodal_projector_bias", False)
    feature_layers = _feature_layers(config, -1)
    prelude = [ParameterTensor("patch_conv.weight", "vision_tower", (h, channels, patch, patch))]
    prelude += norm("ln_pre", "vision_tower", h, False)
    layer = encoder_layer(
        h, i, names=_PIXTRAL_NAMES, layernorm=False, attention_bias=False, mlp_bias=False, gated=True,
        fused_qkv=False, qkv_width=heads * head_dim,
    )
    vision_in = h * feature_layers
    projector = norm("norm", "projector", vision_in, False)
    projector += linear("patch_merger.merging_layer", "projector", vision_in * merge * merge, vision_in, False)
    projector += linear("linear_1", "projector", vision_in, text_h, bias) + linear("linear_2", "projector", text_h, text_h, bias)
    return VisionStack(
        wrapper="mistral3", tower_type="pixtral", tower_prefix="model.vision_tower",
        projector_prefix="model.multi_modal_projector", hidden_size=h, intermediate_size=i, num_layers=layers,
        num_heads=heads, head_dim=head_dim, norm="rmsnorm", mlp="gated", hidden_act=tower.string("hidden_act"),
        attention_bias=False, mlp_bias=False, fused_qkv=False, rope=True,
        prelude=tuple(prelude), layer=tuple(layer), postlude=(), projector=tuple(projector),
        projector_in_features=vision_in, projector_hidden=text_h, projector_out_features=text_h,
        tokens=TokenRule("longest_edge", patch, image_size=image, longest_edge=image, merge=merge),
        selected_layers=feature_layers, keeps_all_hidden_states=True,
        unused_layers=_unused_layers(config, -1, layers),
    )


# ---------------------------------------------------------------------------- Qwen-VL


def _qwen_vl(config: ConfigFields, wrapper: str, tower_type: str) -> VisionStack:
    fields, _ = _vision_fields(config)
    tower = _Tower(fields, tower_type)
    h, i = tower.integer("hidden_size"), tower.integer("intermediate_size")
    layers, heads = tower.integer("depth", maximum=1024), tower.integer("num_heads")
    _divides(fields, "hidden_size", h, heads, "num_heads")
    patch, temporal = tower.integer("patch_size"), tower.integer("temporal_patch_size")
    merge, channels = tower.integer("spatial_merge_size"), tower.integer("in_channels")
    out = tower.integer("out_hidden_size")
    merged = h * merge * merge
    qwen3 = wrapper == "qwen3_vl"
    prelude = [ParameterTensor("patch_embed.proj.weight", "vision_tower", (h, channels, temporal, patch, patch))]
    if qwen3:
        positions = tower.integer("num_position_embeddings")
        prelude += [
            ParameterTensor("patch_embed.proj.bias", "vision_tower", (h,)),
            ParameterTensor("pos_embed.weight", "vision_tower", (positions, h)),
        ]
    layer = encoder_layer(
        h, i, names=_QWEN_VL_NAMES, layernorm=qwen3, attention_bias=True, mlp_bias=True, gated=not qwen3, fused_qkv=True
    )
    if qwen3:
        deepstack = fields.integer_list("deepstack_visual_indexes", TOWER_DEFAULTS["qwen3_vl"]["deepstack_visual_indexes"])
        projector = norm("merger.norm", "projector", h, True)
        projector += linear("merger.linear_fc1", "projector", merged, merged, True)
        projector += linear("merger.linear_fc2", "projector", merged, out, True)
        for index in range(len(deepstack)):
            prefix = f"deepstack_merger_list.{index}"
            projector += norm(f"{prefix}.norm", "projector", merged, True)
            projector += linear(f"{prefix}.linear_fc1", "projector", merged, merged, True)
            projector += linear(f"{prefix}.linear_fc2", "projector", merged, out, True)
        hidden_act = tower.string("hidden_act")
    else:
        projector = norm("merger.ln_q", "projector", h, False)
        projector += linear("merger.mlp.0", "projector", merged, merged, True)
        projector += linear("merger.mlp.2", "projector", merged, out, True)
        hidden_act = tower.string("hidden_act")
    return VisionStack(
        wrapper=wrapper, tower_type=f"{wrapper}_vision", tower_prefix="model.visual", projector_prefix="model.visual",
        hidden_size=h, intermediate_size=i, num_layers=layers, num_heads=heads, head_dim=h // heads,
        norm="layernorm" if qwen3 else "rmsnorm", mlp="plain" if qwen3 else "gated", hidden_act=hidden_act,
        attention_bias=True, mlp_bias=True, fused_qkv=True, rope=True,
        prelude=tuple(prelude), layer=tuple(layer), postlude=(), projector=tuple(projector),
        projector_in_features=merged, projector_hidden=merged, projector_out_features=out,
        tokens=TokenRule(
            "smart_resize", patch, merge=merge, temporal_patch_size=temporal,
            min_pixels=QWEN2_VL_MIN_PIXELS, max_pixels=QWEN2_VL_MAX_PIXELS,
        ),
    )


def read_qwen2_5_vl(config: ConfigFields) -> VisionStack:
    return _qwen_vl(config, "qwen2_5_vl", "qwen2_5_vl")


def read_qwen3_vl(config: ConfigFields) -> VisionStack:
    return _qwen_vl(config, "qwen3_vl", "qwen3_vl")


# ---------------------------------------------------------------------------- Llama 4


def read_llama4(config: ConfigFields) -> VisionStack:
    fields, _ = _vision_fields(config)
    tower = _Tower(fields, "llama4_vision_model")
    h, i = tower.integer("hidden_size"), tower.integer("intermediate_size")
    layers, heads = tower.integer("num_hidden_layers", maximum=1024), tower.integer("num_attention_heads")
    _divides(fields, "hidden_size", h, heads, "num_attention_heads")
    image, patch, channels = tower.integer("image_size"), tower.integer("patch_size"), tower.integer("num_channels")
    ratio = tower.number("pixel_shuffle_ratio")
    proj_in, proj_out = tower.integer("projector_input_dim"), tower.integer("projector_output_dim")
    vision_out = tower.integer("vision_output_dim")
    text_h = _text_hidden(config, 5120)
    side = image // patch
    prelude = [
        ParameterTensor("class_embedding", "vision_tower", (h,)),
        ParameterTensor("positional_embedding_vlm", "vision_tower", (side * side + 1, h)),
        *linear("patch_embedding.linear", "vision_tower", channels * patch * patch, h, False),
        *norm("layernorm_pre", "vision_tower", h, True),
    ]
    layer = encoder_layer(
        h, i, names=_LLAMA4_NAMES, layernorm=True, attention_bias=True, mlp_bias=True, gated=False, fused_qkv=False
    )
    postlude = norm("layernorm_post", "vision_tower", h, True)
    postlude += linear("vision_adapter.mlp.fc1", "vision_tower", i, proj_in, False)
    postlude += linear("vision_adapter.mlp.fc2", "vision_tower", proj_out, proj_out, False)
    projector = linear("linear_1", "projector", vision_out, text_h, False)
    tokens_per_tile = round(side * side * ratio * ratio)
    return VisionStack(
        wrapper="llama4", tower_type="llama4_vision_model", tower_prefix="vision_model",
        projector_prefix="multi_modal_projector", hidden_size=h, intermediate_size=i, num_layers=layers,
        num_heads=heads, head_dim=h // heads, norm="layernorm", mlp="plain", hidden_act=tower.string("hidden_act"),
        attention_bias=True, mlp_bias=True, fused_qkv=False, rope=True,
        prelude=tuple(prelude), layer=tuple(layer), postlude=tuple(postlude), projector=tuple(projector),
        projector_in_features=vision_out, projector_hidden=0, projector_out_features=text_h,
        tokens=TokenRule(
            "tiles", patch, image_size=image, tile_size=image, tokens_per_tile=tokens_per_tile, class_token=True,
            max_tiles=LLAMA4_MAX_TILES,
        ),
    )


VISION_READERS: dict[str, Callable[[ConfigFields], VisionStack]] = {
    "llava": read_llava,
    "gemma3": read_gemma3,
    "idefics3": read_idefics3,
    "smolvlm": read_smolvlm,
    "mistral3": read_mistral3,
    "qwen2_5_vl": read_qwen2_5_vl,
    "qwen3_vl": read_qwen3_vl,
    "llama4": read_llama4,
    "gemma4": read_gemma4,
}
"""Wrapper ``model_type`` -> its reader."""


def read_vision_stack(config: Mapping[str, Any], prefix: str = "") -> Optional[VisionStack]:
    """The vision stack of a VLM ``config.json`` (None for a text-only model or a text_config alone)."""
    if not isinstance(config, Mapping):
        return None
    reader = VISION_READERS.get(str(config.get("model_type") or ""))
    if reader is None:
        return None
    return reader(ConfigFields(config, prefix))

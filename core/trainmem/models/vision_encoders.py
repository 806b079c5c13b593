"""Vision encoders on their own: ViT, DINOv2, and the vision towers of CLIP and SigLIP, for image classification.

Each is a family of the same kind as the text families (config reader with the transformers 5.24
configuration class's defaults, inventory, layer program, head), trained as
``<Family>ForImageClassification`` (``trainmem.tasks``: ``image_classification``). The layers are pre-LN
transformer blocks (``x + attention(LayerNorm(x))``, ``x + mlp(LayerNorm(x))``, biases everywhere,
bidirectional attention) replayed by the shared layer program; the patch embedding and the head are
replayed by ``trainmem.vision.encoders``. The CLIP and SigLIP towers' tensors are those the VLM readers list
(``trainmem.vision.readers._clip_like``), not a second copy.

The sequence is set by the image: the processor resizes every image to the model's input size
(ViTImageProcessor, CLIPImageProcessor, SiglipImageProcessor: ``image_size``; DINOv2's BitImageProcessor
crops to 224 px, ``DINOV2_PROCESSOR_CROP_PX``), so each image is ``(side / patch_size)²`` patches plus the
[CLS] token (none for SigLIP). ``Setup.sequence_length`` is derived from it.

Counting rules (checked against transformers on the meta device in tests/test_vision_encoders.py):

  ViT      embeddings.cls_token (1,1,h), position_embeddings (1,n+1,h), patch_embeddings.projection h×C×p×p + h;
           layers: layernorm_before, attention.q_proj/k_proj/v_proj (bias: qkv_bias), attention.o_proj,
           layernorm_after, mlp.fc1 (i×h + i), mlp.fc2; layernorm; classifier L×h + L
  DINOv2   as ViT (norm1, norm2), with mask_token (1,h) (use_mask_token), layer_scale1/2.lambda1 (h each),
           mlp.fc1/fc2 of int(h·mlp_ratio) (or SwiGLU gate/up/down of (int(int(h·mlp_ratio)·2/3) + 7) // 8 · 8);
           classifier L×2h + L over [CLS] and the mean patch
  CLIP     vision_model: class_embedding (h), patch_embedding h×C×p×p (no bias), position_embedding (n+1)×h,
           pre_layrnorm, layers (layer_norm1, self_attn q/k/v/out_proj, layer_norm2, mlp.fc1/fc2), post_layernorm;
           classifier L×h + L over the mean patch
  SigLIP   patch_embedding with bias, position_embedding n×h, layers as CLIP, post_layernorm, the attention-pooling
           head (vision_use_head); classifier L×h + L over the mean token

Parameters on no path to the loss get no gradient and no optimizer state (``group="unused"``): DINOv2's
``mask_token`` (no ``bool_masked_pos``), CLIP's ``post_layernorm`` (it norms the pooled [CLS] token, which the
classifier does not read), SigLIP's pooling head (its output, ``pooler_output``, is not read either).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping, Optional

from ..architecture import Architecture
from . import blocks
from .blocks import ModuleNames, ParameterTensor
from .family import DecoderFamily
from .fields import ConfigFields

if TYPE_CHECKING:
    from ..layers import LayerProgram

VISION_ENCODER_TASKS = ("image_classification",)
UNUSED_GROUP = "unused"
"""``ParameterTensor.group`` of parameters on no path to the loss (no gradient, no optimizer state)."""
DINOV2_PROCESSOR_CROP_PX = 224
"""BitImageProcessor's ``crop_size`` in the facebook/dinov2-* ``preprocessor_config.json`` (resize the shortest
edge to 256, centre-crop 224); the model interpolates its position table (518 px in the configs) to it."""


@dataclass(frozen=True)
class VisionEncoderNames(ModuleNames):
    """Module paths of a vision encoder (layer-relative for the layer's, model-relative for the ends)."""

    patch_embedding: str = "embeddings.patch_embeddings.projection"
    class_token: str = "embeddings.cls_token"
    pre_norm: str = ""
    layer_scale1: str = "layer_scale1"
    layer_scale2: str = "layer_scale2"
    classifier: str = "classifier"

    def module_paths(self) -> tuple[str, ...]:
        return (*super().module_paths(), self.patch_embedding, self.class_token, self.layer_scale1, self.layer_scale2)


VIT_NAMES = VisionEncoderNames(
    embed_tokens="embeddings.patch_embeddings.projection",
    embed_positions="embeddings.position_embeddings",
    final_norm="layernorm",
    lm_head="classifier",
    input_norm="layernorm_before",
    post_attention_norm="layernorm_after",
    q_proj="attention.q_proj",
    k_proj="attention.k_proj",
    v_proj="attention.v_proj",
    o_proj="attention.o_proj",
    mlp="mlp",
)
DINOV2_NAMES = replace(VIT_NAMES, input_norm="norm1", post_attention_norm="norm2")
CLIP_NAMES = VisionEncoderNames(
    embed_tokens="vision_model.embeddings.patch_embedding",
    embed_positions="vision_model.embeddings.position_embedding",
    patch_embedding="vision_model.embeddings.patch_embedding",
    class_token="vision_model.embeddings.class_embedding",
    pre_norm="vision_model.pre_layrnorm",
    final_norm="vision_model.post_layernorm",
    lm_head="classifier",
    input_norm="layer_norm1",
    post_attention_norm="layer_norm2",
    q_proj="self_attn.q_proj",
    k_proj="self_attn.k_proj",
    v_proj="self_attn.v_proj",
    o_proj="self_attn.out_proj",
    mlp="mlp",
)
SIGLIP_NAMES = replace(CLIP_NAMES, pre_norm="")
"""SigLIP's tower has no ``pre_layrnorm`` (SiglipVisionTransformer: embeddings, then the encoder)."""


def _regrouped(tensors: list[ParameterTensor], names: VisionEncoderNames) -> list[ParameterTensor]:
    """A VLM tower layer's tensors (group ``vision_tower``) in the text families' groups."""
    attention = names.o_proj.rsplit(".", 1)[0] + "."
    out = []
    for tensor in tensors:
        module = tensor.module
        group = "attention" if module.startswith(attention) else "norms" if "norm" in module else "mlp"
        out.append(tensor._replace(group=group))
    return out


class VisionEncoderFamily(DecoderFamily):
    """A pre-LN vision transformer read from its own config.json (ViT's layout unless a subclass says otherwise)."""

    names: VisionEncoderNames = VIT_NAMES
    tasks: tuple[str, ...] = VISION_ENCODER_TASKS
    lora_default_targets: Optional[tuple[str, ...]] = None
    pooling: str = "cls"
    """How the classifier reads the last hidden states: ``cls`` (ViT: ``x[:, 0]``), ``cls_and_mean_patches``
    (DINOv2: ``cat([x[:, 0], x[:, 1:].mean(1)])``), ``mean_patches`` (CLIP: ``x[:, 1:].mean(1)``), ``mean``
    (SigLIP: ``x.mean(1)``)."""
    final_norm_on_tokens: bool = True
    """The model's last LayerNorm runs over every token before the head (ViT, DINOv2, SigLIP); CLIP's
    ``post_layernorm`` norms only the pooled [CLS] token (not read by the classifier)."""
    position_ids_buffer: bool = False
    patch_bias: bool = True
    """The patch convolution has a bias (ViT, DINOv2, SigLIP; CLIP's has none)."""
    """CLIP and SigLIP look positions up with an int64 ``position_ids`` buffer of ``num_positions`` values."""
    eager_softmax_in_fp32 = True  # the towers' eager_attention_forward: softmax(dtype=float32).to(query.dtype)

    # ------------------------------------------------------------------ inventory
    def embedding(self, arch: Architecture) -> list[ParameterTensor]:
        h, p, names = arch.hidden_size, arch.patch_size, self.names
        return [
            ParameterTensor(f"{names.class_token}", "embeddings", (1, 1, h)),
            ParameterTensor(f"{names.embed_positions}", "embeddings", (1, arch.max_position_embeddings, h)),
            ParameterTensor(f"{names.patch_embedding}.weight", "embeddings", (h, arch.num_channels, p, p)),
            ParameterTensor(f"{names.patch_embedding}.bias", "embeddings", (h,)),
        ]

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        return self._pre_ln_layer(arch, layer_scale=False)

    def _pre_ln_layer(self, arch: Architecture, layer_scale: bool) -> list[ParameterTensor]:
        """norm, attention, [LayerScale ``lambda1``], norm, MLP, [LayerScale ``lambda1``] (DINOv2's with ``layer_scale``)."""
        names, h, i = self.names, arch.hidden_size, arch.intermediate_size
        scale1 = [ParameterTensor(f"{names.layer_scale1}.lambda1", "attention", (h,))] if layer_scale else []
        scale2 = [ParameterTensor(f"{names.layer_scale2}.lambda1", "mlp", (h,))] if layer_scale else []
        return (
            blocks.norm(names.input_norm, arch, h)
            + blocks.attention(arch, names)
            + scale1
            + blocks.norm(names.post_attention_norm, arch, h)
            + blocks.dense_mlp(arch, names, names.mlp, i)
            + scale2
        )

    def head(self, arch: Architecture) -> list[ParameterTensor]:
        return blocks.norm(self.names.final_norm, arch, arch.hidden_size) + self.classifier(arch, arch.hidden_size)

    def classifier(self, arch: Architecture, in_features: int) -> list[ParameterTensor]:
        return blocks.linear(self.names.classifier, "lm_head", in_features, arch.num_labels, True)

    def quantized_by_bitsandbytes(self, tensor: ParameterTensor) -> bool:
        return tensor.linear_features is not None and tensor.group != "lm_head"

    def buffer_bytes(self, arch: Architecture) -> int:
        """Non-parameter tensors before the allocator's rounding: CLIP's and SigLIP's int64 ``position_ids``."""
        return arch.max_position_embeddings * 8 if self.position_ids_buffer else 0

    # ------------------------------------------------------------------ the tape
    def program(self) -> type[LayerProgram]:
        from ..vision.encoders import VisionEncoderProgram

        return VisionEncoderProgram


def _image_fields(fields: ConfigFields, defaults: Mapping[str, Any]) -> tuple[int, int, int]:
    image = fields.integer("image_size", defaults["image_size"])
    patch = fields.integer("patch_size", defaults["patch_size"])
    if patch > image:
        raise fields.fail("patch_size", f"patch_size ({patch}) cannot exceed image_size ({image})")
    return image, patch, fields.integer("num_channels", defaults.get("num_channels", 3))


def _common(fields: ConfigFields, defaults: Mapping[str, Any], *, intermediate: int, act: str) -> dict[str, Any]:
    heads = fields.integer("num_attention_heads", defaults["num_attention_heads"])
    hidden = fields.integer("hidden_size", defaults["hidden_size"])
    if hidden % heads:
        raise fields.fail("hidden_size", f"hidden_size ({hidden}) must be a multiple of num_attention_heads ({heads})")
    return {
        "model_type": fields.string("model_type"),
        "vocab_size": 1,
        "hidden_size": hidden,
        "num_hidden_layers": fields.layers(defaults["num_hidden_layers"]),
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "intermediate_size": intermediate,
        "hidden_act": act,
        "mlp": "plain",
        "norm": "layernorm",
        "attention_output_bias": True,
        "mlp_bias": True,
        "position_embedding": "learned",
        "bidirectional": True,
        "tie_word_embeddings": False,
        "task": "image_classification",
        "num_labels": _num_labels(fields),
    }


def _num_labels(fields: ConfigFields) -> int:
    if fields.config.get("num_labels") is not None:
        return fields.integer("num_labels", 2)
    id2label = fields.mapping("id2label")
    return len(id2label) if id2label else 2


def _vit_attention_fields(fields: ConfigFields) -> dict[str, Any]:
    """ViTConfig's and Dinov2Config's ``qkv_bias`` and dropouts (``attention_probs_dropout_prob`` on the
    attention probabilities, ``hidden_dropout_prob`` after the embeddings and each sub-block)."""
    return dict(
        attention_qkv_bias=fields.boolean("qkv_bias", True),
        attention_dropout=fields.probability("attention_probs_dropout_prob", 0.0),
        residual_dropout=fields.probability("hidden_dropout_prob", 0.0),
        embedding_dropout=fields.probability("hidden_dropout_prob", 0.0),
    )


# ---------------------------------------------------------------------------- ViT

VIT_DEFAULTS = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                    image_size=224, patch_size=16, num_channels=3)
"""ViTConfig's defaults (those of google/vit-base-patch16-224)."""


class Vit(VisionEncoderFamily):
    """``ViTForImageClassification`` (transformers/models/vit): the [CLS] token after the last LayerNorm."""

    model_type = "vit"

    def read_config(self, fields: ConfigFields) -> Architecture:
        d = VIT_DEFAULTS
        image, patch, channels = _image_fields(fields, d)
        common = _common(fields, d, intermediate=fields.integer("intermediate_size", d["intermediate_size"]),
                         act=fields.activation("hidden_act", "gelu"))
        return Architecture(
            **common,
            **_vit_attention_fields(fields),
            max_position_embeddings=(image // patch) ** 2 + 1,
            image_size=image, patch_size=patch, num_channels=channels, class_tokens=1,
        )


# ---------------------------------------------------------------------------- DINOv2

DINOV2_DEFAULTS = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, image_size=224, patch_size=14,
                       num_channels=3)
"""Dinov2Config's defaults."""


class Dinov2(VisionEncoderFamily):
    """``Dinov2ForImageClassification`` (transformers/models/dinov2): LayerScale on each sub-block, the
    classifier over ``cat([CLS], mean(patches))``."""

    model_type = "dinov2"
    names = DINOV2_NAMES
    pooling = "cls_and_mean_patches"

    def embedding(self, arch: Architecture) -> list[ParameterTensor]:
        tensors = super().embedding(arch)
        if arch.mask_token:  # use_mask_token: a (1, h) parameter that only masked image modelling reads
            tensors.insert(1, ParameterTensor("embeddings.mask_token", UNUSED_GROUP, (1, arch.hidden_size)))
        return tensors

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        return self._pre_ln_layer(arch, layer_scale=True)

    def head(self, arch: Architecture) -> list[ParameterTensor]:
        return blocks.norm(self.names.final_norm, arch, arch.hidden_size) + self.classifier(arch, 2 * arch.hidden_size)

    def read_config(self, fields: ConfigFields) -> Architecture:
        return self._read(fields, DINOV2_DEFAULTS, mask_token=fields.boolean("use_mask_token", True))

    def _read(self, fields: ConfigFields, d: Mapping[str, Any], mask_token: bool) -> Architecture:
        image, patch, channels = _image_fields(fields, d)
        hidden = fields.integer("hidden_size", d["hidden_size"])
        ratio = fields.number("mlp_ratio", 4, minimum=0.0, maximum=64.0)
        swiglu = fields.boolean("use_swiglu_ffn", False)
        width = int(hidden * ratio)
        if swiglu:  # Dinov2SwiGLUFFN: two thirds of the MLP width, rounded up to a multiple of 8
            width = (int(width * 2 / 3) + 7) // 8 * 8
        if width < 1:
            raise fields.fail("mlp_ratio", f"hidden_size × mlp_ratio must be at least 1, got {ratio}")
        common = _common(fields, d, intermediate=width, act="silu" if swiglu else fields.activation("hidden_act", "gelu"))
        common["mlp"] = "gated" if swiglu else "plain"
        crop = min(DINOV2_PROCESSOR_CROP_PX, image) // patch * patch
        return Architecture(
            **common,
            **_vit_attention_fields(fields),
            max_position_embeddings=(image // patch) ** 2 + 1,
            image_size=crop if crop >= patch else image, patch_size=patch, num_channels=channels, class_tokens=1,
            layer_scale=True,
            mask_token=mask_token,
        )


DINOV2_REGISTERS_DEFAULTS = dict(DINOV2_DEFAULTS, patch_size=16)
"""Dinov2WithRegistersConfig's defaults (patch 16, 4 registers)."""


class Dinov2WithRegisters(Dinov2):
    """``Dinov2WithRegistersForImageClassification`` (transformers/models/dinov2_with_registers): DINOv2 with
    ``num_register_tokens`` learned tokens concatenated after [CLS] (after the positions are added: a second
    ``torch.cat``); the classifier reads [CLS] and the mean of the patch tokens (registers left out). The
    checkpoints always carry the mask token."""

    model_type = "dinov2_with_registers"

    def embedding(self, arch: Architecture) -> list[ParameterTensor]:
        registers = arch.class_tokens - 1
        return super().embedding(arch) + [ParameterTensor("embeddings.register_tokens", "embeddings", (1, registers, arch.hidden_size))]

    def read_config(self, fields: ConfigFields) -> Architecture:
        registers = fields.integer("num_register_tokens", 4, minimum=0, maximum=1024)
        arch = self._read(fields, DINOV2_REGISTERS_DEFAULTS, mask_token=True)
        return arch.model_copy(update={"class_tokens": 1 + registers})


# ---------------------------------------------------------------------------- CLIP and SigLIP vision towers


class _TowerFamily(VisionEncoderFamily):
    """A CLIP or SigLIP vision tower read through the VLM readers' ``_clip_like`` (``vision_model.`` prefix)."""

    names = CLIP_NAMES
    position_ids_buffer = True
    tower_type = "clip_vision_model"
    class_token = True
    pre_norm = True
    patch_bias = False
    pooling_head = False
    vision_config_key: Optional[str] = None
    """The dual encoder's configs (``clip``, ``siglip``) keep the tower under this key."""

    def _tower(self, arch: Architecture):
        from ..vision.readers import _clip_like

        fields = ConfigFields({"hidden_size": arch.hidden_size, "intermediate_size": arch.intermediate_size,
                               "num_hidden_layers": arch.num_hidden_layers,
                               "num_attention_heads": arch.num_attention_heads, "image_size": arch.image_size,
                               "patch_size": arch.patch_size, "num_channels": arch.num_channels})
        return _clip_like(fields, self.tower_type, class_token=self.class_token, pre_norm=self.pre_norm,
                          head=arch.pooling_head,
                          patch_bias=self.patch_bias)

    def embedding(self, arch: Architecture) -> list[ParameterTensor]:
        _, prelude, _, _ = self._tower(arch)
        return [t._replace(name=f"vision_model.{t.name}", group="norms" if "layrnorm" in t.name else "embeddings")
                for t in prelude]

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        _, _, layer, _ = self._tower(arch)
        return _regrouped(layer, self.names)

    def head(self, arch: Architecture) -> list[ParameterTensor]:
        _, _, _, postlude = self._tower(arch)
        tensors = []
        for t in postlude:
            used = t.name.startswith("post_layernorm") and self.final_norm_on_tokens
            group = ("norms" if t.name.startswith("post_layernorm") else "lm_head") if used else UNUSED_GROUP
            tensors.append(t._replace(name=f"vision_model.{t.name}", group=group))
        if arch.task == "contrastive" and arch.text_tower is not None:  # CLIPModel / SiglipModel (text_tower.py)
            from ..text_tower import contrastive_tensors, text_tower_tensors

            tensors = [t._replace(group="norms" if "norm" in t.name else "lm_head") if t.group == UNUSED_GROUP else t
                       for t in tensors]  # CLIP's post_layernorm of [CLS], SigLIP's pooling head: read by the loss
            return tensors + text_tower_tensors(arch.text_tower) + contrastive_tensors(arch.text_tower, arch.hidden_size)
        return tensors + self.classifier(arch, arch.hidden_size)

    def buffer_bytes(self, arch: Architecture) -> int:
        """The vision tower's int64 ``position_ids``, and the text tower's under the contrastive task."""
        text = arch.text_tower if arch.task == "contrastive" else None
        return arch.max_position_embeddings * 8 + (text.max_position_embeddings * 8 if text is not None else 0)

    def read_config(self, fields: ConfigFields) -> Architecture:
        from ..vision.readers import TOWER_DEFAULTS

        model_type = fields.string("model_type")
        text_tower, top = None, fields
        if self.vision_config_key is not None:
            from ..text_tower import read_text_tower

            text_tower = read_text_tower(model_type, fields)
            vision = fields.mapping(self.vision_config_key) or {}
            labels = {k: fields.config[k] for k in ("num_labels", "id2label") if k in fields.config}
            fields = ConfigFields({**vision, **labels, "model_type": model_type}, fields.path(self.vision_config_key))
        d = TOWER_DEFAULTS[self.tower_type]
        image, patch, channels = _image_fields(fields, d)
        common = _common(fields, d, intermediate=fields.integer("intermediate_size", d["intermediate_size"]),
                         act=fields.activation("hidden_act", d["hidden_act"]))
        common["model_type"] = model_type
        use_head = fields.boolean("vision_use_head", True) if self.pooling_head else False
        return Architecture(
            **common,
            attention_qkv_bias=True,
            attention_dropout=fields.probability("attention_dropout", 0.0),
            max_position_embeddings=(image // patch) ** 2 + int(self.class_token),
            image_size=image, patch_size=patch, num_channels=channels, class_tokens=int(self.class_token),
            pooling_head=use_head,
            text_tower=text_tower,
        )


class ClipVision(_TowerFamily):
    """``CLIPForImageClassification`` (transformers/models/clip): pre_layrnorm, quick_gelu, the mean patch."""

    model_type = "clip_vision_model"
    pooling = "mean_patches"
    final_norm_on_tokens = False


class Clip(ClipVision):
    """A ``clip`` dual-encoder config: ``CLIPForImageClassification`` builds only its vision tower; the
    ``contrastive`` task (``CLIPModel``) adds the text tower and projections (``text_tower.py``)."""

    model_type = "clip"
    vision_config_key = "vision_config"
    tasks = ("image_classification", "contrastive")


class SiglipVision(_TowerFamily):
    """``SiglipForImageClassification`` (transformers/models/siglip): no [CLS], post_layernorm over every token,
    the mean token."""

    model_type = "siglip_vision_model"
    names = SIGLIP_NAMES
    tower_type = "siglip_vision_model"
    class_token = False
    pre_norm = False
    patch_bias = True
    pooling_head = True
    pooling = "mean"


class Siglip(SiglipVision):
    """A ``siglip`` dual-encoder config: ``SiglipForImageClassification`` builds only its vision tower; the
    ``contrastive`` task (``SiglipModel``) adds the text tower, its head, logit_scale and logit_bias."""

    model_type = "siglip"
    vision_config_key = "vision_config"
    tasks = ("image_classification", "contrastive")


VISION_ENCODER_FAMILIES = (Vit, Dinov2, Dinov2WithRegisters, ClipVision, Clip, SiglipVision, Siglip)

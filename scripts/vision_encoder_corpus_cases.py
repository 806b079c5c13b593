"""Measured corpus cases of the vision encoders on their own (``models/vision_encoders.py``): image classification.

Small ViT, DINOv2, CLIP-vision and SigLIP-vision configs run for real on the CPU (fp32 and AMP bf16; fused SDPA,
eager; full checkpointing), ViT at two image sizes (the sequence grows with the square of the side); the
published google/vit-base-patch16-224 and facebook/dinov2-small run on fake tensors. Appended to ``CASES`` by
scripts/corpus_cases.py.
"""

from __future__ import annotations

from typing import Any

TOWER_COMMON = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
VIT_SMALL = {"model_type": "vit", **TOWER_COMMON, "intermediate_size": 512, "patch_size": 16}
DINOV2_SMALL = {"model_type": "dinov2", **TOWER_COMMON, "image_size": 98, "patch_size": 14}
DINOV2_REGISTERS_SMALL = {"model_type": "dinov2_with_registers", **TOWER_COMMON, "image_size": 96, "patch_size": 16,
                          "num_register_tokens": 4}
CLIP_VISION_SMALL = {"model_type": "clip_vision_model", **TOWER_COMMON, "intermediate_size": 512, "image_size": 96,
                     "patch_size": 16}
SIGLIP_VISION_SMALL = {"model_type": "siglip_vision_model", **TOWER_COMMON, "intermediate_size": 512,
                       "image_size": 96, "patch_size": 16}


def vision_case(
    case_id: str,
    model: Any,
    *,
    batch: int,
    precision: str = "fp32",
    attention: str = "sdpa",
    checkpointing: str = "none",
    num_labels: int = 10,
    fake: bool = False,
    description: str = "",
    sequence_length: int = 0,
) -> dict[str, Any]:
    model_spec = {"preset": model} if isinstance(model, str) else {"hf_config": dict(model)}
    task = {"kind": "contrastive"} if sequence_length else {"kind": "image_classification", "num_labels": num_labels}
    setup = {
        "model": model_spec,
        "task": task,
        "micro_batch_size": batch,
        "precision": precision,
        "optimizer": {"name": "adamw"},
        "activation_checkpointing": checkpointing,
        "attention": attention,
        "runtime": {"device": "cpu"},
    }
    if sequence_length:  # the contrastive task (CLIPModel / SiglipModel): the text's length
        setup["sequence_length"] = sequence_length
    return {"id": case_id, "description": description, "fake": fake, "setup": setup}


TEXT_SMALL = {"vocab_size": 1000, "hidden_size": 96, "intermediate_size": 384, "num_hidden_layers": 2,
              "num_attention_heads": 4}
CLIP_SMALL = {"model_type": "clip", "projection_dim": 64,
              "vision_config": {k: v for k, v in CLIP_VISION_SMALL.items() if k != "model_type"},
              "text_config": {**TEXT_SMALL, "max_position_embeddings": 77}}
SIGLIP_SMALL = {"model_type": "siglip", "vision_config": {k: v for k, v in SIGLIP_VISION_SMALL.items() if k != "model_type"},
                "text_config": {**TEXT_SMALL, "max_position_embeddings": 64, "projection_size": 128}}

# fmt: off
VISION_ENCODER_CASES: list[dict[str, Any]] = [
    vision_case("vit-small-fp32-imgcls-sdpa-96px-b8", {**VIT_SMALL, "image_size": 96}, batch=8,
                description="ViTForImageClassification at 96 px: 36 patches + [CLS]."),
    vision_case("vit-small-fp32-imgcls-sdpa-192px-b8", {**VIT_SMALL, "image_size": 192}, batch=8,
                description="The same ViT at 192 px: 144 patches + [CLS] (4x the patches)."),
    vision_case("vit-small-ampbf16-imgcls-eager-160px-b8", {**VIT_SMALL, "image_size": 160}, batch=8,
                precision="amp-bf16", attention="eager",
                description="CPU autocast: the convolution saves the bf16 pixel values and its bf16 weight copy."),
    vision_case("vit-small-fp32-imgcls-sdpa-ckpt-160px-b8", {**VIT_SMALL, "image_size": 160}, batch=8,
                checkpointing="full"),
    vision_case("dinov2-small-fp32-imgcls-sdpa-98px-b8", DINOV2_SMALL, batch=8,
                description="Dinov2ForImageClassification: LayerScale, [CLS] + mean patch, unused mask_token."),
    vision_case("dinov2reg-small-fp32-imgcls-sdpa-96px-b8", DINOV2_REGISTERS_SMALL, batch=8,
                description="DINOv2 with 4 register tokens after [CLS]; the classifier leaves them out."),
    vision_case("clipvision-small-fp32-imgcls-sdpa-96px-b8", CLIP_VISION_SMALL, batch=8,
                description="CLIPForImageClassification: pre_layrnorm, quick_gelu, mean patch."),
    vision_case("siglipvision-small-fp32-imgcls-sdpa-96px-b8", SIGLIP_VISION_SMALL, batch=8,
                description="SiglipForImageClassification: no [CLS], mean token; the pooling head is unused."),
    # ---------------------------------------------------------------- contrastive dual encoders (CLIPModel, SiglipModel)
    vision_case("clip-small-fp32-contrastive-sdpa-96px-s32-b4", CLIP_SMALL, batch=4, sequence_length=32,
                description="CLIPModel(return_loss=True): both towers, projections, 4x4 logits, two cross-entropies."),
    vision_case("clip-small-fp32-contrastive-sdpa-96px-s32-b32", CLIP_SMALL, batch=32, sequence_length=32,
                description="The same CLIP with 32 pairs: 32x32 logits."),
    vision_case("clip-small-fp32-contrastive-sdpa-96px-s32-b32-fake", CLIP_SMALL, batch=32, sequence_length=32,
                fake=True),
    vision_case("siglip-small-fp32-contrastive-sdpa-96px-s32-b16", SIGLIP_SMALL, batch=16, sequence_length=32,
                description="SiglipModel(return_loss=True): attention-pooling head, text head, sigmoid loss over 16x16 pairs."),
    # ---------------------------------------------------------------- published models (fake tensors)
    vision_case("vit-base-fp32-imgcls-224px-b32-fake", "vit-base-patch16-224", batch=32, num_labels=1000, fake=True,
                description="google/vit-base-patch16-224 fine-tuned on ImageNet-1k labels, fp32 AdamW."),
    vision_case("dinov2-small-ampbf16-imgcls-224px-b32-fake", "dinov2-small", batch=32, precision="amp-bf16",
                fake=True),
]
# fmt: on

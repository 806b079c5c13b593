"""Vision-language models: parameter counts vs transformers, visual token counts, setup errors, the step."""

import pytest

import trainmem
from trainmem.catalogs import presets
from trainmem.errors import FieldError
from trainmem.hf_config import architecture_from_hf_config
from trainmem.inventory import build_inventory
from trainmem.vision.inputs import ImageInputs
from trainmem.vision.readers import read_vision_stack
from trainmem.vision.tokens import per_image, per_sample, smart_resize

VLM_PRESETS = sorted(name for name, preset in presets().items() if read_vision_stack(preset.config) is not None)

# Whole-model counts: transformers 5.24 AutoModelForImageTextToText on the meta device (re-derived by the
# torch-marked test below); they match the model cards (7.06B, 8.29B, 8.77B, 4.3B, 27.4B, 8.46B, 2.25B, 109B, 24B).
PUBLISHED_COUNTS = {
    "llava-1.5-7b": 7_063_427_072,
    "qwen2.5-vl-7b": 8_292_166_656,
    "qwen3-vl-8b": 8_767_123_696,
    "gemma-3-4b-vision": 4_300_079_472,
    "gemma-3-27b-vision": 27_432_406_640,
    "idefics3-8b": 8_462_086_384,
    "smolvlm-instruct": 2_246_272_880,
    "llama-4-scout-vision": 108_641_793_536,
    "mistral-small-3.1-24b": 24_011_361_280,
}


def _count(name):
    config = presets()[name].config
    return build_inventory(architecture_from_hf_config(config)).num_parameters + read_vision_stack(config).numel


def test_every_vlm_preset_has_a_count():
    assert set(VLM_PRESETS) == set(PUBLISHED_COUNTS)


@pytest.mark.parametrize("name", VLM_PRESETS)
def test_count_matches_transformers(name):
    assert _count(name) == PUBLISHED_COUNTS[name]
    assert trainmem.estimate({"model": name}, suggestions=False).num_parameters == PUBLISHED_COUNTS[name]


@pytest.mark.torch
@pytest.mark.parametrize("name", VLM_PRESETS)
def test_parts_match_transformers_on_meta_device(name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = dict(presets()[name].config)
    stack = read_vision_stack(config)
    model_type = config.pop("model_type")
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(transformers.AutoConfig.for_model(model_type, **config))
    tower = projector = language = 0
    for parameter_name, parameter in model.named_parameters():
        if "language_model" in parameter_name or "text_model" in parameter_name or parameter_name.startswith("lm_head"):
            language += parameter.numel()
        elif any(mark in parameter_name for mark in ("multi_modal_projector", "connector", "merger")):
            projector += parameter.numel()
        else:
            tower += parameter.numel()
    assert (tower, projector) == (stack.tower_numel, stack.projector_numel)
    assert language == build_inventory(architecture_from_hf_config(presets()[name].config)).num_parameters


def test_qwen_smart_resize_and_tokens():
    assert smart_resize(1200, 1200, 28, 56 * 56, 28 * 28 * 1280) == (980, 980)
    stack = read_vision_stack(presets()["qwen2.5-vl-7b"].config)
    counts = per_image(stack, ImageInputs(image_height=448, image_width=448))
    assert (counts.tower_patches, counts.tokens) == (1024, 256)
    capped = per_image(stack, ImageInputs(image_height=1200, image_width=1200, max_pixels=512 * 28 * 28))
    assert capped.tokens <= 512


def test_fixed_size_towers():
    llava = read_vision_stack(presets()["llava-1.5-7b"].config)
    counts = per_image(llava, ImageInputs(image_height=1000, image_width=700))
    assert (counts.tower_patches, counts.tokens) == (577, 576)
    gemma = read_vision_stack(presets()["gemma-3-4b-vision"].config)
    assert per_image(gemma, ImageInputs()).tokens == 256


def test_qwen_video_frames_use_temporal_patches():
    stack = read_vision_stack(presets()["qwen2.5-vl-7b"].config)
    images = ImageInputs(images_per_sample=0, videos_per_sample=1, video_frames=16, image_height=224, image_width=224)
    # frames are scaled up to the video processor's min_pixels (128·28·28): 336 × 336 px, 24 × 24 patches
    assert per_sample(stack, images).tower_patches == 8 * 24 * 24


def test_images_make_the_sequence_longer_and_the_peak_higher():
    base = {"model": "llava-1.5-7b", "sequence_length": 512, "finetuning": {"method": "lora", "projector": "trained"}}
    one = trainmem.estimate({**base, "images": {"images_per_sample": 1}}, suggestions=False)
    four = trainmem.estimate({**base, "images": {"images_per_sample": 4}}, suggestions=False)
    assert four.peak_allocated_bytes > one.peak_allocated_bytes
    assert one.num_trainable_parameters > 20_000_000  # the projector trains


def test_trained_tower_costs_more_than_frozen():
    base = {"model": "qwen2.5-vl-7b", "images": {"image_height": 896, "image_width": 896}, "sequence_length": 256}
    frozen = trainmem.estimate({**base, "finetuning": {"vision_tower": "frozen"}}, suggestions=False)
    trained = trainmem.estimate({**base, "finetuning": {"vision_tower": "trained"}}, suggestions=False)
    assert trained.peak_allocated_bytes > frozen.peak_allocated_bytes
    assert trained.num_trainable_parameters - frozen.num_trainable_parameters == read_vision_stack(
        presets()["qwen2.5-vl-7b"].config
    ).tower_numel


@pytest.mark.parametrize(
    "setup, field, message",
    [
        ({"model": "llama-2-7b", "images": {"images_per_sample": 1}}, "images", "text-only model"),
        ({"model": "llama-2-7b", "finetuning": {"vision_tower": "trained"}}, "finetuning.vision_tower", "no vision tower"),
        ({"model": "qwen2.5-vl-7b", "images": {"image_height": 10, "image_width": 4000}}, "images.image_height",
         "aspect ratio"),
        ({"model": "qwen2.5-vl-7b", "images": {"min_pixels": 10_000, "max_pixels": 100}}, "images.min_pixels",
         "cannot exceed max_pixels"),
        ({"model": "llava-1.5-7b", "images": {"videos_per_sample": 1, "video_frames": 8}}, "images.videos_per_sample",
         "no video input"),
        ({"model": "llava-1.5-7b", "parallelism": {"num_gpus": 2, "tensor_parallel_size": 2}},
         "parallelism.tensor_parallel_size", "without tensor, pipeline or context parallelism"),
    ],
)
def test_bad_vision_input_is_one_line_naming_the_field(setup, field, message):
    with pytest.raises(Exception) as raised:
        trainmem.Setup.model_validate(setup)
    assert message in str(raised.value)
    cause = raised.value.errors()[0].get("ctx", {}).get("error")
    assert isinstance(cause, FieldError) and cause.field == field


def test_image_side_bound():
    with pytest.raises(Exception, match="image_height"):
        trainmem.Setup.model_validate({"model": "qwen2.5-vl-7b", "images": {"image_height": 10**6}})

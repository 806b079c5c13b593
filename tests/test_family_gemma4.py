"""Gemma 4 (``gemma4_text``, and the ``gemma4`` wrapper's language model): parameter counts against
transformers 5.24 on the meta device, the config reader's refusals, and the layer kinds.

The text configs in tests/data/gemma4/ are the ``text_config`` of the published checkpoints, transcribed
field by field from public copies of their config.json (the Hub is not reachable from this project):

* google/gemma-4-E2B-it: the E2B text_config as quoted in gemma4 ports' tests (e.g. VincentGourbin/
  gemma-4-swift-mlx ConfigurationTests "E2B Config", layer_types 4 sliding + 1 full, 35 layers, 20 KV-shared
  layers, PLE 256, double-wide MLP);
* google/gemma-4-E4B-it: "Transcribed from google/gemma-4-E4B-it-qat-w4a16-ct's config.json" in a public
  loader's test (42 layers, 18 KV-shared, PLE 256, full attention every 6th layer);
* google/gemma-4-26B-A4B-it: the 26B-A4B text_config quoted by several ports (hidden 2816, 30 layers, 16 heads,
  8 KV heads, 2 global KV heads, k = v, 128 experts top-8, expert width 704, MLP 2112, window 1024);
* google/gemma-4-31B-it: a locked copy of the 31B text_config (hidden 5376, 60 layers, 32 heads, 16 KV heads, 4
  global KV heads, k = v, MLP 21504, window 1024).

Their counts agree with the model cards once the towers are added (E2B "5.1B with embeddings": 4.63B text +
the vision and audio towers; E4B "8B": 7.46B + towers; 26B-A4B 25.2B; 31B 30.7B).
"""

import json
from pathlib import Path

import pytest

from trainmem.errors import FieldError
from trainmem.inventory import build_inventory
from trainmem.models import architecture_from_hf_config

DATA = Path(__file__).parent / "data" / "gemma4"

TEXT_COUNTS = {
    "gemma-4-e2b": 4_628_569_344,
    "gemma-4-e4b": 7_463_013_376,
    "gemma-4-26b-a4b": 25_233_141_760,
    "gemma-4-31b": 30_697_345_280,
}
"""``sum(p.numel() for p in Gemma4ForCausalLM(config).parameters())`` on the meta device, transformers 5.24."""

TINY = {
    "model_type": "gemma4_text", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 6,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "global_head_dim": 32,
    "layer_types": ["sliding_attention", "full_attention"] * 3,
}
TINY_CONFIGS = {
    "ple-shared-double": {**TINY, "num_kv_shared_layers": 2, "hidden_size_per_layer_input": 8,
                          "vocab_size_per_layer_input": 100, "use_double_wide_mlp": True},
    "k-eq-v-moe": {**TINY, "attention_k_eq_v": True, "num_global_key_value_heads": 1, "hidden_size_per_layer_input": 0,
                   "enable_moe_block": True, "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 24},
    "all-of-it": {**TINY, "attention_k_eq_v": True, "num_global_key_value_heads": 1, "num_kv_shared_layers": 2,
                  "hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": 128, "use_double_wide_mlp": True,
                  "enable_moe_block": True, "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 24,
                  "attention_bias": True, "tie_word_embeddings": False},
    "all-global": {**TINY, "layer_types": ["full_attention"] * 6, "hidden_size_per_layer_input": 0,
                   "attention_k_eq_v": True, "num_global_key_value_heads": 1},
    "default-pattern": {k: v for k, v in TINY.items() if k != "layer_types"} | {"hidden_size_per_layer_input": 4,
                                                                                 "vocab_size_per_layer_input": 64},
}


def text_config(name: str) -> dict:
    return json.loads((DATA / f"{name}-text_config.json").read_text())


def count(config: dict) -> int:
    return build_inventory(architecture_from_hf_config(config)).num_parameters


def _transformers_count(config: dict) -> int:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    fields = {k: v for k, v in config.items() if k != "model_type"}
    hf_config = transformers.Gemma4TextConfig(**fields)
    with torch.device("meta"):
        model = transformers.Gemma4ForCausalLM(hf_config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(TEXT_COUNTS))
def test_published_text_configs_count_as_transformers_builds_them(name):
    assert count(text_config(name)) == TEXT_COUNTS[name]


@pytest.mark.parametrize("name", sorted(TEXT_COUNTS))
def test_presets_are_the_published_text_configs(name):
    from trainmem.catalogs import presets

    assert count(presets()[name].config) == TEXT_COUNTS[name]


@pytest.mark.parametrize("name", sorted(TEXT_COUNTS))
def test_the_wrapper_reads_its_language_model(name):
    wrapper = {"model_type": "gemma4", "text_config": text_config(name), "vision_config": {"model_type": "gemma4_vision"}}
    arch = architecture_from_hf_config(wrapper)
    assert arch.model_type == "gemma4_text"
    assert build_inventory(arch).num_parameters == TEXT_COUNTS[name]
    assert arch.not_counted == ()  # trainmem.vision.gemma4 counts the towers


TINY_TEXT = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16, "global_head_dim": 32, "hidden_size_per_layer_input": 8,
             "vocab_size_per_layer_input": 128}
TINY_VISION = {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 2,
               "num_key_value_heads": 2, "head_dim": 16, "position_embedding_size": 64}
TINY_AUDIO = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "output_proj_dims": 40,
              "subsampling_conv_channels": [8, 4]}
TOWERS = {"vision-and-audio": (TINY_VISION, TINY_AUDIO), "vision": (TINY_VISION, None), "audio": (None, TINY_AUDIO),
          "default-towers": ({}, {}), "none": (None, None)}


def wrapper_config(vision, audio) -> dict:
    config = {"model_type": "gemma4", "text_config": {"model_type": "gemma4_text", **TINY_TEXT}}
    if vision is not None:
        config["vision_config"] = {"model_type": "gemma4_vision", **vision}
    if audio is not None:
        config["audio_config"] = {"model_type": "gemma4_audio", **audio}
    return config


def _plan(config: dict, **setup):
    from trainmem.plan import Plan
    from trainmem.setup import Setup

    return Plan(Setup.model_validate({"model": {"hf_config": config}, "micro_batch_size": 1, "sequence_length": 64, **setup}))


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(TOWERS))
def test_the_wrapper_counts_its_towers_as_transformers_builds_them(name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    vision, audio = TOWERS[name]
    kwargs = {"text_config": TINY_TEXT}
    if vision is not None:
        kwargs["vision_config"] = vision
    if audio is not None:
        kwargs["audio_config"] = audio
    with torch.device("meta"):
        model = transformers.Gemma4ForConditionalGeneration(transformers.Gemma4Config(**kwargs))
    plan = _plan(wrapper_config(vision, audio))
    assert plan.num_parameters == sum(p.numel() for p in model.parameters())
    text = build_inventory(architecture_from_hf_config(wrapper_config(None, None))).num_parameters
    assert plan.num_trainable_parameters == text  # a text-only step: the towers never run, get no gradient


def test_the_e2b_wrapper_with_its_default_towers_is_the_cards_5_1b():
    config = {"model_type": "gemma4", "text_config": text_config("gemma-4-e2b"), "vision_config": {}, "audio_config": {}}
    assert _plan(config).num_parameters == 5_104_297_504


def test_images_through_the_gemma4_tower_are_refused_naming_the_field():
    with pytest.raises(ValueError, match="images: the gemma4 vision tower's forward is not modelled|vision tower's forward"):
        _plan(wrapper_config(TINY_VISION, None), images={"images_per_sample": 1, "image_height": 224, "image_width": 224})


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(TEXT_COUNTS))
def test_published_counts_are_transformers_counts(name):
    assert _transformers_count(text_config(name)) == TEXT_COUNTS[name]


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(TINY_CONFIGS))
def test_tiny_configs_count_as_transformers_builds_them(name):
    assert count(TINY_CONFIGS[name]) == _transformers_count(TINY_CONFIGS[name])


def test_layer_kinds_follow_per_layer_config_and_kv_sharing():
    arch = architecture_from_hf_config(TINY_CONFIGS["all-of-it"])
    kinds = {kind.indices: kind.architecture for kind in arch.layer_kinds()}
    assert sorted(kinds) == [(0, 2), (1, 3), (4,), (5,)]
    sliding, full, shared_sliding, shared_full = kinds[(0, 2)], kinds[(1, 3)], kinds[(4,)], kinds[(5,)]
    assert (sliding.resolved_head_dim, sliding.kv_heads) == (16, 2)
    assert (full.resolved_head_dim, full.kv_heads) == (32, 1)  # global_head_dim, num_global_key_value_heads (k = v)
    assert shared_sliding.gemma4.layer_kv_shared and shared_sliding.intermediate_size == 192  # double-wide MLP
    assert shared_full.gemma4.layer_global and shared_full.gemma4.layer_kv_shared
    assert arch.gemma4.kv_source_layer(4) == 2 and arch.gemma4.kv_source_layer(5) == 3


def test_the_last_layer_is_forced_global_as_transformers_does():
    arch = architecture_from_hf_config({**TINY, "layer_types": ["sliding_attention"] * 6})
    assert arch.window_layers() == (0, 1, 2, 3, 4)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"enable_moe_block": True, "num_experts": 4, "top_k_experts": 2}, "moe_intermediate_size"),
        ({"enable_moe_block": True, "moe_intermediate_size": 8, "top_k_experts": 2}, "num_experts"),
        ({"num_kv_shared_layers": 6}, "num_kv_shared_layers"),
        ({"num_kv_shared_layers": 7}, "num_kv_shared_layers"),
        ({"layer_types": ["sliding_attention"] * 5 + ["full_attention"], "num_kv_shared_layers": 1}, "num_kv_shared_layers"),
        ({"layer_types": ["chunked_attention"] * 6}, "layer_types"),
        ({"use_bidirectional_attention": "text"}, "use_bidirectional_attention"),
        ({"attention_k_eq_v": True, "num_global_key_value_heads": 3}, "num_global_key_value_heads"),
    ],
)
def test_bad_configs_are_refused_naming_the_field(change, field):
    with pytest.raises(FieldError) as error:
        architecture_from_hf_config({**TINY, **change})
    assert error.value.field.endswith(field)


def test_peft_has_no_default_targets_for_the_text_model():
    from trainmem.setup import Setup

    setup = {"model": {"hf_config": TINY_CONFIGS["k-eq-v-moe"]}, "finetuning": {"method": "lora"}}
    with pytest.raises(ValueError, match="PEFT has no default target_modules"):
        Setup.model_validate(setup)


def test_estimate_runs_for_every_preset():
    import trainmem

    for name in TEXT_COUNTS:
        setup = {"model": {"preset": name}, "micro_batch_size": 1, "sequence_length": 512, "precision": "amp-bf16",
                 "finetuning": {"method": "lora", "lora": {"r": 16, "target_modules": "all-linear"}}}
        report = trainmem.estimate(trainmem.Setup.model_validate(setup))
        assert report.peak_allocated_bytes > 0


@pytest.mark.torch
def test_lora_all_linear_on_a_ple_model_trains_what_peft_trains():
    """PEFT's all-linear adapts the model-level per_layer_model_projection too (DecoderFamily.model_level_lora_modules)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    import warnings

    config = TINY_CONFIGS["ple-shared-double"]
    with torch.device("meta"):
        model = transformers.Gemma4ForCausalLM(transformers.Gemma4TextConfig(**{k: v for k, v in config.items() if k != "model_type"}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules="all-linear")).get_nb_trainable_parameters()[0]
    assert _plan(config, finetuning={"method": "lora", "lora": {"r": 8, "target_modules": "all-linear"}}).num_trainable_parameters == expected

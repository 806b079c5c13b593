"""Preset parameter counts: trainmem's inventory against transformers, to the parameter.

The counts in PUBLISHED_COUNTS were obtained by building each model from its config with
transformers 5.24.0 on the meta device (``sum(p.numel() for p in model.parameters())``);
they match the totals on the models' Hugging Face cards (e.g. 6.74B for Llama-2-7b,
46.7B for Mixtral-8x7B). The torch-marked test re-derives them from transformers whenever
it is installed, so these numbers are never taken from trainmem itself.
"""

import copy

import pytest

from trainmem.catalogs import presets
from trainmem.hf_config import architecture_from_hf_config
from trainmem.inventory import build_inventory

PUBLISHED_COUNTS = {
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "tinyllama-1.1b": 1_100_048_384,
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3-8b": 8_030_261_248,
    "llama-3-70b": 70_553_706_496,
    "llama-3.1-405b": 405_853_388_800,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-7b": 7_615_616_512,
    "gemma-2-9b": 9_241_705_984,
    "phi-3-mini": 3_821_079_552,
    "qwen3-30b-a3b": 30_532_122_624,
    "qwen3-235b-a22b": 235_093_634_560,
    "gemma-3-27b": 27_009_346_304,
    "gemma-3-1b": 999_885_952,
    "gemma-4-e2b": 4_628_569_344,  # card: 5.1B with the vision and audio towers (not counted)
    "gemma-4-e4b": 7_463_013_376,  # card: 8B with the vision and audio towers (not counted)
    "gemma-4-26b-a4b": 25_233_141_760,  # card: 25.2B (3.8B active)
    "gemma-4-31b": 30_697_345_280,  # card: 30.7B
    "olmo-2-13b": 13_716_198_400,
    "olmo-2-7b": 7_298_617_344,
    "starcoder2-15b": 15_957_889_024,
    "starcoder2-3b": 3_030_371_328,
    "llama-4-scout": 107_769_861_120,
    "llama-4-maverick": 400_711_848_960,
    "pythia-1.4b": 1_414_647_808,
    "pythia-6.9b": 6_857_302_016,
    "pythia-12b": 11_846_072_320,
    "deepseek-v3": 671_026_404_352,  # card: 671B (+14B of multi-token prediction, not built by transformers)
    "deepseek-v2-lite": 15_706_484_224,  # card: 15.7B
    "deepseek-v3.2": 671_877_929_216,  # card: 685B with the multi-token-prediction layer (not built); +0.85B of indexers over V3
    "gpt-oss-20b": 20_914_757_184,  # card: 21B
    "gpt-oss-120b": 116_829_156_672,  # card: 117B
    "qwen3-next-80b-a3b": 79_674_391_296,  # card: 80B (3B active)
    "qwen3.5-35b-a3b": 34_660_610_688,  # card: 35B with the vision tower (not counted); shapes: Qwen3_5MoeTextConfig defaults (its docstring: "Qwen3.5-35B-A3B style") = THUDM/slime scripts/models/qwen3.5-35B-A3B.sh
    "qwen4-exp": 176_943_899_520,  # transformers 5.24 on the meta device (tests/data/qwen4_exp_config.json); 51.2B of it the layer-2 PLE table
    "command-r": 34_980_831_232,  # card: 35B
    "falcon-7b": 6_921_720_704,  # card: 7B
    "falcon-40b": 41_303_293_952,  # card: 40B
    "phi-3.5-moe": 41_873_153_344,  # card: 41.9B (16x3.8B)
    "granite-4.0-h-tiny": 6_939_037_248,  # card: 7B (1B active)
    "granite-4.0-h-small": 32_207_337_984,  # card: 32B (9B active)
    "granite-4.0-h-1b": 1_461_538_368,  # card: 1.5B
    "nemotron-h-8b": 8_100_852_736,  # card: 8B
    "nemotron-nano-9b-v2": 8_888_227_328,  # card: 9B
    "glm-4.5-air": 106_852_245_504,  # card: 106B (+ one multi-token-prediction layer, not built by transformers)
    "glm-4.6": 352_797_814_784,  # card: 355B with its multi-token-prediction layer (not built by transformers)
    "smollm3-3b": 3_075_098_624,  # card: 3B
    "seed-oss-36b": 36_151_104_512,  # card: 36B
    "exaone-4.0-32b": 32_003_216_384,  # card: 32B
    "apertus-8b": 8_053_338_176,  # card: 8B
    "falcon-h1-0.5b": 521_411_104,  # card: 0.5B
    "falcon-h1-7b": 7_585_513_568,  # card: 7B
    "lfm2-350m": 354_483_968,  # card: 354M
    "lfm2-700m": 742_489_344,  # card: 742M
    "lfm2-1.2b": 1_170_340_608,  # card: 1.17B
    "lfm2-2.6b": 2_569_272_320,  # card: 2.57B
    "glm-4.7-flash": 29_943_390_976,  # card: 30B-A3B (+ one multi-token-prediction layer, not built by transformers)
    "hunyuan-7b": 7_504_568_320,  # card: 7B
    "hunyuan-a13b": 80_393_183_232,  # card: 80B (13B active)
    "minimax-m2": 228_689_748_992,  # card: 230B (10B active; + 3 multi-token-prediction modules, not built)
    "ministral-3-8b": 8_489_553_920,  # card: 8.4B language model (+ 0.4B vision encoder, not counted)
    "mistral-small-4-119b": 118_972_826_624,  # card: 119B (Mistral4Config's defaults; the vision tower not counted)
}

REQUIRED_PRESETS = [
    "gpt2",
    "gpt2-medium",
    "gpt2-large",
    "gpt2-xl",
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3-70b",
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "mistral-7b",
    "mixtral-8x7b",
    "qwen2.5-7b",
    "gemma-2-9b",
    "phi-3-mini",
    "tinyllama-1.1b",
]


def count(name: str) -> int:
    return build_inventory(architecture_from_hf_config(presets()[name].config)).num_parameters


def test_catalog_has_every_required_preset():
    missing = [name for name in REQUIRED_PRESETS if name not in presets()]
    assert not missing


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_count_matches_transformers(name):
    assert count(name) == PUBLISHED_COUNTS[name]


def _decoder_presets() -> list[str]:
    """Presets trained as causal LMs (encoders and their task heads: tests/test_encoders.py)."""
    from trainmem.models import FAMILIES

    return sorted(
        name for name, p in presets().items()
        if not getattr(FAMILIES.get(p.config["model_type"]), "tasks", None)
        and not architecture_from_hf_config(p.config).encoder_layers  # encoder-decoders: tests/test_encoder_decoders.py
    )


@pytest.mark.torch
@pytest.mark.parametrize("name", [n for n in _decoder_presets() if "vision_config" not in presets()[n].config])
def test_count_matches_transformers_on_meta_device(name):  # VLM presets: tests/test_vlm.py
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from trainmem.measure.causal_lm_classes import register_causal_lms

    register_causal_lms()  # Mistral4ForCausalLM is not in AutoModelForCausalLM's mapping
    config = copy.deepcopy(dict(presets()[name].config))  # transformers writes into rope_parameters (Mistral4Config)
    model_type = config.pop("model_type")
    hf_config = transformers.AutoConfig.for_model(model_type, **config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    assert count(name) == sum(p.numel() for p in model.parameters())

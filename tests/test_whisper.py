"""Whisper as an encoder-decoder: ``trainmem.models.whisper``, ``trainmem.encoder_decoder.audio``.

Parameter counts (all and trainable: the encoder's sinusoidal ``embed_positions`` is frozen) are checked
against transformers 5.24's ``WhisperForConditionalGeneration`` on the meta device; PUBLISHED_COUNTS were
obtained that way. The step is checked against the measured corpus cases (tests/test_validation.py); here:
what the fixed encoder length and the conv front end mean, and the one-line errors.
"""

from __future__ import annotations

import pytest

import trainmem
from trainmem.catalogs import presets
from trainmem.cli import main
from trainmem.encoder_decoder.stack import encoder_stack
from trainmem.hf_config import architecture_from_hf_config
from trainmem.plan import Plan
from trainmem.setup import Setup

#: transformers 5.24, meta device, WhisperForConditionalGeneration: (all parameters, requires_grad ones).
PUBLISHED_COUNTS = {
    "whisper-small": (241_734_912, 240_582_912),  # card: 244M
    "whisper-medium": (763_857_920, 762_321_920),  # card: 769M
    "whisper-large-v3": (1_543_490_560, 1_541_570_560),  # card: 1550M
    "whisper-large-v3-turbo": (808_878_080, 806_958_080),  # card: 809M
}

TINY = {"model_type": "whisper", "vocab_size": 1024, "num_mel_bins": 16, "d_model": 64, "encoder_layers": 2,
        "decoder_layers": 3, "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128,
        "decoder_ffn_dim": 128, "max_source_positions": 100, "max_target_positions": 64, "pad_token_id": 1000,
        "decoder_start_token_id": 1001}
UNTIED = {**TINY, "tie_word_embeddings": False}


def plan(model, target: int = 48, source: int = None, **fields) -> Plan:
    if source is None:
        source = presets()[model].config.get("max_source_positions", 1500) if isinstance(model, str) else model["hf_config"]["max_source_positions"]
    return Plan(Setup(model=model, sequence_length=source, target_length=target, **fields))


def _transformers_counts(config: dict) -> tuple[int, int]:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    fields = dict(config)
    hf_config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device("meta"):
        model = transformers.WhisperForConditionalGeneration(hf_config)
    return sum(p.numel() for p in model.parameters()), sum(p.numel() for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_preset_counts(name):
    p = plan(name)
    assert (p.num_parameters, p.num_trainable_parameters) == PUBLISHED_COUNTS[name]


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_preset_counts_match_transformers_on_meta_device(name):
    p = plan(name)
    assert (p.num_parameters, p.num_trainable_parameters) == _transformers_counts(presets()[name].config)


@pytest.mark.torch
@pytest.mark.parametrize("config", [TINY, UNTIED], ids=["tied", "untied"])
def test_small_config_counts_match_transformers(config):
    p = plan({"hf_config": config})
    assert (p.num_parameters, p.num_trainable_parameters) == _transformers_counts(config)


def test_presets_have_hub_ids():
    import json
    from pathlib import Path

    import trainmem as package

    hub = json.loads((Path(package.__file__).parent / "data" / "hub_ids.json").read_text(encoding="utf-8"))["hub_ids"]
    for name in PUBLISHED_COUNTS:
        hf_id = presets()[name].hf_id
        assert hf_id.startswith("openai/whisper-") and hub[hf_id]["preset"] == name


def test_config_reading():
    arch = architecture_from_hf_config(presets()["whisper-large-v3-turbo"].config)
    assert (arch.num_hidden_layers, arch.encoder_layers, arch.num_mel_bins, arch.max_source_positions) == (4, 32, 128, 1500)
    assert arch.max_target_positions == 448 and arch.norm == "layernorm" and arch.tie_word_embeddings
    encoder = encoder_stack(arch)
    by_name = {t.name: t for t in encoder.prelude}
    assert by_name["model.encoder.conv1.weight"].shape == (1280, 128, 3)
    assert by_name["model.encoder.conv2.weight"].shape == (1280, 1280, 3)
    assert by_name["model.encoder.embed_positions.weight"].group == "frozen"
    assert not any(t.name == "self_attn.k_proj.bias" for t in encoder.layer)  # WhisperAttention: k_proj has no bias
    defaults = architecture_from_hf_config({"model_type": "whisper"})  # WhisperConfig's defaults (whisper-tiny's shapes)
    assert (defaults.hidden_size, defaults.encoder_layers, defaults.num_mel_bins, defaults.vocab_size) == (384, 4, 80, 51865)


def test_the_encoder_length_is_fixed_by_the_config():
    """The encoder always runs over max_source_positions: only the target length and the batch move the peak."""
    short, long_ = (trainmem.estimate(Setup(model={"hf_config": TINY}, sequence_length=100, target_length=t)) for t in (16, 64))
    assert long_.peak_allocated_bytes > short.peak_allocated_bytes
    p = plan({"hf_config": TINY}, micro_batch_size=2)
    from trainmem.encoder_decoder import step

    from trainmem.allocator import rounded

    # fp32 input_features (b × mel × 2·S) and decoder_input_ids (b × t int64), each rounded as the allocator does
    assert step.source_ids_bytes(p) == rounded(2 * 16 * 200 * 4, p.device) + rounded(2 * 48 * 8, p.device)


def test_amp_is_cheaper_than_fp32():
    fp32, amp = (trainmem.estimate(Setup(model="whisper-small", sequence_length=1500, target_length=128, precision=precision,
                                         micro_batch_size=4)) for precision in ("fp32", "amp-bf16"))
    assert amp.breakdown.activations < fp32.breakdown.activations


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        (["--preset", "whisper-small", "--seq-len", "512", "--target-len", "64"], "sequence_length"),
        (["--preset", "whisper-small", "--seq-len", "1500", "--target-len", "449"], "target_length"),
        (["--preset", "whisper-small", "--seq-len", "1500", "--target-len", "64", "--lora", "8"], "target_modules"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(arguments, field, capsys):
    assert main(["estimate", *arguments]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("trainmem: error: ") and field in err and "\n" not in err


def test_bad_config_fields_are_one_line():
    with pytest.raises(ValueError, match="must equal decoder_attention_heads"):
        Setup(model={"hf_config": {**TINY, "encoder_attention_heads": 8}}, sequence_length=100, target_length=32)
    with pytest.raises(ValueError, match="LayerDrop"):
        Setup(model={"hf_config": {**TINY, "encoder_layerdrop": 0.1}}, sequence_length=100, target_length=32)


@pytest.mark.torch
def test_lora_trainable_counts_match_peft():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    fields = dict(TINY)
    hf_config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device("meta"):
        model = transformers.WhisperForConditionalGeneration(hf_config)
    model = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
    p = plan({"hf_config": TINY}, finetuning={"method": "lora", "lora": {"r": 8, "target_modules": ["q_proj", "v_proj"]}})
    assert p.num_trainable_parameters == sum(x.numel() for x in model.parameters() if x.requires_grad)
    assert p.num_parameters == sum(x.numel() for x in model.parameters())


def test_left_out_lengths_take_the_encoder_positions_and_the_longest_target():
    setup = Setup(model="whisper-small")
    assert (setup.sequence_length, setup.target_length) == (1500, 448)
    assert Setup.model_validate(setup.model_dump()) == setup

"""Encoder-decoders (T5 v1.0, T5 v1.1 / flan-T5, mT5, BART): ``trainmem.models.t5``, ``models.bart`` and
``trainmem.encoder_decoder``.

Parameter counts are checked against transformers 5.24 on the meta device (``AutoModelForSeq2SeqLM``) for
every preset and for small configs of each layout; PUBLISHED_COUNTS were obtained that way. The layer
program is checked for what cross-attention adds (the K/V of the encoder output, per decoder layer); the
step for how source and target lengths move the peak; bad input (a target length on a decoder-only model
or an encoder, LoRA on T5, a wrong ``feed_forward_proj``) is one line naming the field, exit 2 from the CLI.
"""

from __future__ import annotations

import pytest

import trainmem
from trainmem.catalogs import presets
from trainmem.cli import main
from trainmem.encoder_decoder.stack import encoder_stack
from trainmem.hf_config import architecture_from_hf_config
from trainmem.layers import LayerKernels, LayerShape, Trainability, trace_layer
from trainmem.models.t5 import encoder_architecture
from trainmem.plan import Plan
from trainmem.setup import Setup

ENCODER_DECODER_PRESETS = sorted(
    name for name, p in presets().items() if p.config.get("model_type") in ("t5", "mt5", "bart")
)

#: transformers 5.24, meta device, ``AutoModelForSeq2SeqLM``. T5 v1.0's are the model cards' (60M, 223M, 738M).
#: transformers 5.24's ``T5Config``/``MT5Config`` tie ``lm_head`` to ``shared`` whatever the file says, so flan-T5
#: and mT5 come out one V×h table smaller than their checkpoints (flan-t5-base 247.6M on its card).
PUBLISHED_COUNTS = {
    "t5-small": 60_506_624,
    "t5-base": 222_903_552,
    "t5-large": 737_668_096,
    "flan-t5-base": 222_903_552,
    "flan-t5-large": 750_251_008,
    "flan-t5-xl": 2_783_959_040,
    "mt5-base": 390_315_264,
    "bart-base": 139_420_416,  # card: 139M
    "bart-large": 406_291_456,  # card: 406M
}

COMMON = {"vocab_size": 1000, "d_model": 64, "d_kv": 24, "d_ff": 96, "num_layers": 2, "num_heads": 4}
SMALL = {
    "t5-relu": {"model_type": "t5", **COMMON},
    "t5-gated-untied": {"model_type": "t5", **COMMON, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},
    "t5-asymmetric": {"model_type": "t5", **COMMON, "num_decoder_layers": 3, "relative_attention_num_buckets": 16},
    "mt5": {"model_type": "mt5", **COMMON, "feed_forward_proj": "gated-gelu"},
    "bart": {"model_type": "bart", "vocab_size": 1000, "d_model": 64, "encoder_layers": 2, "decoder_layers": 3,
             "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 96, "decoder_ffn_dim": 96,
             "max_position_embeddings": 128, "scale_embedding": True},
}


def count(model) -> int:
    return Plan(Setup(model=model, sequence_length=64, target_length=32)).num_parameters


def _transformers_count(config: dict) -> int:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    fields = dict(config)
    hf_config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device("meta"):
        model = transformers.AutoModelForSeq2SeqLM.from_config(hf_config)
    return sum(p.numel() for p in model.parameters())


def test_every_required_preset_is_there():
    assert set(PUBLISHED_COUNTS) <= set(ENCODER_DECODER_PRESETS)


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_preset_counts(name):
    assert count(name) == PUBLISHED_COUNTS[name]


@pytest.mark.torch
@pytest.mark.parametrize("name", ENCODER_DECODER_PRESETS)
def test_preset_counts_match_transformers_on_meta_device(name):
    assert count(name) == _transformers_count(presets()[name].config)


@pytest.mark.torch
@pytest.mark.parametrize("kind", sorted(SMALL))
def test_small_config_counts_match_transformers(kind):
    assert count({"hf_config": SMALL[kind]}) == _transformers_count(SMALL[kind])


def test_config_reading():
    arch = architecture_from_hf_config(SMALL["t5-asymmetric"])
    assert (arch.num_hidden_layers, arch.encoder_layers, arch.cross_attention) == (3, 2, True)
    assert arch.resolved_head_dim == 24 and arch.query_width == 96  # d_kv, independent of d_model / heads
    assert arch.mlp == "plain" and arch.hidden_act == "relu" and arch.decoder_output_scale
    gated = architecture_from_hf_config(SMALL["t5-gated-untied"])
    assert gated.mlp == "gated" and gated.hidden_act == "gelu_new" and not gated.decoder_output_scale
    assert gated.tie_word_embeddings  # T5Config.__post_init__ (transformers 5.24)
    assert not architecture_from_hf_config(SMALL["mt5"]).decoder_output_scale
    encoder = encoder_stack(arch)
    assert encoder.num_layers == 2 and encoder.architecture.bidirectional
    names = {t.name for t in encoder.layer}
    assert "layer.1.DenseReluDense.wi.weight" in names and not any("EncDecAttention" in n for n in names)


def _kernels() -> LayerKernels:
    return LayerKernels(device="cpu", autocast=None, weight_dtype="fp32", stream_dtype="fp32", attention="fused")


def _shape(arch, batch: int, target: int, source: int) -> LayerShape:
    return LayerShape(
        batch=batch, seq=target, kv_seq=target, heads=arch.num_attention_heads, kv_heads=arch.kv_heads,
        head_dim=arch.resolved_head_dim, hidden=arch.hidden_size, intermediate=arch.intermediate_size,
        stream_tokens=batch * target, cross_seq=source,
    )


def test_cross_attention_saves_the_keys_and_values_of_the_encoder_output():
    """Fused attention, no dropout: a decoder layer keeps K and V of the source (b·s·a·d_kv each, fp32) on
    top of what an encoder layer of the same length keeps; the encoder output itself is shared, not saved."""
    arch = architecture_from_hf_config({**SMALL["t5-gated-untied"], "dropout_rate": 0.0, "d_kv": 32})
    trains = Trainability(lambda module: True, lambda module: False)
    batch, target = 2, 64

    def saved(source: int) -> int:
        return trace_layer(arch, _shape(arch, batch, target, source), _kernels(), trains, True).saved_activation_bytes

    per_source_position = 2 * batch * arch.query_width * 4  # K and V, fp32
    assert saved(256) - saved(128) == 128 * per_source_position
    encoder = trace_layer(encoder_architecture(arch), _shape(arch, batch, target, 0), _kernels(), trains, True)
    assert saved(128) > encoder.saved_activation_bytes


def _peak(source: int, target: int, **extra) -> int:
    setup = Setup(model={"hf_config": SMALL["t5-gated-untied"]}, micro_batch_size=4, sequence_length=source,
                  target_length=target, precision="fp32", attention="eager", runtime={"device": "cpu"}, **extra)
    return trainmem.estimate(setup).peak_allocated_bytes


def test_source_and_target_lengths_move_the_peak():
    assert _peak(256, 32) > _peak(128, 32)  # the encoder's activations and the decoder's cross-attention
    assert _peak(128, 64) > _peak(128, 32)  # the decoder's activations and the logits
    assert _peak(128, 128) == _peak(128, None)  # target_length defaults to sequence_length


def test_the_encoder_is_on_the_timeline():
    report = trainmem.estimate(Setup(model="t5-small", micro_batch_size=16, sequence_length=512, target_length=64))
    dump = report.model_dump_json()
    assert "encoder layer 5 forward" in dump and "encoder final norm backward" in dump
    names = {part.name for part in report.parts if part.category == "activations"}
    assert report.peak.phase in ("loss", "backward")
    assert "encoder: saved for backward" in names
    # under autocast (t5-small's default recipe) every decoder layer saved its own bf16 cast of the encoder
    # output, so the fp32 output itself is freed with the model's output object, before the peak (measured)
    assert report.resolved.precision_recipe != "fp32" and "encoder: output" not in names


def test_target_length_is_in_the_schema():
    schema = Setup.model_json_schema()["properties"]["target_length"]
    assert "decoder" in schema["description"] and "sequence_length" in schema["description"]


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        (["--preset", "llama-2-7b", "--seq-len", "512", "--target-len", "64"], "target_length"),
        (["--preset", "bert-base-uncased", "--seq-len", "128", "--target-len", "64"], "target_length"),
        (["--preset", "t5-small", "--seq-len", "512", "--target-len", "64", "--qlora", "8"], "finetuning.method"),
        (["--preset", "t5-small", "--gpus", "2", "--zero", "3"], "parallelism.strategy"),
        (["--preset", "t5-small", "--task", "sequence_classification"], "task.kind"),
        (["--hf-config", "{config}"], "model.hf_config.feed_forward_proj"),
        (["--preset", "bart-base", "--seq-len", "512", "--target-len", "1025"], "target_length"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(arguments, field, capsys, tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "t5", "feed_forward_proj": "gated-gelu-x"}')
    code = main(["estimate", *[str(config) if a == "{config}" else a for a in arguments]])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith(f"trainmem: error: {field}:"), err


def test_cli_target_length_flag(capsys):
    code = main(["estimate", "--preset", "flan-t5-base", "--seq-len", "512", "--target-len", "128", "--json"])
    out = capsys.readouterr().out
    assert code == 0 and '"target_length": 128' in out


def test_bart_reading_and_limits():
    arch = architecture_from_hf_config(SMALL["bart"])
    assert (arch.num_hidden_layers, arch.encoder_layers, arch.max_target_positions) == (3, 2, 128)
    assert arch.norm == "layernorm" and arch.mlp == "plain" and arch.position_embedding == "learned"
    positions = [t for t in encoder_stack(arch).prelude if t.name.endswith("embed_positions.weight")]
    assert positions[0].shape == (128 + 2, 64)  # BartLearnedPositionalEmbedding's offset of 2
    with pytest.raises(ValueError, match="false is not modelled for bart"):
        Setup(model={"hf_config": {**SMALL["bart"], "tie_word_embeddings": False}}, sequence_length=64)
    with pytest.raises(ValueError, match="target_length"):
        Setup(model={"hf_config": SMALL["bart"]}, sequence_length=64, target_length=129)
    assert count({"hf_config": SMALL["bart"]}) > 0


@pytest.mark.torch
@pytest.mark.parametrize(
    ("name", "targets"), [("flan-t5-base", None), ("t5-small", "all-linear"), ("bart-base", None), ("bart-base", "all-linear")]
)
def test_lora_trainable_counts_match_peft(name, targets):
    """PEFT's target_modules match module paths of both stacks (q, v: the encoder's and the decoder's self- and
    cross-attention)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    fields = dict(presets()[name].config)
    hf_config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device("meta"):
        model = transformers.AutoModelForSeq2SeqLM.from_config(hf_config)
    model = peft.get_peft_model(model, peft.LoraConfig(r=16, target_modules=targets, task_type="SEQ_2_SEQ_LM"))
    lora = {"r": 16} if targets is None else {"r": 16, "target_modules": targets}
    plan = Plan(Setup(model=name, sequence_length=128, target_length=64, finetuning={"method": "lora", "lora": lora}))
    assert plan.num_trainable_parameters == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert plan.num_parameters == sum(p.numel() for p in model.parameters())


def test_lora_freezes_the_base_and_adapts_the_encoder_too():
    full = Plan(Setup(model="t5-small", sequence_length=128, target_length=64))
    lora = Plan(Setup(model="t5-small", sequence_length=128, target_length=64, finetuning={"method": "lora", "lora": {"r": 8}}))
    encoder_adapters = [a for a in lora.adapter_slices(lora.stages[0]) if a[0].startswith("encoder.")]
    assert {a[0] for a in encoder_adapters} == {"encoder.layer.0.SelfAttention.q", "encoder.layer.0.SelfAttention.v"}
    assert lora.num_trainable_parameters == 8 * (512 + 512) * 2 * (6 + 6 + 6)  # q, v of 6 encoder + 6×2 decoder attentions
    assert full.num_trainable_parameters == full.num_parameters


def test_inference_refuses_encoder_decoders():
    from trainmem.errors import FieldError
    from trainmem.inference.kv_cache import layer_cache_shapes

    with pytest.raises(FieldError, match="encoder-decoder"):
        layer_cache_shapes(architecture_from_hf_config(presets()["t5-small"].config))


def test_cli_presets_and_report_count_the_encoder(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert any(line.startswith("flan-t5-base") and "222,903,552" in line for line in out.splitlines())
    assert main(["estimate", "--preset", "t5-small", "--seq-len", "256", "--target-len", "64"]) == 0
    out = capsys.readouterr().out
    assert "6 decoder + 6 encoder layers" in out and "256 tokens → 64 target tokens" in out


EXACT_SEQ2SEQ_CASES = [
    "t5v11-small-fp32-eager-b4-src256-tgt32",  # the relative-position bucket indices
    "t5v11-small-ampbf16-eager-b4-src256-tgt64",  # the encoder output freed under autocast, the buckets kept
    "t5v11-small-lora-fp32-eager-b4-src256-tgt64",  # LoRA: later encoder layers save their input
    "bart-small-lora-fp32-eager-b4-src256-tgt64",
]


@pytest.mark.parametrize("case_id", EXACT_SEQ2SEQ_CASES)
def test_the_fixed_seq2seq_cases_match_their_measured_peak(case_id):
    """Each of these missed by 0.5-1.1% until its cause was found op by op (README, encoder-decoders)."""
    from trainmem.measure.corpus import load_corpus

    measurement = next(m for m in load_corpus() if m.id == case_id)
    report = trainmem.estimate(measurement.setup, suggestions=False)
    assert abs(report.peak_allocated_bytes - measurement.peak_allocated_bytes) <= 1e-4 * measurement.peak_allocated_bytes


def test_t5_bucket_indices_are_counted_only_while_the_table_trains():
    full = trainmem.estimate(Setup(model={"hf_config": SMALL["t5-gated-untied"]}, micro_batch_size=2,
                                   sequence_length=64, target_length=16, precision="fp32", runtime={"device": "cpu"}))
    names = {part.name for part in full.parts}
    assert "encoder: relative position buckets" in names and "decoder: relative position buckets" in names
    lora = trainmem.estimate(Setup(model={"hf_config": SMALL["t5-gated-untied"]}, micro_batch_size=2,
                                   sequence_length=64, target_length=16, precision="fp32", runtime={"device": "cpu"},
                                   finetuning={"method": "lora"}))
    assert not any("relative position buckets" in part.name for part in lora.parts)

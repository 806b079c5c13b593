"""DeBERTa-v2/v3 (``models/deberta_v2.py``): config reader, inventory, disentangled attention on the tape.

Parameter counts are checked against transformers 5.24 on the meta device (PUBLISHED_COUNTS were obtained
that way, num_labels 2; the small config with every head is also in tests/test_encoders.py's ``SMALL``).
The saved tensors of one layer were checked with ``torch.autograd.graph.saved_tensors_hooks`` on the tiny
corpus config (test_saved_tensors_match_torch_hooks repeats it); the corpus cases
``deberta-*`` (scripts/encoder_corpus_cases.py) are the measured step peaks.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import trainmem
from trainmem.cli import main
from trainmem.errors import format_validation_error
from trainmem.plan import Plan
from trainmem.setup import Setup, architecture_from_hf_config

PUBLISHED_COUNTS = {
    ("deberta-v3-small", "sequence_classification"): 141_896_450,
    ("deberta-v3-base", "sequence_classification"): 184_423_682,
    ("deberta-v3-base", "token_classification"): 183_833_090,
    ("deberta-v3-base", "masked_lm"): 184_551_780,
    ("deberta-v3-base", "embedding"): 183_831_552,
    ("deberta-v3-large", "sequence_classification"): 435_063_810,
}

V3_TINY = {"model_type": "deberta-v2", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "intermediate_size": 128, "relative_attention": True, "position_buckets": 32,
           "norm_rel_ebd": "layer_norm", "share_att_key": True, "pos_att_type": "p2c|c2p",
           "position_biased_input": False, "type_vocab_size": 0}
V2_TINY = {**V3_TINY, "share_att_key": False, "position_biased_input": True, "type_vocab_size": 2,
           "norm_rel_ebd": "none", "position_buckets": -1, "max_relative_positions": 64, "embedding_size": 32}
TASKS = ("sequence_classification", "token_classification", "masked_lm", "embedding")


def _setup(model, task="sequence_classification", **fields) -> Setup:
    data = {"model": model, "task": {"kind": task, "num_labels": 2}, "sequence_length": 128, "precision": "fp32",
            "attention": "eager", "runtime": {"device": "cpu"}, **fields}
    return Setup.model_validate(data)


@pytest.mark.parametrize(("name", "task"), sorted(PUBLISHED_COUNTS))
def test_preset_counts(name, task):
    assert Plan(_setup({"preset": name}, task)).num_parameters == PUBLISHED_COUNTS[(name, task)]


def _transformers_count(config: dict, task: str) -> int:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from trainmem.measure.tasks import build_kwargs, model_class

    fields = dict(config)
    hf_config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields, num_labels=2)
    arch = _setup({"hf_config": config}, task).architecture()
    with torch.device("meta"):
        model = model_class(task).from_config(hf_config, **build_kwargs(arch))
    return sum(p.numel() for p in model.parameters())


@pytest.mark.torch
@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize(
    "config",
    [V3_TINY, V2_TINY, {**V3_TINY, "legacy": False}, {**V3_TINY, "tie_word_embeddings": False},
     {**V2_TINY, "pos_att_type": ["c2p"]}, {"model_type": "deberta-v2"}],
    ids=["v3", "v2-separate-keys", "mlm-not-legacy", "untied", "c2p-only", "class-defaults"],
)
def test_counts_match_transformers_on_meta_device(config, task):
    assert Plan(_setup({"hf_config": config}, task)).num_parameters == _transformers_count(config, task)


def test_config_reader_resolves_the_attention_span_and_types():
    dis = architecture_from_hf_config(V3_TINY).disentangled
    assert (dis.attention_span, dis.relative_rows, dis.scale_factor) == (32, 64, 3)
    assert dis.c2p and dis.p2c and dis.share_att_key and dis.rel_embedding_norm and not dis.position_biased_input
    no_buckets = architecture_from_hf_config({**V3_TINY, "position_buckets": -1, "max_relative_positions": -1,
                                              "max_position_embeddings": 256}).disentangled
    assert no_buckets.attention_span == 256  # max_relative_positions < 1: max_position_embeddings
    off = architecture_from_hf_config({**V3_TINY, "relative_attention": False}).disentangled
    assert not (off.c2p or off.p2c or off.rel_embedding_norm)


@pytest.mark.parametrize(
    ("fields", "field", "mentions"),
    [
        ({"conv_kernel_size": 3}, "conv_kernel_size", "ConvLayer"),
        ({"pos_att_type": "p2c|x2y"}, "pos_att_type", "c2p, p2c"),
        ({"pos_att_type": 3}, "pos_att_type", "list of strings"),
        ({"share_att_key": "yes"}, "share_att_key", "true or false"),
        ({"cls_dropout": 1.5}, "cls_dropout", "between"),
        ({"z_steps": 2}, "z_steps", "not modelled"),
    ],
)
def test_bad_config_fields_are_named(fields, field, mentions):
    with pytest.raises(ValidationError) as info:
        _setup({"hf_config": {**V3_TINY, **fields}})
    errors = dict(format_validation_error(info.value))
    key = next(key for key in errors if key.endswith(field))
    assert mentions in errors[key]


def test_flash_attention_is_one_line_naming_the_field(capsys):
    with pytest.raises(ValidationError) as info:
        _setup({"hf_config": V3_TINY}, attention="flash_attention_2")
    assert "eager" in dict(format_validation_error(info.value))["attention"]
    code = main(["estimate", "--preset", "deberta-v3-base", "--seq-len", "512", "--attention", "flash_attention_2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("trainmem: error: attention:")


def test_sdpa_runs_the_eager_path():
    """transformers 5.24 resolves the default attention to DeBERTa's eager one: the same estimate."""
    eager = trainmem.estimate(_setup({"preset": "deberta-v3-small"}, micro_batch_size=2))
    sdpa = trainmem.estimate(_setup({"preset": "deberta-v3-small"}, micro_batch_size=2, attention="sdpa"))
    assert sdpa.peak_allocated_bytes == eager.peak_allocated_bytes


def _peak(config, **fields) -> int:
    return trainmem.estimate(_setup({"hf_config": config}, micro_batch_size=2, **fields)).peak_allocated_bytes


def test_relative_attention_costs_the_c2p_and_p2c_scores():
    with_both = _peak(V3_TINY)
    c2p_only = _peak({**V3_TINY, "pos_att_type": ["c2p"]})
    without = _peak({**V3_TINY, "relative_attention": False})
    assert with_both > c2p_only > without


def test_more_buckets_cost_more_gathered_scores():
    assert _peak({**V3_TINY, "position_buckets": 128}) > _peak(V3_TINY)


def test_v3_base_estimates_every_head():
    for task in TASKS:
        report = trainmem.estimate(_setup({"preset": "deberta-v3-base"}, task, micro_batch_size=8,
                                          sequence_length=512, precision="amp-bf16"))
        assert report.peak_allocated_bytes > 1 << 30


def test_lora_defaults_follow_peft():
    plan = Plan(_setup({"preset": "deberta-v3-base"}, finetuning={"method": "lora", "lora": {"r": 8}}))
    assert plan.family.lora_default_targets == ("query_proj", "value_proj")
    assert 0 < plan.num_trainable_parameters < plan.num_parameters


@pytest.mark.torch
def test_saved_tensors_match_torch_hooks():
    """One layer's saved storages (``saved_tensors_hooks``, distinct storages, parameters excluded) equal
    the tape's saved bytes of that layer, fp32, tiny v3 config, batch 2 × 64."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from trainmem.layers import LayerKernels, LayerShape, Trainability, trace_layer

    torch.manual_seed(0)
    fields = dict(V3_TINY)
    fields.pop("model_type")
    config = transformers.DebertaV2Config(**fields)
    layer = transformers.models.deberta_v2.modeling_deberta_v2.DebertaV2Layer(config).train()
    encoder = transformers.models.deberta_v2.modeling_deberta_v2.DebertaV2Encoder(config)
    b, s, h = 2, 64, 64
    x = torch.randn(b, s, h, requires_grad=True)
    mask = encoder.get_attention_mask(torch.ones(b, s))
    rel_pos = encoder.get_rel_pos(x)
    rel = encoder.get_rel_embedding().detach().requires_grad_(True)
    params = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    inputs = {rel.untyped_storage().data_ptr()}  # the shared relative embeddings: the embedding trace's
    seen: dict[int, int] = {}

    def pack(t):
        key = t.untyped_storage().data_ptr()
        if key not in params and key not in inputs:
            seen.setdefault(key, t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer(x, mask, relative_pos=rel_pos, rel_embeddings=rel)
    arch = architecture_from_hf_config(V3_TINY)
    shape = LayerShape(batch=b, seq=s, kv_seq=s, heads=4, kv_heads=4, head_dim=16, hidden=h, intermediate=128,
                       stream_tokens=b * s)
    kernels = LayerKernels(device="cpu", autocast=None, weight_dtype="fp32", stream_dtype="fp32", attention="eager")
    trace = trace_layer(arch, shape, kernels, Trainability(lambda m: True, lambda m: False), True)
    scalars = sum(1 for n in seen.values() if n == 4)  # the 0-dim scale tensors (DivBackward0), not modelled
    assert trace.saved_activation_bytes == sum(seen.values()) - 4 * scalars

"""The contrastive task of CLIP / SigLIP dual encoders (text_tower.py, vision/contrastive.py).

Counts are checked against transformers 5.24's ``CLIPModel`` / ``SiglipModel`` on the meta device; the b×b
logit matrix shows as growth of the head's working memory with the square of the batch; bad input is one line.
"""

from __future__ import annotations

import pytest

from trainmem import estimate
from trainmem.catalogs import presets
from trainmem.inventory import build_inventory
from trainmem.setup import Setup

DUAL_PRESETS = ["clip-vit-base-patch32", "clip-vit-large-patch14", "siglip-base-patch16-224", "siglip-so400m-patch14-384"]
TOWER = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256,
         "image_size": 64, "patch_size": 16}
TEXT = {"vocab_size": 1000, "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 24}
SMALL = {
    "clip": {"model_type": "clip", "projection_dim": 32, "vision_config": TOWER, "text_config": TEXT},
    "siglip": {"model_type": "siglip", "vision_config": TOWER, "text_config": {**TEXT, "hidden_size": 64}},
    "siglip-projection": {"model_type": "siglip", "vision_config": TOWER, "text_config": {**TEXT, "projection_size": 64}},
}


def setup_of(model: dict, **kwargs) -> Setup:
    fields = {"precision": "fp32", "runtime": {"device": "cpu"}, "task": {"kind": "contrastive"}, **kwargs}
    return Setup(model=model, **fields)


def count(model: dict) -> int:
    return build_inventory(setup_of(model).architecture()).num_parameters


def _transformers_count(config: dict) -> int:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    fields = dict(config)
    hf_config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device("meta"):
        model = transformers.AutoModel.from_config(hf_config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.torch
@pytest.mark.parametrize("name", DUAL_PRESETS)
def test_preset_count_matches_the_dual_model_on_meta_device(name):
    assert count({"preset": name}) == _transformers_count(presets()[name].config)


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_config_count_matches_transformers(name):
    assert count({"hf_config": SMALL[name]}) == _transformers_count(SMALL[name])


def test_the_tower_only_count_is_kept_for_image_classification():
    full = count({"preset": "clip-vit-base-patch32"})
    tower = build_inventory(
        Setup(model={"preset": "clip-vit-base-patch32"}, precision="fp32", task={"kind": "image_classification"}).architecture()
    ).num_parameters
    assert tower < full / 1.5


def test_sequence_length_defaults_to_the_text_positions():
    assert setup_of({"preset": "clip-vit-base-patch32"}).sequence_length == 77
    assert setup_of({"preset": "siglip-base-patch16-224"}).sequence_length == 64


def test_the_siglip_pairs_grow_with_the_square_of_the_batch_too():
    config = SMALL["siglip"]
    peaks = [estimate(setup_of({"hf_config": config}, micro_batch_size=b, sequence_length=16)).peak_allocated_bytes
             for b in (1024, 2048, 4096)]
    assert peaks[2] - peaks[1] > 1.5 * (peaks[1] - peaks[0])


def _head_working_bytes(batch: int) -> int:
    report = estimate(setup_of({"hf_config": SMALL["clip"]}, micro_batch_size=batch, sequence_length=16))
    return report.peak_allocated_bytes


def test_the_logit_matrix_grows_with_the_square_of_the_batch():
    """Per pair, the step grows linearly with b (activations) plus the b×b logits: at b = 2048 and 4096 the
    quadratic term dominates the small model's linear one."""
    small, large, larger = (_head_working_bytes(b) for b in (1024, 2048, 4096))
    first, second = large - small, larger - large
    assert second > 1.5 * first  # linear growth would give second == 2 × first / 2 = first per doubling of b


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--preset", "vit-base-patch16-224", "--task", "contrastive"], "task.kind"),
        (["--preset", "clip-vit-base-patch32", "--task", "contrastive", "--seq-len", "78"], "sequence_length"),
        (["--preset", "siglip-base-patch16-224", "--task", "contrastive", "--seq-len", "65"], "sequence_length"),
        (["--preset", "clip-vit-base-patch32", "--task", "contrastive", "--checkpointing", "full"], "activation_checkpointing"),
        (["--preset", "clip-vit-base-patch32", "--task", "masked_lm"], "task.kind"),
    ],
)
def test_bad_input_is_one_line_naming_the_field(argv, field, capsys):
    from trainmem.cli import main

    code = main(["estimate", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith(f"trainmem: error: {field}:"), err


def test_contrastive_on_a_vision_tower_config_is_refused(tmp_path, capsys):
    """A ``clip_vision_model`` config has no text tower (a ``clip`` config without ``text_config`` gets the
    default one, as CLIPConfig builds it)."""
    import json

    from trainmem.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TOWER, "model_type": "clip_vision_model"}))
    code = main(["estimate", "--hf-config", str(path), "--task", "contrastive"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("trainmem: error: task.kind:") and "image_classification" in err and len(err.splitlines()) == 1


def test_a_clip_config_without_text_config_gets_the_default_text_tower():
    from trainmem.hf_config import architecture_from_hf_config

    arch = architecture_from_hf_config({"model_type": "clip", "vision_config": TOWER})
    assert arch.text_tower is not None and arch.text_tower.hidden_size == 512 and arch.text_tower.num_hidden_layers == 12


def test_siglip_text_head_must_match_the_vision_width(tmp_path, capsys):
    import json

    from trainmem.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "siglip", "vision_config": TOWER, "text_config": TEXT}))
    assert main(["estimate", "--hf-config", str(path), "--task", "contrastive"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("trainmem: error: model.hf_config.text_config.projection_size:"), err

"""PEFT features the trainer files use: modules_to_save (trained full copies) and DoRA (magnitude vectors).

The memory itself is checked against measured steps in the corpus (tests/test_validation.py); here:
the parameter counts PEFT reports, the refusals, and how every reader maps the keys.
"""

from __future__ import annotations

import json

import pytest
from small_models import LLAMA_14M

import trainmem
from trainmem import inputs
from trainmem.cli import main
from trainmem.errors import one_line
from trainmem.plan import Plan
from trainmem.setup import Setup


def lora_setup(**lora) -> dict:
    return {
        "model": {"hf_config": LLAMA_14M},
        "micro_batch_size": 2,
        "sequence_length": 256,
        "precision": "amp-bf16",
        "runtime": {"device": "cpu"},
        "finetuning": {"method": "lora", "lora": {"r": 8, "target_modules": ["q_proj", "v_proj"], **lora}},
    }


# --------------------------------------------------------------------------- modules_to_save


def test_modules_to_save_counts_the_copy_and_the_original_as_peft_does():
    """PEFT 0.21 on this model (measured, corpus case llama-14m-ampbf16-lora-attn-mts-embed-head-b2-s256):
    26,171,072 parameters, 12,308,480 trainable: the two 32000×192 copies plus the adapters."""
    plan = Plan(Setup.model_validate(lora_setup(modules_to_save=["lm_head", "embed_tokens"])))
    assert plan.num_parameters == 26_171_072
    assert plan.num_trainable_parameters == 12_308_480
    assert plan.module_trains("lm_head") and plan.module_trains("embed_tokens")
    assert not plan.module_trains("self_attn.q_proj")


def test_modules_to_save_matches_by_string_suffix_like_peft():
    """``key.endswith("norm")`` also matches every input_layernorm and post_attention_layernorm."""
    plan = Plan(Setup.model_validate(lora_setup(modules_to_save=["norm"])))
    assert plan.module_trains("norm") and plan.module_trains("input_layernorm")
    assert plan.num_saved_module_parameters == 192 * (1 + 2 * 4)
    whole_attention = Plan(Setup.model_validate(lora_setup(target_modules=["up_proj"], modules_to_save=["self_attn"])))
    assert whole_attention.module_trains("self_attn.o_proj")


def test_modules_to_save_adds_weights_gradients_and_states():
    plain = trainmem.estimate(lora_setup(), suggestions=False)
    saved = trainmem.estimate(lora_setup(modules_to_save=["lm_head"]), suggestions=False)
    head = 32000 * 192
    assert saved.num_trainable_parameters - plain.num_trainable_parameters == head
    assert saved.num_parameters - plain.num_parameters == head
    assert saved.peak_allocated_bytes > plain.peak_allocated_bytes + 4 * head  # fp32 copy under autocast


@pytest.mark.parametrize(
    "lora, model, message",
    [
        ({"modules_to_save": ["nothing_here"]}, LLAMA_14M, "matches no module"),
        ({"modules_to_save": ["layers.3.mlp"]}, LLAMA_14M, "names one layer"),
        ({"modules_to_save": ["q_proj"]}, LLAMA_14M, "also carries a LoRA adapter"),
        ({"modules_to_save": ["lm_head"]}, {**LLAMA_14M, "tie_word_embeddings": True}, "tied"),
    ],
)
def test_modules_to_save_refusals_name_the_field(lora, model, message):
    data = lora_setup(**lora)
    data["model"] = {"hf_config": model}
    with pytest.raises(ValueError) as error:
        Setup.model_validate(data)
    line = one_line(error.value)
    assert line.startswith("finetuning.lora.modules_to_save: ") and message in line


def test_modules_to_save_of_a_quantized_layer_is_refused_but_the_head_is_modelled():
    data = lora_setup(modules_to_save=["mlp"])
    data["finetuning"]["method"] = "qlora"
    with pytest.raises(ValueError, match="QLoRA"):
        Setup.model_validate(data)
    data["finetuning"]["lora"]["modules_to_save"] = ["lm_head"]
    assert Setup.model_validate(data).finetuning.lora.modules_to_save == ["lm_head"]


def test_a_bad_modules_to_save_is_one_cli_line(tmp_path, capsys):
    path = tmp_path / "setup.json"
    path.write_text(json.dumps(lora_setup(modules_to_save=["nothing_here"])))
    assert main(["estimate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "modules_to_save" in err


# --------------------------------------------------------------------------- DoRA


def test_dora_adds_one_magnitude_vector_per_adapted_linear():
    """PEFT's lora_magnitude_vector: out_features per adapted linear (q_proj 192, v_proj 64 here)."""
    plain = Plan(Setup.model_validate(lora_setup()))
    dora = Plan(Setup.model_validate(lora_setup(use_dora=True)))
    assert dora.num_trainable_parameters - plain.num_trainable_parameters == 4 * (192 + 64)


def test_dora_saves_more_than_plain_lora():
    plain = trainmem.estimate(lora_setup(), suggestions=False)
    dora = trainmem.estimate(lora_setup(use_dora=True), suggestions=False)
    assert dora.peak_allocated_bytes > plain.peak_allocated_bytes


@pytest.mark.parametrize(
    "change, message",
    [
        ({"method": "qlora"}, "QLoRA"),
    ],
)
def test_dora_refusals_name_the_field(change, message):
    data = lora_setup(use_dora=True)
    data["finetuning"].update(change)
    with pytest.raises(ValueError) as error:
        Setup.model_validate(data)
    line = one_line(error.value)
    assert line.startswith("finetuning.lora.use_dora: ") and message in line


def test_dora_on_fused_experts_is_refused():
    with pytest.raises(ValueError, match="ParamWrapper"):
        Setup.model_validate(
            {"model": "mixtral-8x7b", "finetuning": {"method": "lora", "lora": {"target_modules": "all-linear", "use_dora": True}}}
        )


# --------------------------------------------------------------------------- readers


def read(**texts):
    return inputs.read_texts({name.replace("_", ".", 1): text for name, text in texts.items()})


def entry(keys, key):
    return next(e for e in keys.entries if e.key == key)


def test_peft_adapter_config_models_modules_to_save_and_dora():
    config = {
        "peft_type": "LORA",
        "base_model_name_or_path": "meta-llama/Llama-3.1-8B",
        "r": 8,
        "target_modules": ["q_proj", "v_proj"],
        "modules_to_save": ["lm_head"],
        "use_dora": True,
    }
    setup, keys = inputs.read_texts({"adapter_config.json": json.dumps(config)})
    assert setup.finetuning.lora.modules_to_save == ["lm_head"] and setup.finetuning.lora.use_dora
    assert entry(keys, "modules_to_save").status == "modelled"
    assert entry(keys, "use_dora").status == "modelled"


def test_trl_model_config_keys():
    text = "model_name_or_path: meta-llama/Llama-3.1-8B\nuse_peft: true\nlora_modules_to_save: [lm_head, embed_tokens]\nuse_dora: true\n"
    setup, keys = read(sft_yaml=text)
    assert setup.finetuning.lora.modules_to_save == ["lm_head", "embed_tokens"] and setup.finetuning.lora.use_dora
    assert entry(keys, "lora_modules_to_save").status == "modelled"


def test_axolotl_keys():
    text = (
        "base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nlora_r: 8\nlora_target_modules: [q_proj, v_proj]\n"
        "lora_modules_to_save: [embed_tokens, lm_head]\npeft_use_dora: true\nsequence_len: 1024\n"
    )
    setup, keys = read(axolotl_yaml=text)
    assert setup.finetuning.lora.modules_to_save == ["embed_tokens", "lm_head"] and setup.finetuning.lora.use_dora
    assert entry(keys, "peft_use_dora").status == "modelled"


def test_llamafactory_additional_target_is_a_comma_separated_string():
    text = (
        "model_name_or_path: meta-llama/Llama-3.1-8B\nstage: sft\nfinetuning_type: lora\nlora_target: q_proj,v_proj\n"
        "additional_target: embed_tokens,lm_head\nuse_dora: true\ncutoff_len: 1024\n"
    )
    setup, keys = read(llamafactory_yaml=text)
    assert setup.finetuning.lora.modules_to_save == ["embed_tokens", "lm_head"] and setup.finetuning.lora.use_dora
    assert entry(keys, "additional_target").status == "modelled"

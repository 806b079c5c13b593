"""A Hugging Face ``config.json``: the model itself, and bitsandbytes' ``quantization_config`` in it.

The file goes to the Setup as ``{"model": {"hf_config": ...}}`` (trainmem.hf_config reads the
architecture). A ``quantization_config`` with ``quant_method: bitsandbytes`` (transformers 5.24
``BitsAndBytesConfig``: ``load_in_4bit``/``load_in_8bit``, ``bnb_4bit_quant_type``,
``bnb_4bit_use_double_quant``, ``bnb_4bit_compute_dtype``) makes the base a quantized one,
trained with adapters (QLoRA); other methods (GPTQ, AWQ, fp8) are not modelled.
"""

from __future__ import annotations

from .record import Contribution, Recorder

COMPUTE_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def read_model_config(rec: Recorder) -> None:
    config = {k: v for k, v in rec.data.items() if k != "quantization_config"}
    rec.contributions.append(Contribution("model", {"hf_config": config}, rec.file, "(config.json)"))
    rec.entries.append(_whole_file(rec, config))
    rec.mark(k for k in rec.data if k != "quantization_config")
    quantization = rec.get("quantization_config")
    if isinstance(quantization, dict):
        read_quantization(rec, quantization)
    elif quantization is not None:
        rec.unmodelled("quantization_config", "expected an object")


def read_quantization(rec: Recorder, config: dict) -> None:
    base = "quantization_config"
    method = str(config.get("quant_method", "bitsandbytes")).lower()
    if method != "bitsandbytes":
        rec.unmodelled(base, f"{method}: assumed an unquantized base")
        return
    bits = 4 if config.get("load_in_4bit") else 8 if config.get("load_in_8bit") else None
    if bits is None:
        rec.neutral(base, "neither load_in_4bit nor load_in_8bit")
        return
    rec.facts["quantized_base"] = True
    rec.set(f"{base}.load_in_{bits}bit", "finetuning.quantization.bits", bits, "a quantized base trains with adapters")
    if "bnb_4bit_quant_type" in config:
        rec.set(f"{base}.bnb_4bit_quant_type", "finetuning.quantization.quant_type", str(config["bnb_4bit_quant_type"]))
    if "bnb_4bit_use_double_quant" in config:
        rec.set(
            f"{base}.bnb_4bit_use_double_quant",
            "finetuning.quantization.double_quant",
            bool(config["bnb_4bit_use_double_quant"]),
        )
    dtype = str(config.get("bnb_4bit_compute_dtype", "")).removeprefix("torch.")
    if dtype in COMPUTE_DTYPES:
        rec.set(f"{base}.bnb_4bit_compute_dtype", "finetuning.quantization.compute_dtype", COMPUTE_DTYPES[dtype])
    rec.finish(
        base,
        frozenset(
            {
                "quant_method",
                "load_in_4bit",
                "load_in_8bit",
                "llm_int8_threshold",
                "llm_int8_skip_modules",
                "llm_int8_enable_fp32_cpu_offload",
                "llm_int8_has_fp16_weight",
                "bnb_4bit_quant_storage",
                "_load_in_4bit",
                "_load_in_8bit",
            }
        ),
    )


def _whole_file(rec: Recorder, config: dict):
    from .record import KeyEntry

    kind = config.get("model_type", "?")
    return KeyEntry(
        file=rec.file,
        key="(whole file)",
        value=None,
        status="modelled",
        detail=f"model.hf_config: a {kind} architecture, read by trainmem.hf_config",
    )

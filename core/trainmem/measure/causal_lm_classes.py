"""Causal-LM classes transformers 5.24 leaves out of ``AutoModelForCausalLM``'s mapping, registered for measuring.

``Mistral4ForCausalLM`` exists (transformers/models/mistral4) but ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` has no
``mistral4`` entry (the released checkpoint loads as the ``mistral3`` multimodal wrapper), so
``AutoModelForCausalLM.from_config`` refuses its config. :func:`register_causal_lms` adds each listed class with
``AutoModelForCausalLM.register`` (idempotent), so that the measure tooling and the tests build them as any other.
"""

from __future__ import annotations

UNMAPPED_CAUSAL_LMS: dict[str, tuple[str, str]] = {
    "mistral4": ("Mistral4Config", "Mistral4ForCausalLM"),
}
"""``model_type`` -> (its config class, its causal-LM class), both exported by ``transformers``."""


def register_causal_lms() -> None:
    """Register the classes of :data:`UNMAPPED_CAUSAL_LMS` that ``AutoModelForCausalLM`` does not know yet."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    for model_type, (config_name, model_name) in UNMAPPED_CAUSAL_LMS.items():
        if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            continue
        config_class = getattr(transformers, config_name)
        model_class = getattr(transformers, model_name)
        transformers.AutoModelForCausalLM.register(config_class, model_class, exist_ok=True)

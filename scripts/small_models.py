"""Small model configs (config.json fields) that the corpus scripts measure and the tests reuse.

One definition each: the case lists (``corpus_cases.py``, ``distributed_cases.py``) and the tests import
them from here (pytest puts ``scripts/`` on ``sys.path``: ``pythonpath`` in pyproject.toml), so a test of
"the corpus model" cannot drift from the model the corpus measured. Every dict is a plain Llama built by
``LlamaForCausalLM(LlamaConfig(**fields))``.
"""

from __future__ import annotations

LLAMA_14M = {
    "model_type": "llama",
    "vocab_size": 32000,
    "hidden_size": 192,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 6,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}
"""The single-process corpus's Llama (``llama-14m-*``): grouped-query attention, 3 query heads per KV head."""

LLAMA_14M_MHA = {**LLAMA_14M, "num_key_value_heads": 6}
"""``llama-14m-mha-*``: the same with multi-head attention."""

LLAMA_7M = {
    "model_type": "llama",
    "vocab_size": 8000,
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
}
"""The distributed corpus's Llama (``ddp-``, ``fsdp*-``, ``zero*-``, ``tp-``, ``pp-llama-7m-*``)."""

TINY_LLAMA = {
    "model_type": "llama",
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
}
"""A Llama small enough for a real measured step inside a unit test (tests/test_measure.py)."""

LLAMA_2_LAYERS = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 512,
    "vocab_size": 1000,
}
"""A config.json as a user writes it, the other fields left to LlamaConfig's defaults (the input tests)."""

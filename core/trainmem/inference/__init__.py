"""Inference memory: the KV cache, Hugging Face generate, and a vLLM engine (see README "Inference memory")."""

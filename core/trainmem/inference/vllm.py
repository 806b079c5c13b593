"""vLLM's GPU memory (placeholder; the full model follows)."""

"""Storage of a quantised frozen base (bitsandbytes, as QLoRA uses it).

4-bit (NF4 or FP4, Dettmers et al. 2023, "QLoRA"): two weights per byte, plus one absmax
constant per block of 64 weights. Without double quantisation the constants are fp32
(32/64 = 0.5 bits per weight); with it they are stored in 8 bits and get their own fp32
constant per block of 256 (8/64 + 32/(64·256) ≈ 0.127 bits per weight). Total ≈ 4.127 bits
≈ 0.516 bytes per weight with double quantisation.

8-bit (LLM.int8(), Dettmers et al. 2022): one byte per weight plus one fp32 scale per
output row; the row scales are below 0.1% of the weight bytes for the layers of any
preset and are not counted.
"""

from __future__ import annotations

BLOCK_SIZE = 64
SECOND_LEVEL_BLOCK_SIZE = 256


def quantized_weight_bytes(numel: int, bits: int, double_quant: bool) -> int:
    """Bytes of one quantised weight tensor of ``numel`` elements, constants included."""
    if bits == 8:
        return numel
    packed = -(-numel // 2)
    blocks = -(-numel // BLOCK_SIZE)
    if not double_quant:
        return packed + blocks * 4
    second_level_blocks = -(-blocks // SECOND_LEVEL_BLOCK_SIZE)
    return packed + blocks + second_level_blocks * 4

"""Layer programs shared by families whose norm differs from Llama's in one way.

``WeightTimesFp32RMSNorm``: the RMSNorm of OLMo 2 and gpt-oss multiplies the weight into the fp32
normalized tensor and casts the product back (``(self.weight * hidden_states).to(input_dtype)``,
``Olmo2RMSNorm.forward`` in transformers/models/olmo2/modeling_olmo2.py and ``GptOssRMSNorm.forward`` in
models/gpt_oss/modeling_gpt_oss.py), where ``LlamaRMSNorm`` casts first and multiplies in the input's
dtype. Families compose it by subclassing it instead of ``LayerProgram``.
"""

from __future__ import annotations

from ..layers import LayerProgram
from ..tape import Sym


class WeightTimesFp32RMSNorm(LayerProgram):
    """A layer program whose RMSNorm is ``(weight * normalized_fp32).to(input_dtype)``."""

    def rms_norm(self, module: str, x: Sym, rows: int, width: int) -> Sym:
        return self.rms_norm_product_in_fp32(module, x, rows, width)

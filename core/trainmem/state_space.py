"""The Mamba-2 mixer's sizes (Dao & Gu 2024, "Transformers are SSMs: Generalized Models and Efficient
Algorithms Through Structured State Space Duality"; transformers 5.24 ``GraniteMoeHybridMambaLayer`` /
``NemotronHMamba2Mixer`` / ``Mamba2Mixer``, which build the same module).

One frozen record on :attr:`Architecture.mamba`, read from the family's config.json by its module in
``trainmem.models`` (granitemoehybrid's ``mamba_*`` fields, nemotron_h's ``mamba_num_heads`` ...);
``None`` for a model without Mamba-2 layers. Which layers are Mamba-2 layers is
``Architecture.linear_attention_layers`` (transformers 5.24 names them ``linear_attention`` in
``layer_types``: configuration_utils ``_LEGACY_LAYER_TYPE_REMAP`` maps ``mamba`` to it).
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, PositiveInt

from ._base import FrozenModel


class Mamba2Mixer(FrozenModel):
    """What the Mamba-2 mixer's ``__init__`` builds: H heads of width P, G groups of B/C with state N."""

    num_heads: PositiveInt = Field(description="H: SSM heads (mamba_n_heads); dt, A_log, D and dt_bias have one value each.")
    head_dim: PositiveInt = Field(description="P: the width of each head (mamba_d_head); H·P is the mixer's inner width.")
    state_size: PositiveInt = Field(description="N: the SSM state per group (mamba_d_state).")
    n_groups: PositiveInt = Field(default=1, description="G: groups sharing B and C (mamba_n_groups).")
    conv_kernel: PositiveInt = Field(default=4, description="The depthwise causal conv1d's kernel (mamba_d_conv).")
    chunk_size: PositiveInt = Field(default=256, description="The SSD scan's chunk length (mamba_chunk_size).")
    conv_bias: bool = Field(default=True, description="conv1d has a bias (mamba_conv_bias).")
    proj_bias: bool = Field(default=False, description="in_proj and out_proj have biases (mamba_proj_bias).")
    norm_groups: PositiveInt = Field(
        default=1, description="Groups of the gated RMSNorm (group_size = inner width / norm_groups)."
    )
    out_proj_bias: Optional[bool] = Field(
        default=None, description="out_proj has a bias (Falcon-H1's projectors_bias); None: as proj_bias."
    )
    gated_norm: Literal["gate_then_norm", "norm_then_gate", "gate_only"] = Field(
        default="gate_then_norm",
        description=(
            "How the scan's output meets the gate z: silu(z) then the group RMSNorm (Granite 4.0, Nemotron-H, Mamba-2), "
            "the norm then silu(z) (Falcon-H1's mamba_norm_before_gate), or silu(z) alone without a norm weight "
            "(Falcon-H1's mamba_rms_norm false)."
        ),
    )

    @property
    def has_out_proj_bias(self) -> bool:
        return self.proj_bias if self.out_proj_bias is None else self.out_proj_bias

    @property
    def inner_width(self) -> int:
        """H·P: the width of x, z and the scan's output (``intermediate_size`` of the mixer)."""
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """x, B and C, convolved together: H·P + 2·G·N channels."""
        return self.inner_width + 2 * self.n_groups * self.state_size

    @property
    def projection_width(self) -> int:
        """in_proj's output: z (H·P), x·B·C (conv_dim) and dt (H)."""
        return self.inner_width + self.conv_dim + self.num_heads

"""DeBERTa's disentangled attention settings (He et al. 2021, "DeBERTa: Decoding-enhanced BERT with
Disentangled Attention"; transformers 5.24 models/deberta_v2, ``DisentangledSelfAttention``).

One frozen record on :attr:`Architecture.disentangled`, read from a ``deberta-v2`` config.json by
``trainmem.models.deberta_v2``; ``None`` for every other family.
"""

from __future__ import annotations

from pydantic import Field, NonNegativeInt, PositiveInt

from ._base import FrozenModel


class DisentangledAttention(FrozenModel):
    """What ``DisentangledSelfAttention`` and ``DebertaV2Encoder`` build from the config."""

    relative_attention: bool = Field(default=False, description="Relative position embeddings (encoder.rel_embeddings).")
    attention_span: PositiveInt = Field(
        default=512,
        description="pos_ebd_size: position_buckets when > 0, else max_relative_positions (max_position_embeddings when < 1); "
        "the relative embedding table has twice as many rows.",
    )
    c2p: bool = Field(default=False, description="pos_att_type has c2p (content to position).")
    p2c: bool = Field(default=False, description="pos_att_type has p2c (position to content).")
    share_att_key: bool = Field(default=False, description="The relative embeddings go through query_proj/key_proj.")
    rel_embedding_norm: bool = Field(default=False, description="norm_rel_ebd has layer_norm: encoder.LayerNorm.")
    position_biased_input: bool = Field(default=True, description="Absolute position embeddings added to the input.")
    embedding_size: PositiveInt = Field(default=1, description="Width of the word embeddings (embed_proj when not hidden_size).")
    pooler_dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    pooler_hidden_act: str = "gelu"
    legacy_mlm_head: bool = Field(default=True, description="config.legacy: cls.predictions (True) or lm_predictions.lm_head.")
    conv_kernel_size: NonNegativeInt = 0

    @property
    def relative_rows(self) -> int:
        """Rows of ``encoder.rel_embeddings`` (and of the slice each layer uses): ``2 * pos_ebd_size``."""
        return 2 * self.attention_span

    @property
    def scale_factor(self) -> int:
        """``1 + [c2p] + [p2c]``: the scores are divided by ``sqrt(head_dim * scale_factor)``."""
        return 1 + int(self.c2p) + int(self.p2c)

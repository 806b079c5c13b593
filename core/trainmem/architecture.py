"""The shape of a decoder-only transformer, in the vocabulary of Hugging Face config.json.

An :class:`Architecture` is everything trainmem needs to know about a model to list its
parameter tensors (``inventory.py``) and the activations each layer saves for backward
(``layers.py``). Which family's code builds and runs it (module names, config reader, layer
program, PEFT defaults) is looked up from ``model_type`` in ``trainmem.models``. Field names follow the Hugging Face ``config.json`` fields of the
Llama family (``hidden_size``, ``num_key_value_heads``, ``intermediate_size``, ...); the
flags below them describe the variations between families (GPT-2's biases and learned
positions, Gemma 2's four norms, Phi-3's fused projections, Mixtral's experts).
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, Optional

from pydantic import Field, NonNegativeInt, PositiveInt, model_validator

from ._base import FrozenModel
from .disentangled import DisentangledAttention
from .hyper_connections import HyperConnections
from .state_space import Mamba2Mixer
from .gemma4_layout import Gemma4Layout
from .errors import FieldError
from .tasks import TaskKind
from .text_tower import TextTower

Probability = Field(default=0.0, ge=0.0, lt=1.0)


class Architecture(FrozenModel):
    """A decoder-only transformer: embeddings, ``num_hidden_layers`` identical blocks, a head.

    Each block is ``x + attention(norm(x))`` then ``x + mlp(norm(x))``; the MLP is either
    dense or a mixture of experts. Shapes use the usual letters in docstrings elsewhere:
    b micro-batch, s sequence, h hidden_size, a attention heads, k key/value heads,
    d head_dim, i intermediate_size, v vocab_size, L layers.
    """

    model_type: str = Field(default="custom", description="Family, as in config.json's model_type.")
    vocab_size: PositiveInt
    hidden_size: PositiveInt
    num_hidden_layers: PositiveInt
    num_attention_heads: PositiveInt
    num_key_value_heads: Optional[PositiveInt] = Field(
        default=None, description="Grouped-query attention: heads sharing K and V. Default: num_attention_heads."
    )
    head_dim: Optional[PositiveInt] = Field(default=None, description="Default: hidden_size // num_attention_heads.")
    intermediate_size: PositiveInt = Field(description="Width of the MLP (of one expert for MoE models).")
    mlp: Literal["gated", "plain"] = Field(
        default="gated",
        description="gated: down(act(gate(x)) * up(x)) as in Llama; plain: fc2(act(fc1(x))) as in GPT-2.",
    )
    hidden_act: str = "silu"
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    norms_per_layer: Literal[2, 4] = Field(
        default=2, description="Gemma 2 adds a norm after attention and after the MLP."
    )
    qk_norm: bool = Field(default=False, description="RMSNorm over each head's query and key (Qwen3).")
    attention_qkv_bias: bool = False
    attention_output_bias: bool = False
    mlp_bias: bool = False
    fused_qkv: bool = Field(default=False, description="One projection for Q, K and V (GPT-2 c_attn, Phi-3 qkv_proj).")
    fused_gate_up: bool = Field(default=False, description="One projection for gate and up (Phi-3 gate_up_proj).")
    position_embedding: Literal["rope", "learned", "relative"] = "rope"
    max_position_embeddings: PositiveInt = 2048
    tie_word_embeddings: bool = False
    num_experts: NonNegativeInt = Field(default=0, description="Routed experts per MoE layer; 0 for a dense MLP.")
    num_experts_per_tok: PositiveInt = Field(default=1, description="Experts each token is routed to (top-k).")
    shared_expert_intermediate_size: NonNegativeInt = Field(
        default=0, description="Width of an always-on shared expert (Qwen-MoE); 0 for none."
    )
    shared_expert_gate: bool = Field(default=False, description="A sigmoid gate on the shared expert's output.")
    embedding_dropout: float = Probability
    attention_dropout: float = Probability
    residual_dropout: float = Probability
    scale_embeddings: bool = Field(default=False, description="Gemma multiplies the embeddings by sqrt(hidden_size).")
    final_logit_softcapping: Optional[float] = Field(default=None, gt=0)
    attn_logit_softcapping: Optional[float] = Field(default=None, gt=0)
    norm_position: Literal["pre", "post"] = Field(
        default="pre",
        description="pre: norm(x) feeds each sub-block (Llama); post: the sub-block's output is normed before "
        "the residual add (OLMo 2).",
    )
    qk_norm_over: Literal["head", "projection"] = Field(
        default="head",
        description="qk_norm per head (Qwen3, Gemma 3) or over the whole q/k projection (OLMo 2).",
    )
    dense_layers: tuple[NonNegativeInt, ...] = Field(
        default=(),
        description="In a MoE model, the layers whose MLP is dense (DeepSeek's first_k_dense_replace, Qwen-MoE's "
        "mlp_only_layers, Llama 4's interleaving).",
    )
    dense_intermediate_size: Optional[PositiveInt] = Field(
        default=None, description="MLP width of the dense layers of a MoE model. Default: intermediate_size."
    )
    embedding_scale_buffer: bool = Field(
        default=False, description="Gemma 3 keeps the embedding scale sqrt(h) as a one-element buffer."
    )
    not_counted: tuple[str, ...] = Field(
        default=(), description="Parts of the checkpoint not in this architecture (e.g. a VLM's vision tower)."
    )
    embedding_multiplier: Optional[float] = Field(
        default=None, description="Granite multiplies the embeddings by a Python float (a new tensor, nothing saved)."
    )
    residual_multiplier: Optional[float] = Field(
        default=None, description="Granite scales each sub-block's output before the residual add."
    )
    logits_scaling: Optional[float] = Field(
        default=None, description="Granite divides the logits by this before the loss (one more logits tensor)."
    )
    partial_rotary_factor: float = Field(
        default=1.0, gt=0.0, le=1.0, description="Share of each head's dims that RoPE rotates (GPT-NeoX: 0.25)."
    )
    parallel_residual: bool = Field(
        default=False, description="GPT-NeoX: x + attention(norm1(x)) + mlp(norm2(x)) in one residual step."
    )
    sliding_window: Optional[PositiveInt] = Field(
        default=None, description="Sliding-window attention span (Mistral, Gemma 2/3, gpt-oss); None for none."
    )
    sliding_layers: Optional[tuple[NonNegativeInt, ...]] = Field(
        default=None, description="The layers that use the window (None: every layer, when sliding_window is set)."
    )
    layer_sliding: bool = Field(default=False, description="Set on a sliding-window layer kind (see layer_kinds).")
    nope_layers: tuple[NonNegativeInt, ...] = Field(
        default=(), description="Layers without rotary embeddings (Llama 4: every 4th layer, 'NoPE')."
    )
    layer_rope: bool = Field(default=True, description="Set on a NoPE layer kind (see layer_kinds): no RoPE here.")
    qk_l2_norm: bool = Field(default=False, description="Llama 4: weightless L2 norm of q and k after RoPE (rope layers).")
    attention_temperature_tuning: bool = Field(
        default=False, description="Llama 4: NoPE layers scale q by a per-position factor (one fp32 product)."
    )
    rope_sets: Literal[1, 2] = Field(
        default=1, description="Rotary tables per forward: Gemma 3 keeps one for global and one for local layers."
    )
    # ---- multi-head latent attention and gpt-oss (models/deepseek.py, models/gpt_oss.py)
    kv_lora_rank: Optional[PositiveInt] = Field(
        default=None,
        description="Multi-head latent attention (DeepSeek-V2/V3): width of the compressed key/value latent; "
        "None for ordinary attention.",
    )
    q_lora_rank: Optional[PositiveInt] = Field(
        default=None, description="MLA: width of the compressed query (q_a_proj); None for a plain q_proj."
    )
    qk_nope_head_dim: NonNegativeInt = Field(default=0, description="MLA: per-head query/key width without RoPE.")
    qk_rope_head_dim: NonNegativeInt = Field(default=0, description="MLA: per-head query/key width with RoPE.")
    v_head_dim: Optional[PositiveInt] = Field(default=None, description="MLA: per-head value width.")
    indexer_heads: Optional[PositiveInt] = Field(
        default=None, description="DeepSeek-V3.2's lightning indexer (DeepSeek Sparse Attention): its query heads "
        "(index_n_heads); None without an indexer (models/deepseek_v32.py)."
    )
    indexer_head_dim: Optional[PositiveInt] = Field(default=None, description="The indexer's head width (index_head_dim).")
    indexer_topk: Optional[PositiveInt] = Field(default=None, description="Tokens the indexer keeps per query (index_topk).")
    rope_layout: Literal["half", "interleaved", "complex"] = Field(
        default="half",
        description="How RoPE rotates: rotate_half (Llama), even/odd pairs (DeepSeek-V3 rope_interleave), "
        "complex multiplication (DeepSeek-V2's view_as_complex).",
    )
    router_scoring: Literal["softmax", "sigmoid", "topk_softmax"] = Field(
        default="softmax",
        description="softmax over all experts then top-k (Mixtral, DeepSeek-V2); sigmoid scores with a "
        "selection bias (DeepSeek-V3); top-k of the logits then softmax over the k (gpt-oss).",
    )
    router_bias: bool = Field(default=False, description="The router has a bias parameter (gpt-oss).")
    router_score_correction_bias: bool = Field(
        default=False, description="DeepSeek-V3's e_score_correction_bias buffer (E fp32 values per MoE layer)."
    )
    norm_topk_prob: bool = Field(default=True, description="Top-k routing weights renormalised to sum to one.")
    expert_bias: bool = Field(default=False, description="Routed experts have biases (gpt-oss).")
    swiglu_limit: Optional[float] = Field(
        default=None, gt=0, description="gpt-oss clamps gate and up to this limit: (up + 1) * gate * sigmoid(alpha * gate)."
    )
    attention_sinks: bool = Field(default=False, description="One learned sink logit per head (gpt-oss sinks).")
    lm_head_bias: bool = Field(default=False, description="The output head has a bias (Phi-3.5-MoE's lm_head_bias).")
    input_jitter_noise: float = Field(
        default=0.0, ge=0.0, lt=1.0, description="PhiMoE multiplies the MoE input by U(1 - eps, 1 + eps) noise in training."
    )
    # ---- hybrid linear attention (models/qwen3_next.py)
    linear_attention_layers: tuple[NonNegativeInt, ...] = Field(
        default=(), description="Layers whose token mixer is linear attention (Qwen3-Next's Gated DeltaNet), "
        "from config.json's layer_types."
    )
    layer_linear_attention: bool = Field(default=False, description="Set on a linear-attention layer kind (see layer_kinds).")
    linear_num_key_heads: Optional[PositiveInt] = Field(default=None, description="Gated DeltaNet: query/key heads.")
    linear_num_value_heads: Optional[PositiveInt] = Field(default=None, description="Gated DeltaNet: value heads.")
    linear_key_head_dim: Optional[PositiveInt] = Field(default=None, description="Gated DeltaNet: query/key head width.")
    linear_value_head_dim: Optional[PositiveInt] = Field(default=None, description="Gated DeltaNet: value head width.")
    linear_conv_kernel_dim: Optional[PositiveInt] = Field(default=None, description="Gated DeltaNet: causal conv1d kernel.")
    short_conv: bool = Field(
        default=False, description="LFM2: the layers in linear_attention_layers are gated short convolutions "
        "(kernel linear_conv_kernel_dim), not Gated DeltaNet."
    )
    short_conv_bias: bool = Field(default=False, description="LFM2's conv_bias: biases on the short convolution's modules.")
    linear_allow_neg_eigval: bool = Field(
        default=False, description="OLMo Hybrid: the Gated DeltaNet's beta is doubled (sigmoid(b) * 2, a new tensor)."
    )
    falcon_new_decoder_architecture: bool = Field(
        default=False, description="Falcon-40B/180B: key/value groups broadcast to their query heads (copies)."
    )
    falcon_norms_in_parallel: PositiveInt = Field(
        default=1, description="Falcon's parallel block: one input_layernorm, or ln_attn and ln_mlp (2)."
    )
    attention_output_gate: bool = Field(
        default=False, description="Gated attention (Qwen3-Next): q_proj also yields a sigmoid gate on attention's output."
    )
    # ---- encoders and their heads (models/encoder.py, heads.py, tasks.py)
    bidirectional: bool = Field(
        default=False,
        description="An encoder (BERT family): attention over every position, no causal mask, LayerNorm after "
        "each residual add (post-LN).",
    )
    type_vocab_size: NonNegativeInt = Field(
        default=0, description="BERT's token_type_embeddings rows (segment ids); 0 for none."
    )
    embedding_norm: bool = Field(default=False, description="A LayerNorm over the summed embeddings (BERT).")
    positions_from_input_ids: bool = Field(
        default=False, description="RoBERTa computes position ids from the input ids (cumsum past padding_idx)."
    )
    classifier_dropout: float = Probability
    task: TaskKind = Field(
        default="causal_lm", description="The head trained on top (tasks.py); set from Setup.task."
    )
    num_labels: PositiveInt = Field(default=2, description="Classes of a classification head.")
    # ---- ModernBERT (models/modernbert.py)
    norm_bias: bool = Field(default=True, description="LayerNorms have a bias (ModernBERT's norm_bias: false).")
    first_layer_attention_norm: bool = Field(
        default=True, description="False: layer 0's attention norm is an Identity (ModernBERT's attn_norm)."
    )
    layer_attention_norm: bool = Field(default=True, description="Set on a layer kind (see layer_kinds): its attention norm.")
    mlp_dropout: float = Probability
    classifier_pooling: Literal["cls", "mean"] = Field(
        default="cls", description="ModernBERT's sequence head reads the first token (cls) or the mean over the sequence."
    )
    classifier_bias: bool = Field(default=True, description="ModernBERT's prediction head dense layer has a bias.")
    classifier_activation: str = Field(default="gelu", description="ModernBERT's prediction head activation.")
    decoder_bias: bool = Field(default=True, description="ModernBERT's MLM decoder has a bias.")
    # ---- vision encoders on their own (models/vision_encoders.py, vision/encoders.py)
    image_size: NonNegativeInt = Field(
        default=0, description="Vision encoders: the side (px) of the square image the tower sees after the processor; 0 for text models."
    )
    patch_size: NonNegativeInt = Field(default=0, description="Vision encoders: the patch side (px).")
    num_channels: PositiveInt = Field(default=3, description="Vision encoders: image channels.")
    class_tokens: NonNegativeInt = Field(
        default=0, description="Vision encoders: tokens before the patches (the [CLS] token and DINOv2's register tokens)."
    )
    layer_scale: bool = Field(default=False, description="DINOv2: each sub-block's output is scaled by a learned vector.")
    mask_token: bool = Field(default=False, description="DINOv2's use_mask_token: a (1, h) parameter masked image modelling reads.")
    pooling_head: bool = Field(default=False, description="SigLIP's vision_use_head: the attention-pooling head.")
    # ---- encoder-decoders (models/t5.py, trainmem/encoder_decoder/)
    encoder_layers: NonNegativeInt = Field(
        default=0,
        description="An encoder-decoder (T5): layers of the encoder stack that runs before these decoder layers; "
        "0 for a decoder-only model or an encoder.",
    )
    cross_attention: bool = Field(
        default=False, description="Each layer attends over the encoder's output (an encoder-decoder's decoder)."
    )
    relative_attention_num_buckets: NonNegativeInt = Field(
        default=0, description="T5's relative position bias: buckets of the first layer's bias table; 0 for none."
    )
    decoder_output_scale: bool = Field(
        default=False, description="T5 v1.0 multiplies the decoder output by d_model**-0.5 before the tied lm_head."
    )
    max_target_positions: Optional[PositiveInt] = Field(
        default=None, description="The decoder's longest input where the model has a limit (None: no limit)."
    )
    mlp_activation_dropout: float = Field(
        default=0.0, ge=0.0, lt=1.0, description="BART's activation_dropout: dropout between the MLP's activation and fc2."
    )
    num_mel_bins: NonNegativeInt = Field(
        default=0, description="Whisper: mel channels of the input_features its conv front end reads; 0 for a text encoder."
    )
    max_source_positions: Optional[PositiveInt] = Field(
        default=None, description="Whisper: the encoder's fixed length (input_features always hold twice as many frames)."
    )
    # ---- DeBERTa-v2/v3 (models/deberta_v2.py)
    disentangled: Optional[DisentangledAttention] = Field(
        default=None, description="DeBERTa's disentangled attention and relative position embeddings."
    )
    mlp_only_layers: tuple[NonNegativeInt, ...] = Field(
        default=(), description="Layers that are one norm and an MLP with no token mixer (Nemotron-H's '-' blocks)."
    )
    layer_mlp_only: bool = Field(default=False, description="Set on an MLP-only layer kind (see layer_kinds).")
    residual_in_fp32: bool = Field(
        default=False, description="Mamba-2: each block's residual is cast to fp32 before the add (residual_in_fp32)."
    )
    mamba: Optional[Mamba2Mixer] = Field(
        default=None, description="The Mamba-2 mixer of the layers in linear_attention_layers (state_space.py); None for none."
    )
    text_tower: Optional[TextTower] = Field(
        default=None, description="CLIP / SigLIP dual encoders: the text tower the contrastive task trains (text_tower.py)."
    )
    # ---- hyper-connections and per-layer n-gram embeddings (hyper_connections.py, models/qwen4_exp.py)
    hyper_connections: Optional[HyperConnections] = Field(
        default=None, description="Qwen4-Exp: hc_count residual streams, PLE and QSA sizes; None for one stream."
    )
    ple_layers: tuple[NonNegativeInt, ...] = Field(
        default=(), description="Layers (zero-indexed) with a per-layer n-gram embedding (Qwen4-Exp's ple_layer_ids)."
    )
    layer_ple_index: Optional[NonNegativeInt] = Field(
        default=None, description="Set on a PLE layer kind (see layer_kinds): its position in ple_layers."
    )
    gemma4: Optional[Gemma4Layout] = Field(
        default=None, description="Gemma 4's per-layer head widths, KV sharing, per-layer inputs and MoE block (gemma4_layout.py)."
    )

    @model_validator(mode="after")
    def _check_shapes(self) -> Architecture:
        if self.num_attention_heads % self.kv_heads != 0:
            raise FieldError(
                "num_key_value_heads",
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.kv_heads})"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads != 0:
            raise FieldError(
                "num_attention_heads",
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads}), or give head_dim"
            )
        if self._odd_fully_rotated_head():
            raise FieldError(
                "head_dim" if self.head_dim else "num_attention_heads",
                f"RoPE rotates pairs of dimensions: a fully rotated head must be even, got head_dim "
                f"{self.resolved_head_dim} (transformers' validate_rope refuses it; derived from hidden_size / "
                "num_attention_heads, the rotary tables are one wider than the head and the forward fails)"
            )
        if self.num_experts and self.num_experts_per_tok > self.num_experts:
            raise FieldError(
                "num_experts_per_tok",
                f"num_experts_per_tok ({self.num_experts_per_tok}) cannot exceed num_experts ({self.num_experts})"
            )
        if self.dense_layers:
            if not self.num_experts:
                raise ValueError("dense_layers applies to MoE models only (num_experts > 0)")
            beyond = [index for index in self.dense_layers if index >= self.num_hidden_layers]
            if beyond:
                raise ValueError(
                    f"dense_layers {beyond} are not layers of a {self.num_hidden_layers}-layer model"
                )
        if self.kv_lora_rank is not None:
            if self.kv_lora_rank > self.hidden_size:
                raise ValueError(f"kv_lora_rank ({self.kv_lora_rank}) cannot exceed hidden_size ({self.hidden_size})")
            if not self.qk_rope_head_dim or self.v_head_dim is None:
                raise ValueError("multi-head latent attention needs qk_rope_head_dim and v_head_dim")
        return self

    def _odd_fully_rotated_head(self) -> bool:
        """transformers' ``RotaryEmbeddingConfigMixin.validate_rope`` (modeling_rope_utils.py): a head wider than
        4 that RoPE rotates whole must be even (an odd partial rotary width is rounded and fits). Where the config
        class keeps no ``head_dim`` (Qwen2, Mixtral, Phi-3), transformers builds the model, and its first forward
        fails: ``inv_freq`` has ceil(d/2) entries, the cos/sin tables d + 1 columns (checked, transformers 5.24:
        "The size of tensor a (17) must match the size of tensor b (18)"). Not checked under
        MLA (its rotary part is ``qk_rope_head_dim``) nor when no layer has RoPE (Nemotron-H has no rope)."""
        if self.position_embedding != "rope" or self.is_mla or len(self.nope_layers) >= self.num_hidden_layers:
            return False
        head_dim = self.resolved_head_dim
        return head_dim > 4 and head_dim % 2 == 1 and self.rotary_dim == head_dim

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank is not None

    @property
    def qk_head_dim(self) -> int:
        """Per-head width of queries and keys: qk_nope_head_dim + qk_rope_head_dim under MLA, else head_dim."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.resolved_head_dim

    @property
    def image_tokens(self) -> int:
        """A vision encoder's sequence: ``(image_size / patch_size)²`` patches and the class tokens (0 for text models)."""
        if not self.image_size:
            return 0
        return (self.image_size // self.patch_size) ** 2 + self.class_tokens

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def rotary_dim(self) -> int:
        """Dims of each head that RoPE rotates (``int(head_dim * partial_rotary_factor)``, as transformers)."""
        return int(self.resolved_head_dim * self.partial_rotary_factor)

    @property
    def query_width(self) -> int:
        """a·d: the width of the concatenated query heads (and of attention's output)."""
        return self.num_attention_heads * self.resolved_head_dim

    @property
    def key_value_width(self) -> int:
        """k·d: the width of K (and of V)."""
        return self.kv_heads * self.resolved_head_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def layer_kinds(self) -> tuple[LayerKind, ...]:
        """The distinct layers of the model, each a homogeneous Architecture with the layers it describes.

        Most models have one kind. A MoE model with ``dense_layers`` has a dense kind (no experts, MLP
        width ``dense_intermediate_size``) besides the sparse one; ``nope_layers`` (Llama 4) split each
        kind again into layers with and without RoPE. Kinds are listed by their first layer.
        """
        sliding = frozenset(self.window_layers())
        linear = frozenset(self.linear_attention_layers)
        bare_first = not self.first_layer_attention_norm
        mlp_only = frozenset(self.mlp_only_layers)
        ple = {layer: position for position, layer in enumerate(self.ple_layers)}
        if (
            not self.dense_layers and not self.nope_layers and not sliding and not linear and not bare_first and not mlp_only
            and not ple and self.gemma4 is None
        ):
            return (LayerKind(self, tuple(range(self.num_hidden_layers))),)
        kv_shared = frozenset(self.gemma4.kv_shared_layers) if self.gemma4 is not None else frozenset()
        dense, nope = frozenset(self.dense_layers), frozenset(self.nope_layers)
        signatures: dict[tuple[Any, ...], list[int]] = {}
        for index in range(self.num_hidden_layers):
            signature = (
                index in dense, index in nope, index in sliding, index in linear, bare_first and index == 0, index in mlp_only,
                ple.get(index), index in kv_shared,
            )
            signatures.setdefault(signature, []).append(index)
        base = {
            "dense_layers": (), "dense_intermediate_size": None, "nope_layers": (), "sliding_layers": (),
            "linear_attention_layers": (), "mlp_only_layers": (), "ple_layers": (),
        }
        kinds = []
        for (is_dense, is_nope, is_sliding, is_linear, is_bare, is_mlp_only, ple_index, is_shared), indices in signatures.items():
            update = dict(base)
            update["layer_ple_index"] = ple_index
            update["layer_mlp_only"] = is_mlp_only
            update["layer_attention_norm"] = not is_bare
            update["layer_sliding"] = is_sliding
            update["layer_linear_attention"] = is_linear
            if is_dense:
                update.update(
                    num_experts=0,
                    num_experts_per_tok=1,
                    shared_expert_intermediate_size=0,
                    shared_expert_gate=False,
                    intermediate_size=self.dense_intermediate_size or self.intermediate_size,
                )
            if is_nope:
                update["layer_rope"] = False
            if self.gemma4 is not None:
                update.update(self.gemma4.kind_update(self, is_sliding, is_shared))
            kinds.append(LayerKind(self.model_copy(update=update), tuple(indices)))
        return tuple(kinds)

    def window_layers(self) -> tuple[int, ...]:
        """The layers whose attention has a sliding window."""
        if self.sliding_window is None:
            return ()
        if self.sliding_layers is None:
            return tuple(range(self.num_hidden_layers))
        return self.sliding_layers

    def kind_of_layer(self, index: int) -> int:
        """The position in :meth:`layer_kinds` of the kind that layer ``index`` belongs to."""
        for position, kind in enumerate(self.layer_kinds()):
            if index in kind.indices:
                return position
        raise IndexError(index)


class LayerKind(NamedTuple):
    """One kind of decoder layer: its homogeneous architecture and the layers of the model that have it."""

    architecture: Architecture
    indices: tuple[int, ...]

"""The vision half of a vision-language model: its tower, its projector, and how images become tokens.

A :class:`VisionStack` is what trainmem knows about the part of a VLM that runs before the language
model (transformers 5.24 ``<Wrapper>ForConditionalGeneration``): the vision tower's parameter tensors
(patch embedding and positions, ``num_layers`` identical encoder layers, the tensors after them), the
projector's (LLaVA's two-layer MLP, Gemma 3's pooled projection, Qwen-VL's patch merger, ...) and the
processor rule that turns an image of H × W pixels into patches for the tower and tokens for the
language model (``vision/tokens.py``). It is read from a ``config.json`` by ``vision/readers.py``.

Each layer is described in the vocabulary of :class:`~trainmem.architecture.Architecture` as well
(``layer_architecture``), so that the shared layer program (``layers.LayerProgram``) replays its
forward and backward on the tape: a pre-norm block, bidirectional attention (no causal mask; with a
fused SDPA/flash kernel the memory is that of a causal one), a plain or gated MLP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..architecture import Architecture
from ..models.blocks import ParameterTensor


@dataclass(frozen=True)
class TokenRule:
    """How the wrapper's processor turns one image into tower patches and language-model tokens.

    ``kind``:

    * ``fixed``: the image is resized to ``image_size`` × ``image_size`` (CLIP/SigLIP towers: LLaVA-1.5,
      Gemma 3); the tower sees ``(image_size / patch_size)²`` patches (+1 class token when ``class_token``);
      the language model gets ``tokens_per_image`` tokens (LLaVA's ``default`` strategy drops the class token;
      Gemma 3 average-pools to ``mm_tokens_per_image``);
    * ``smart_resize``: Qwen2-VL/2.5-VL/3-VL ``smart_resize`` to multiples of ``patch_size × merge`` within
      ``[min_pixels, max_pixels]``; patches ``(H/p)(W/p)``, tokens ``patches / merge²``;
    * ``longest_edge``: Pixtral / Mistral 3: resized down so that the longest edge is at most
      ``longest_edge``, patches ``ceil(H/p) × ceil(W/p)``, tokens ``rows × (cols + 1)`` after the
      ``merge × merge`` patch merger (one ``[IMG_BREAK]``/``[IMG_END]`` per row);
    * ``tiles``: Idefics3 / SmolVLM / Llama 4: the image is cut into ``tile_size`` tiles (up to
      ``max_tiles``), plus one global tile when there is more than one; each tile is a fixed-size tower
      input of ``(tile_size / patch_size)²`` patches (+1 class token for Llama 4) and gives
      ``tokens_per_tile`` tokens after pixel-(un)shuffle.
    """

    kind: str
    patch_size: int
    image_size: int = 0
    tokens_per_image: int = 0
    class_token: bool = False
    merge: int = 1
    temporal_patch_size: int = 1
    min_pixels: int = 0
    max_pixels: int = 0
    longest_edge: int = 0
    tile_size: int = 0
    max_tiles: int = 0
    tokens_per_tile: int = 0
    resize_longest_edge: int = 0
    """Idefics3/SmolVLM: the image is first resized so that its longest edge is at most this."""


@dataclass(frozen=True)
class VisionStack:
    """A VLM's vision tower and projector, as trainmem lists and replays them."""

    wrapper: str
    """The wrapper's ``model_type`` (``llava``, ``qwen2_5_vl``, ...)."""
    tower_type: str
    """``vision_config.model_type`` (``clip_vision_model``, ``siglip_vision_model``, ``pixtral``, ...)."""
    tower_prefix: str
    projector_prefix: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    head_dim: int
    norm: str
    mlp: str
    hidden_act: str
    attention_bias: bool
    mlp_bias: bool
    fused_qkv: bool
    rope: bool
    """2-D rotary positions inside attention (Qwen-VL, Pixtral, Llama 4) rather than learned absolute ones."""
    prelude: tuple[ParameterTensor, ...]
    """Patch embedding, class token, positions, pre-norm (relative to ``tower_prefix``)."""
    layer: tuple[ParameterTensor, ...]
    """One encoder layer's tensors (relative to the layer)."""
    postlude: tuple[ParameterTensor, ...]
    """Tensors after the layers that belong to the tower (post-norm, SigLIP's pooling head)."""
    projector: tuple[ParameterTensor, ...]
    """The projector / merger (relative to ``projector_prefix``)."""
    projector_in_features: int
    """Width of one projector input row (the tower's hidden size × merged patches)."""
    projector_hidden: int
    """Width of the projector's hidden layer (0 for a single projection)."""
    projector_out_features: int
    """The language model's hidden size."""
    tokens: TokenRule
    selected_layers: int = 1
    """Tower layers whose outputs feed the projector (LLaVA's vision_feature_layer list)."""
    keeps_all_hidden_states: bool = False
    """The wrapper calls the tower with ``output_hidden_states=True`` and picks a layer: every layer's output
    is alive until the tower returns (LLaVA, Mistral 3 with ``vision_feature_layer`` lists)."""
    outputs_in_model_output: bool = False
    """The wrapper's output object returns the tower's outputs (``image_outputs``: the hidden_states tuple, the
    projector's per-image features), which then live until the loss is taken (LLaVA; measured)."""
    unused_layers: int = 0
    """Last layers whose output no feature uses (LLaVA's ``vision_feature_layer=-2`` leaves one): they run, but
    their graph is dropped when the tower returns, so they get no gradients and no optimizer states."""
    unused_postlude: tuple[str, ...] = ()
    """Postlude tensors on no path to the loss (CLIP's ``post_layernorm`` of the pooled class token, SigLIP's
    pooling ``head``)."""
    other_towers: tuple[ParameterTensor, ...] = ()
    """Tensors of the wrapper's other towers (Gemma 4's audio tower and its embedder; names relative to ``model.``):
    counted, never run by a text or image step."""
    images_modelled: bool = True
    """False where the tower's forward is not replayed (Gemma 4): ``images`` is refused, and a text-only step
    leaves the tower and projector without gradients and optimizer states (they never run)."""
    notes: tuple[str, ...] = field(default=())

    # ------------------------------------------------------------------ counts
    @property
    def layer_numel(self) -> int:
        return sum(t.numel for t in self.layer)

    @property
    def tower_numel(self) -> int:
        return sum(t.numel for t in (*self.prelude, *self.postlude)) + self.num_layers * self.layer_numel

    @property
    def projector_numel(self) -> int:
        return sum(t.numel for t in self.projector)

    @property
    def numel(self) -> int:
        return self.tower_numel + self.projector_numel + sum(t.numel for t in self.other_towers)

    def tower_linear_modules(self) -> list[ParameterTensor]:
        """The tower layers' ``nn.Linear`` weights (what PEFT's all-linear adapts in the tower)."""
        return [t for t in self.layer if t.linear_features is not None]

    # ------------------------------------------------------------------ the tape
    def layer_architecture(self) -> Architecture:
        """One encoder layer in Architecture terms, for ``layers.trace_layer`` (names: Llama's)."""
        return Architecture(
            model_type="custom",
            vocab_size=1,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            head_dim=self.head_dim,
            intermediate_size=self.intermediate_size,
            mlp=self.mlp,  # type: ignore[arg-type]
            hidden_act=self.hidden_act,
            norm=self.norm,  # type: ignore[arg-type]
            attention_qkv_bias=self.attention_bias,
            attention_output_bias=self.attention_bias,
            mlp_bias=self.mlp_bias,
            fused_qkv=self.fused_qkv,
            position_embedding="rope" if self.rope else "learned",
        )


def linear(module: str, group: str, in_features: int, out_features: int, bias: bool) -> list[ParameterTensor]:
    """``nn.Linear(in_features, out_features, bias)``."""
    tensors = [ParameterTensor(f"{module}.weight", group, (out_features, in_features), (in_features, out_features))]
    if bias:
        tensors.append(ParameterTensor(f"{module}.bias", group, (out_features,)))
    return tensors


def norm(module: str, group: str, size: int, layernorm: bool) -> list[ParameterTensor]:
    """LayerNorm (weight, bias) or RMSNorm (weight)."""
    tensors = [ParameterTensor(f"{module}.weight", group, (size,))]
    if layernorm:
        tensors.append(ParameterTensor(f"{module}.bias", group, (size,)))
    return tensors


def encoder_layer(
    h: int,
    i: int,
    *,
    names: dict[str, str],
    layernorm: bool,
    attention_bias: bool,
    mlp_bias: bool,
    gated: bool,
    fused_qkv: bool,
    qkv_width: Optional[int] = None,
) -> list[ParameterTensor]:
    """One pre-norm encoder layer with module names ``names`` (keys: norm1, norm2, q, k, v, qkv, o,
    fc1, fc2, gate, up, down)."""
    width = qkv_width or h
    tensors = norm(names["norm1"], "vision_tower", h, layernorm)
    if fused_qkv:
        tensors += linear(names["qkv"], "vision_tower", h, 3 * width, attention_bias)
    else:
        for key in ("q", "k", "v"):
            tensors += linear(names[key], "vision_tower", h, width, attention_bias)
    tensors += linear(names["o"], "vision_tower", width, h, attention_bias)
    tensors += norm(names["norm2"], "vision_tower", h, layernorm)
    if gated:
        tensors += linear(names["gate"], "vision_tower", h, i, mlp_bias)
        tensors += linear(names["up"], "vision_tower", h, i, mlp_bias)
        tensors += linear(names["down"], "vision_tower", i, h, mlp_bias)
    else:
        tensors += linear(names["fc1"], "vision_tower", h, i, mlp_bias)
        tensors += linear(names["fc2"], "vision_tower", i, h, mlp_bias)
    return tensors

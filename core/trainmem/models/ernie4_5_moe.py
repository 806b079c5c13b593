"""ERNIE 4.5 MoE (``ernie4_5_moe``, Baidu ERNIE-4.5-21B-A3B / 300B-A47B; transformers/models/ernie4_5_moe, 5.24).

ERNIE 4.5's attention and fp32 interleaved RoPE (``models/ernie4_5.py``), ``use_bias`` on the attention, the
dense and shared MLPs and the output head (``lm_head`` is ``nn.Linear(h, vocab, bias=use_bias)``). Layer ``i``
is a MoE layer when ``(i + 1) % moe_layer_interval == 0`` and ``moe_layer_start_index <= i <=
moe_layer_end_index`` (-1: the last layer; ``Ernie4_5_MoeDecoderLayer.__init__``), else a dense MLP of
``intermediate_size``. A MoE layer has ``moe_num_experts`` fused 3-D experts of ``moe_intermediate_size``
(Mixtral's layout), ``moe_num_shared_experts`` always-on experts as one ``mlp.shared_experts`` MLP of
``moe_num_shared_experts × moe_intermediate_size``, and ``Ernie4_5_MoeTopKRouter``: with autocast off,
``F.linear(x.float(), weight.float())``, an fp32 softmax, top-``moe_k`` of the softmax plus
``moe_statics.e_score_correction_bias`` (an ``nn.Parameter`` with ``requires_grad=False``: counted among the
parameters, never trained), the chosen probabilities gathered and divided by ``clamp(sum, min=moe_norm_min)``,
cast to the stream's dtype. PEFT 0.21 has no default LoRA targets for ernie4_5_moe and converts its v4 MoE names
as Qwen2-MoE's (transformers/conversion_mapping.py: ernie4_5_moe -> qwen2_moe).

Not modelled: ``_keep_in_fp32_modules_strict`` keeps ``gate.weight`` and the correction bias in fp32 when a
checkpoint is loaded in 16 bits (``from_pretrained``); trainmem, like the measured steps (a model built from its
config and cast), gives them the model's dtype (E × h values per MoE layer), as for DeepSeek-V3 and GLM-4.5.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from .blocks import ModuleNames, ParameterTensor
from .ernie4_5 import Ernie4_5Program
from .family import QWEN2_MOE_STYLE_TARGETS, DecoderFamily, common_decoder_fields
from .fields import ConfigFields

ERNIE4_5_MOE_DEFAULTS = dict(
    vocab_size=103424,
    hidden_size=2560,
    intermediate_size=12288,
    num_hidden_layers=28,
    num_attention_heads=20,
    num_key_value_heads=4,
    max_position_embeddings=131072,
    tie_word_embeddings=True,
)
"""``Ernie4_5_MoeConfig``'s defaults (those of ERNIE-4.5-21B-A3B)."""

CORRECTION_BIAS = "mlp.gate.moe_statics.e_score_correction_bias"
NOT_TRAINED = "unused"
"""The group of a parameter that gets no gradient (``requires_grad=False`` here; see plan.tensor_trains)."""


@dataclass(frozen=True)
class Ernie4_5MoeNames(ModuleNames):
    shared_expert: str = "mlp.shared_experts"


class Ernie4_5MoeProgram(Ernie4_5Program):
    """ERNIE 4.5's layer with ``Ernie4_5_MoeTopKRouter``."""

    def _route(self, x: Sym) -> Sym:
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        rows = shape.stream_tokens * shape.experts_per_token
        router = self.expert_parameter(names.router, arch.num_experts * shape.hidden, self.trainability.trains(names.router))
        autocast, tape.autocast = tape.autocast, None  # maybe_autocast(enabled=False)
        try:
            x32 = tape.to(x, "fp32")
            w32 = tape.to(router, "fp32")
            logits = tape.linear(x32, w32, arch.num_experts)
            if x32 is not x:
                tape.release(x32)
            if w32 is not router:
                tape.release(w32)
            probs = tape.unary_saving_result("softmax", logits, dtype="fp32")
            tape.release(logits)
            biased = tape.scale(probs)  # moe_statics(probs): + e_score_correction_bias, for topk's indices only
            tape.release(biased)
            top = tape.gather(probs, rows, rows)  # torch.gather(probs, -1, selected_experts)
            tape.release(probs)
            total = tape.reduce(top, shape.stream_tokens)  # .sum(dim=-1, keepdim=True)
            clamped = tape.unary_saving_input("clamp", total)  # clamp(min=moe_norm_min) saves its input
            tape.release(total)
            normalized = tape.mul(top, clamped)  # the division saves both operands
            tape.release(top, clamped)
        finally:
            tape.autocast = autocast
        out = tape.to(normalized, x.dtype)
        if out is not normalized:
            tape.release(normalized)
        return out


def ernie_moe_layers(fields: ConfigFields, layers: int) -> tuple[int, ...]:
    interval = fields.integer("moe_layer_interval", 1)
    start = fields.integer("moe_layer_start_index", 1, minimum=0)
    end = fields.integer("moe_layer_end_index", -1, minimum=-1)
    end = layers - 1 if end == -1 else end
    return tuple(i for i in range(layers) if (i + 1) % interval == 0 and start <= i <= end)


class Ernie4_5Moe(DecoderFamily):
    model_type = "ernie4_5_moe"
    layers_save_rotary_tables = False  # apply_rotary_pos_emb saves repeat_interleaved copies (see DecoderFamily)
    names = Ernie4_5MoeNames()
    lora_default_targets = None
    moe_lora_conversion = QWEN2_MOE_STYLE_TARGETS

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, ERNIE4_5_MOE_DEFAULTS)
        if common["head_dim"] is None:  # getattr(config, "head_dim", hidden_size // num_attention_heads)
            common["head_dim"] = common["hidden_size"] // common["num_attention_heads"]
        layers = common["num_hidden_layers"]
        bias = fields.boolean("use_bias", False)
        experts = fields.integer("moe_num_experts", 64, aliases=("num_experts",))
        moe_layers = ernie_moe_layers(fields, layers) if experts else ()
        moe: dict[str, object] = {}
        if moe_layers:
            per_token = fields.integer("moe_k", 6, aliases=("num_experts_per_tok",))
            if per_token > experts:
                raise fields.fail("moe_k", f"cannot exceed moe_num_experts ({experts}), got {per_token}")
            width = fields.integer("moe_intermediate_size", 1536)
            moe = dict(
                intermediate_size=width,
                num_experts=experts,
                num_experts_per_tok=per_token,
                shared_expert_intermediate_size=width * fields.integer("moe_num_shared_experts", 2, minimum=0),
                dense_layers=tuple(i for i in range(layers) if i not in moe_layers),
                dense_intermediate_size=common["intermediate_size"],
            )
        return Architecture(
            **{**common, **moe},
            attention_qkv_bias=bias,
            attention_output_bias=bias,
            mlp_bias=bias,
            lm_head_bias=bias,
        )

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        tensors = super().layer(arch)
        if arch.is_moe:
            tensors.append(ParameterTensor(CORRECTION_BIAS, NOT_TRAINED, (1, arch.num_experts)))
        return tensors

    def head(self, arch: Architecture) -> list[ParameterTensor]:
        tensors = super().head(arch)
        if arch.lm_head_bias:  # nn.Linear(hidden_size, vocab_size, bias=use_bias), tied or not
            tensors.append(ParameterTensor(f"{self.names.lm_head}.bias", "lm_head", (arch.vocab_size,)))
        return tensors

    def rotary_tables_bytes(self, arch: Architecture, seq: int, stream_bytes: int) -> list[int]:
        return [seq * arch.rotary_dim * 4] * 2

    def program(self) -> type[LayerProgram]:
        return Ernie4_5MoeProgram

"""DeepSeek-V2 and DeepSeek-V3 (transformers/models/deepseek_v2, models/deepseek_v3), and Kimi-K2.

**Multi-head latent attention** (MLA, DeepSeek-V2 paper, arXiv:2405.04434 §2.1), as
``DeepseekV3Attention.forward`` runs it (transformers 5.24):

* the query: ``q_proj`` (h → a·(d_nope + d_rope)) when ``q_lora_rank`` is None, else the low-rank
  ``q_b_proj(q_a_layernorm(q_a_proj(x)))`` through a ``q_lora_rank``-wide latent (RMSNorm on it);
  split per head into a no-RoPE part (``qk_nope_head_dim``) and a RoPE part (``qk_rope_head_dim``);
* the keys and values: one ``kv_a_proj_with_mqa`` (h → ``kv_lora_rank`` + d_rope) split into the
  compressed latent (normed by ``kv_a_layernorm``) and one RoPE key shared by all heads;
  ``kv_b_proj`` expands the latent to a·(d_nope + ``v_head_dim``); each head's key is a new
  tensor ``[k_nope, k_rope]`` (``expand_kv``: ``new_empty`` and two ``copy_`` into slices), the
  query is ``torch.cat((q_nope, q_rope))``; queries and keys have d_nope + d_rope per head, values
  ``v_head_dim``, so SDPA gets different q/k and v head dims (on CPU it runs its math path; on
  CUDA flash attention needs equal head dims and the memory-efficient kernel runs: an assumption,
  torch's ``sdp_utils`` rules, not measured here);
* RoPE: DeepSeek-V3 rotates even/odd pairs (``rope_interleave``, default true:
  ``apply_rotary_pos_emb_interleave``) or halves; DeepSeek-V2 multiplies complex numbers
  (``apply_rotary_emb``: ``view_as_complex(x.float())`` times ``freqs_cis``, ``type_as(x)``).
  transformers sets ``config.head_dim = qk_rope_head_dim``: the rotary tables are that wide.

**MoE**: the first ``first_k_dense_replace`` layers have a dense MLP of ``intermediate_size``; the
others route each token to ``num_experts_per_tok`` of ``n_routed_experts`` experts of width
``moe_intermediate_size`` (transformers 5's fused 3-D ``experts.gate_up_proj``/``down_proj``) and add
``n_shared_experts`` always-on experts as one MLP of ``n_shared_experts × moe_intermediate_size``
(``mlp.shared_experts``). The router (``mlp.gate``, a custom module holding an fp32 ``weight``) runs
``F.linear(x.float(), weight.float())``; DeepSeek-V3 scores with a sigmoid, adds the
``e_score_correction_bias`` *buffer* (not a parameter) for the choice only, limits the choice to
``topk_group`` of ``n_group`` groups, gathers the chosen scores, optionally renormalises them
(``norm_topk_prob``) and scales by ``routed_scaling_factor``; DeepSeek-V2 scores with a softmax
(``topk_method`` greedy or group-limited). PEFT converts these families' v4 target names as for
Qwen2-MoE (transformers/conversion_mapping.py ``_MODEL_TO_CONVERSION_PATTERN``: deepseek_v2 and
deepseek_v3 -> qwen2_moe); PEFT has no default targets for them.

**Multi-token prediction**: ``DeepseekV3Config.num_mtp_layers`` (``num_nextn_predict_layers``)
describes MTP modules of the checkpoint, but ``DeepseekV3ForCausalLM`` does not build them
(``_keys_to_ignore_on_load_unexpected`` drops ``model.layers.61.*``); transformers builds them only
as a separate ``MtpModel`` for speculative decoding (modeling_layers.py). They are not counted; the
Architecture lists them in ``not_counted`` when the config has them.

**Kimi-K2** configs (``model_type`` "kimi_k2", remote code) have DeepSeek-V3's fields; transformers
reads them as deepseek_v3 (``Kimi_K25Config.__post_init__`` rewrites a ``kimi_k2`` text config to
``deepseek_v3``), and so does trainmem.
"""

from __future__ import annotations

from dataclasses import dataclass
from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from . import blocks
from .blocks import ModuleNames, ParameterTensor
from .family import QWEN2_MOE_STYLE_TARGETS, DecoderFamily
from .fields import ConfigFields


@dataclass(frozen=True)
class MlaNames(ModuleNames):
    """DeepSeek's module paths: the MLA projections and ``mlp.shared_experts`` (plural)."""

    shared_expert: str = "mlp.shared_experts"
    q_a_proj: str = "self_attn.q_a_proj"
    q_a_layernorm: str = "self_attn.q_a_layernorm"
    q_b_proj: str = "self_attn.q_b_proj"
    kv_a_proj: str = "self_attn.kv_a_proj_with_mqa"
    kv_a_layernorm: str = "self_attn.kv_a_layernorm"
    kv_b_proj: str = "self_attn.kv_b_proj"

    def module_paths(self) -> tuple[str, ...]:
        return super().module_paths() + (
            self.q_a_proj, self.q_a_layernorm, self.q_b_proj, self.kv_a_proj, self.kv_a_layernorm, self.kv_b_proj,
        )


MLA_NAMES = MlaNames()


def mla_attention(arch: Architecture, names: MlaNames) -> list[ParameterTensor]:
    """The parameters of ``DeepseekV3Attention.__init__`` (the same in DeepSeek-V2).

    The latent norms are RMSNorms inside ``self_attn``; they are listed in the attention group, as
    the layer program treats every ``self_attn.*`` module (freezing "norms" leaves them training).
    """
    h, heads, bias = arch.hidden_size, arch.num_attention_heads, arch.attention_qkv_bias
    qk, kv_rank = arch.qk_head_dim, arch.kv_lora_rank
    assert kv_rank is not None and arch.v_head_dim is not None
    tensors: list[ParameterTensor] = []
    if arch.q_lora_rank is None:
        tensors += blocks.linear(names.q_proj, "attention", h, heads * qk, False)
    else:
        tensors += blocks.linear(names.q_a_proj, "attention", h, arch.q_lora_rank, bias)
        tensors.append(ParameterTensor(f"{names.q_a_layernorm}.weight", "attention", (arch.q_lora_rank,)))
        tensors += blocks.linear(names.q_b_proj, "attention", arch.q_lora_rank, heads * qk, False)
    tensors += blocks.linear(names.kv_a_proj, "attention", h, kv_rank + arch.qk_rope_head_dim, bias)
    tensors.append(ParameterTensor(f"{names.kv_a_layernorm}.weight", "attention", (kv_rank,)))
    tensors += blocks.linear(names.kv_b_proj, "attention", kv_rank, heads * (arch.qk_nope_head_dim + arch.v_head_dim), False)
    tensors += blocks.linear(names.o_proj, "attention", heads * arch.v_head_dim, h, arch.attention_output_bias)
    return tensors


class MlaProgram(LayerProgram):
    """``DeepseekV3Attention`` / ``DeepseekV2Attention`` and the DeepSeek router on the tape."""

    names: MlaNames

    # ------------------------------------------------------------------ attention
    def attention(self, x: Sym) -> Sym:
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        tokens, heads = shape.tokens, shape.heads
        nope, rope, v_dim = arch.qk_nope_head_dim, arch.qk_rope_head_dim, arch.v_head_dim or 0
        qk = nope + rope
        kv_rank = arch.kv_lora_rank or 0
        x_tp = self._gather_sequence(x)
        if arch.q_lora_rank is None:
            q = self.linear(names.q_proj, x_tp, shape.hidden, heads * qk, False, x)
        else:
            q_latent = self.linear(names.q_a_proj, x_tp, shape.hidden, arch.q_lora_rank, arch.attention_qkv_bias, x)
            q_normed = self.rms_norm(names.q_a_layernorm, q_latent, tokens, arch.q_lora_rank)
            tape.release(q_latent)
            q = self.linear(names.q_b_proj, q_normed, arch.q_lora_rank, heads * qk, False)
            tape.release(q_normed)
        q_nope, q_rope = tape.split(q, [tokens * heads * nope, tokens * heads * rope])
        compressed = self.linear(names.kv_a_proj, x_tp, shape.hidden, kv_rank + rope, arch.attention_qkv_bias, x)
        if x_tp is not x:
            tape.release(x_tp)
        kv_latent, k_rope = tape.split(compressed, [tokens * kv_rank, tokens * rope])
        kv_normed = self.rms_norm(names.kv_a_layernorm, kv_latent, tokens, kv_rank)
        q_rotated = self._mla_rope(q_rope)
        k_rotated = self._mla_rope(k_rope)
        tape.release(compressed)
        query = self._concatenate(q_nope, q_rotated)  # torch.cat((q_pass, q_rot), dim=-1)
        tape.release(q, q_rotated)
        query = self._scale_query(query)
        # expand_kv: kv_b_proj, split into k_nope and v (views), k_rot expanded over the heads (a view)
        expanded = self.linear(names.kv_b_proj, kv_normed, kv_rank, heads * (nope + v_dim), False)
        tape.release(kv_normed)
        k_nope, value = tape.split(expanded, [tokens * heads * nope, tokens * heads * v_dim])
        k_rope_heads = tape.expand(k_rotated, tokens * heads * rope)
        key = self._concatenate(k_nope, k_rope_heads)  # new_empty + copy_ into both slices
        tape.release(k_rotated)
        out = self._mla_attention_core(query, key, value)
        tape.release(query, key, expanded)
        projected = self.linear(names.o_proj, out, heads * v_dim, shape.hidden, arch.attention_output_bias)
        tape.release(out)
        return self._scatter_sequence(projected)

    def _scale_query(self, query: Sym) -> Sym:
        """A hook after the query's ``torch.cat``: DeepSeek does nothing; Mistral 4 multiplies it by Llama 4's
        temperature (models/mistral4.py)."""
        return query

    def _concatenate(self, first: Sym, second: Sym) -> Sym:
        """A new tensor holding both parts (``torch.cat`` or ``new_empty`` + ``copy_``): nothing saved."""
        out = self.tape.new(first.numel + second.numel, self.tape.promote(first.dtype, second.dtype), True)
        self.tape.record("cat", [], [first, second], [out])
        return out

    def _mla_rope(self, x: Sym) -> Sym:
        """RoPE on the ``qk_rope_head_dim`` part (queries: every head; the key: one shared head)."""
        layout, tape = self.arch.rope_layout, self.tape
        rope = self.arch.qk_rope_head_dim
        if layout == "complex":
            # view_as_complex(x.float()) * freqs_cis (complex64: as many bytes as rope fp32 values),
            # view_as_real, .type_as(x); the product saves freqs_cis only (no grad)
            x32 = tape.to(x, "fp32")
            freqs = Sym(self.shape.seq * rope, "fp32", False, "external")
            product = tape.mul(x32, freqs)
            if x32 is not x:
                tape.release(x32)
            out = tape.to(product, x.dtype)
            if out is not product:
                tape.release(product)
            return out
        cos = Sym(self.shape.seq * rope // 2, self.kernels.stream_dtype, False, "external")
        sin = Sym(self.shape.seq * rope // 2, self.kernels.stream_dtype, False, "external")
        if layout == "interleaved":
            # apply_rotary_pos_emb_interleave: x1, x2 = x[..., 0::2], x[..., 1::2] (views);
            # cat([x1*cos - x2*sin, x2*cos + x1*sin]): four products, two sums, one cat
            x1, x2 = x.view(x.numel // 2), x.view(x.numel // 2)
            tape.record("split", [], [x], [x1, x2])
            parts = []
            for a, b in ((x1, x2), (x2, x1)):
                with_cos = tape.mul(a, cos)
                with_sin = tape.mul(b, sin)
                parts.append(tape.add(with_cos, with_sin))
                tape.release(with_cos, with_sin)
            out = self._concatenate(*parts)
            tape.release(*parts)
            return out
        full_cos = Sym(self.shape.seq * rope, self.kernels.stream_dtype, False, "external")
        full_sin = Sym(self.shape.seq * rope, self.kernels.stream_dtype, False, "external")
        with_cos = tape.mul(x, full_cos)
        rotated = tape.copy(x, backward_scratch_bytes=x.nbytes)  # rotate_half
        with_sin = tape.mul(rotated, full_sin)
        tape.release(rotated)
        out = tape.add(with_cos, with_sin)
        tape.release(with_cos, with_sin)
        return out

    def _mla_attention_core(self, q: Sym, k: Sym, v: Sym) -> Sym:
        """The attention kernel with q/k head dim d_nope + d_rope and v head dim ``v_head_dim``;
        returns o_proj's input (b, s, a·v_head_dim).

        CPU SDPA has no fused kernel for different q/k and v head dims (its flash kernel requires
        equal ones; measured with torch 2.13: the graph is the math path's bmm), so it runs the math
        path. On CUDA the memory-efficient kernel takes them (assumed, torch ``sdp_utils``).
        """
        kernel = self.kernels.attention
        if kernel == "fused" and self.kernels.device == "cpu":
            kernel = "math"
        if kernel == "fused":
            lse = self.shape.batch * self.shape.heads * self.shape.seq
            out = self.tape.fused_attention_value_dim(q, k, v, v.numel, lse, self.arch.attention_dropout > 0)
            return out
        if kernel == "math":
            return self._math_attention(q, k, v)
        if self.shape.batch == 1:
            return self._attention_core(q, k, v)
        # v is a strided slice of kv_b_proj's output: matmul cannot fold (b, heads) of it into one
        # batch dimension, so it makes (and bmm saves) a contiguous copy, and kv_b_proj's output is
        # freed (measured, torch 2.13 CPU: the eager step is 1 MiB lower per layer than saving the view)
        contiguous = self.tape.copy(v)
        out = self._attention_core(q, k, contiguous)
        self.tape.release(contiguous)
        return out

    def _context_numel(self, q: Sym, v: Sym) -> int:
        return v.numel // self.shape.kv_seq * self.shape.seq

    # ------------------------------------------------------------------ router
    def _route(self, x: Sym) -> Sym:
        """``DeepseekV3TopkRouter.forward`` / ``DeepseekV2TopkRouter.forward``: the top-k routing weights.

        ``F.linear(x.float(), weight.float())`` (autocast still runs it in 16 bits), sigmoid (V3) or
        fp32 softmax (V2) over the experts, the chosen scores gathered (the int64 indices saved),
        renormalised when ``norm_topk_prob`` (an in-place division: saves the weights and their sum),
        times ``routed_scaling_factor``. The group-limited choice (``n_group``, ``topk_group``) and V3's
        ``e_score_correction_bias`` only pick the indices: their tensors are transient.
        """
        arch, shape, tape = self.arch, self.shape, self.tape
        rows = shape.stream_tokens * shape.experts_per_token
        names = self.names
        router = self.expert_parameter(names.router, arch.num_experts * shape.hidden, self.trainability.trains(names.router))
        x32 = tape.to(x, "fp32")
        w32 = tape.to(router, "fp32")
        logits = tape.linear(x32, w32, arch.num_experts)
        if x32 is not x:
            tape.release(x32)
        if arch.router_scoring == "sigmoid":
            scores = tape.unary_saving_result("sigmoid", logits)
            choice = tape.scale(scores)  # scores + e_score_correction_bias, then masked_fill per group
            masked = tape.scale(choice)
            tape.release(choice, masked)
        else:
            scores = tape.unary_saving_result("softmax", logits, dtype="fp32")
        tape.release(logits)
        return chosen_router_weights(arch, shape, tape, scores, rows)


def chosen_router_weights(arch, shape, tape, scores: Sym, rows: int) -> Sym:
    """The tail DeepSeek's and Mistral 4's top-k routers share: the chosen scores gathered
    (``scores.gather(1, topk_indices)``: the int64 indices saved), renormalised when ``norm_topk_prob``
    (``topk_weights /= topk_weights.sum(-1) + 1e-20``: the weights and their sum saved), times
    ``routed_scaling_factor``."""
    top = tape.gather(scores, rows, rows)
    tape.release(scores)
    if arch.norm_topk_prob:
        total = tape.reduce(top, shape.stream_tokens)
        denominator = tape.scale(total)  # + 1e-20
        tape.release(total)
        normalized = tape.mul(top, denominator)  # topk_weights /= denominator
        tape.release(top, denominator)
        top = normalized
    scaled = tape.scale(top)  # * routed_scaling_factor
    tape.release(top)
    return scaled


DEEPSEEK_V3_DEFAULTS = dict(
    vocab_size=129280,
    hidden_size=7168,
    intermediate_size=18432,
    moe_intermediate_size=2048,
    num_hidden_layers=61,
    num_attention_heads=128,
    n_shared_experts=1,
    n_routed_experts=256,
    routed_scaling_factor=2.5,
    kv_lora_rank=512,
    q_lora_rank=1536,
    qk_rope_head_dim=64,
    v_head_dim=128,
    qk_nope_head_dim=128,
    n_group=8,
    topk_group=4,
    num_experts_per_tok=8,
    first_k_dense_replace=3,
    norm_topk_prob=True,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
    rope_interleave=True,
)
"""``DeepseekV3Config``'s defaults (those of DeepSeek-V3)."""

DEEPSEEK_V2_DEFAULTS = dict(
    vocab_size=102400,
    hidden_size=4096,
    intermediate_size=11008,
    moe_intermediate_size=1407,
    num_hidden_layers=32,
    num_attention_heads=32,
    n_shared_experts=2,
    n_routed_experts=64,
    routed_scaling_factor=1.0,
    kv_lora_rank=512,
    q_lora_rank=1536,
    qk_rope_head_dim=64,
    v_head_dim=128,
    qk_nope_head_dim=128,
    n_group=None,
    topk_group=None,
    num_experts_per_tok=6,
    first_k_dense_replace=0,
    norm_topk_prob=False,
    max_position_embeddings=2048,
    tie_word_embeddings=False,
)
"""``DeepseekV2Config``'s defaults, except ``num_experts_per_tok``: the class leaves it None, which
``DeepseekV2TopkRouter`` cannot run (``topk(k=None)``); trainmem assumes 6, the value of every
released DeepSeek-V2 checkpoint (DeepSeek-V2, -V2-Lite, -V2.5 config.json)."""


class DeepseekV3(DecoderFamily):
    model_type = "deepseek_v3"
    names = MLA_NAMES
    lora_default_targets = None
    moe_lora_conversion = QWEN2_MOE_STYLE_TARGETS
    defaults = DEEPSEEK_V3_DEFAULTS
    router_scoring = "sigmoid"
    has_mtp_field = True
    """``num_nextn_predict_layers`` (DeepseekV3Config's ``num_mtp_layers``)."""
    has_mlp_bias_field = False
    """``mlp_bias`` (DeepseekV2MLP reads it; DeepseekV3MLP has no biases)."""

    def read_config(self, fields: ConfigFields) -> Architecture:
        d = self.defaults
        heads = fields.integer("num_attention_heads", d["num_attention_heads"])
        layers = fields.layers(d["num_hidden_layers"])
        experts = fields.integer("n_routed_experts", d["n_routed_experts"], aliases=("num_local_experts",))
        per_token = fields.optional_integer("num_experts_per_tok") or d["num_experts_per_tok"]
        first_dense = fields.integer("first_k_dense_replace", d["first_k_dense_replace"], minimum=0)
        dense = tuple(range(min(first_dense, layers))) if experts else ()
        moe_width = fields.integer("moe_intermediate_size", d["moe_intermediate_size"])
        shared = fields.integer("n_shared_experts", d["n_shared_experts"], minimum=0)
        kv_rank = fields.integer("kv_lora_rank", d["kv_lora_rank"])
        hidden = fields.integer("hidden_size", d["hidden_size"])
        if kv_rank > hidden:
            raise fields.fail("kv_lora_rank", f"cannot exceed hidden_size ({hidden}), got {kv_rank}")
        if experts and per_token > experts:
            raise fields.fail("num_experts_per_tok", f"cannot exceed n_routed_experts ({experts}), got {per_token}")
        groups = fields.optional_integer("n_group") or d["n_group"]
        if experts and groups and experts % groups:
            raise fields.fail("n_group", f"must divide n_routed_experts ({experts}), got {groups}")
        topk_group = fields.optional_integer("topk_group") or d["topk_group"]
        if groups and topk_group and topk_group > groups:
            raise fields.fail("topk_group", f"cannot exceed n_group ({groups}), got {topk_group}")
        bias = fields.boolean("attention_bias", False)
        rope = fields.integer("qk_rope_head_dim", d["qk_rope_head_dim"], minimum=2)
        if rope % 2:
            raise fields.fail("qk_rope_head_dim", f"must be even (RoPE rotates pairs), got {rope}")
        mtp = fields.integer("num_nextn_predict_layers", 1, minimum=0, aliases=("num_mtp_layers",)) if self.has_mtp_field else 0
        not_counted = (
            (f"{mtp} multi-token-prediction layer(s) of the checkpoint (transformers does not build them for training)",)
            if mtp
            else ()
        )
        return Architecture(
            model_type=self.model_type,
            vocab_size=fields.integer("vocab_size", d["vocab_size"]),
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,  # MLA: every head has its own key and value (kv_b_proj)
            head_dim=rope,  # transformers: config.head_dim = qk_rope_head_dim (the rotary tables' width)
            intermediate_size=moe_width if experts else fields.integer("intermediate_size", d["intermediate_size"]),
            hidden_act=fields.activation("hidden_act", "silu"),
            max_position_embeddings=fields.integer("max_position_embeddings", d["max_position_embeddings"]),
            tie_word_embeddings=fields.boolean("tie_word_embeddings", d["tie_word_embeddings"]),
            attention_dropout=fields.probability("attention_dropout"),
            attention_qkv_bias=bias,
            attention_output_bias=bias,
            mlp_bias=fields.boolean("mlp_bias", False) if self.has_mlp_bias_field else False,
            num_experts=experts,
            num_experts_per_tok=per_token if experts else 1,
            shared_expert_intermediate_size=moe_width * shared if experts else 0,
            dense_layers=dense,
            dense_intermediate_size=fields.integer("intermediate_size", d["intermediate_size"]) if experts else None,
            kv_lora_rank=kv_rank,
            q_lora_rank=fields.optional_integer("q_lora_rank") if "q_lora_rank" in fields.config else d["q_lora_rank"],
            qk_nope_head_dim=fields.integer("qk_nope_head_dim", d["qk_nope_head_dim"], minimum=0),
            qk_rope_head_dim=rope,
            v_head_dim=fields.integer("v_head_dim", d["v_head_dim"]),
            rope_layout=self._rope_layout(fields),
            router_scoring=self.router_scoring,
            router_score_correction_bias=self.router_scoring == "sigmoid",
            norm_topk_prob=self._renormalises(fields),
            not_counted=not_counted,
        )

    def _rope_layout(self, fields: ConfigFields) -> str:
        return "interleaved" if fields.boolean("rope_interleave", True) else "half"

    def _renormalises(self, fields: ConfigFields) -> bool:
        return fields.boolean("norm_topk_prob", True)

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        names = self.names
        assert isinstance(names, MlaNames)
        mlp = blocks.moe_mlp(arch, names) if arch.is_moe else blocks.dense_mlp(arch, names, names.mlp, arch.intermediate_size)
        return mla_attention(arch, names) + mlp + blocks.layer_norms(arch, names)

    def program(self) -> type[LayerProgram]:
        return MlaProgram


class DeepseekV2(DeepseekV3):
    model_type = "deepseek_v2"
    defaults = DEEPSEEK_V2_DEFAULTS
    router_scoring = "softmax"
    has_mtp_field = False
    has_mlp_bias_field = True

    def _rope_layout(self, fields: ConfigFields) -> str:
        return "complex"

    def _renormalises(self, fields: ConfigFields) -> bool:
        """``DeepseekV2TopkRouter.forward`` never renormalises (``norm_topk_prob`` is read by nothing)."""
        return False

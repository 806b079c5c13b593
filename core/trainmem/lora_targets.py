"""Which tensors PEFT's LoRA adapts, and how large each adapter is (peft 0.21, transformers 5.24).

Linear modules: ``target_modules`` entries match a module path by its last components
(``module == target or module.endswith("." + target)``, peft/tuners/tuners_utils.py
``check_target_module_exists``); ``"all-linear"`` means every ``nn.Linear``/``Conv1D`` except the
output embedding (``_maybe_include_all_linear_layers``). An adapter on a linear of ``in`` → ``out``
features holds ``r·(in + out)`` elements (``lora_A`` r×in, ``lora_B`` out×r).

MoE families whose v4 layout transformers 5 fused (the experts became two 3-D parameters, the
router a custom module) get PEFT's conversion (peft/utils/transformers_weight_conversion.py
``_convert_peft_config_moe``): each target naming a v4 module in the family's
``moe_lora_conversion`` map becomes a *parameter* target (the router's ``gate.weight``, the fused
``gate_up_proj``, ``down_proj``) and is no longer a module target. ``"all-linear"`` first resolves to
the leaf names of the linear modules plus every v4 name of the map, so it adapts the router and
both expert parameters, and drops the dense MLPs whose leaf names coincide with the v4 expert names
(``gate_proj``, ``up_proj``, ``down_proj`` in Qwen-MoE-style models). Targets fused into one parameter
(``w1`` and ``w3`` → ``gate_up_proj``) must be given together, and the fused parameter's rank is
``r × len(fused)`` (``rank_pattern``). A parameter adapter (``ParamWrapper``) on a parameter of shape
(E, out, in) holds ``lora_A`` (r·E)×in and ``lora_B`` out×(r·E); on the 2-D router (E, h) r·h + E·r.
Checked against PEFT by building the models (tests/test_families.py): Mixtral-8x7B with r=16 and
all-linear trains 359,665,664 parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from .errors import FieldError
from .inventory import LayerGroup, ModelInventory

LINEAR_TARGET_ALL = "all-linear"

COLUMN_PARALLEL = (
    "q_proj", "k_proj", "v_proj", "qkv_proj", "c_attn", "query_key_value", "gate_proj", "up_proj", "gate_up_proj",
    "c_fc", "fc1", "dense_h_to_4h",
)
"""Linear layers whose output features tensor parallelism splits (Megatron's ColumnParallelLinear)."""
ROW_PARALLEL = ("o_proj", "c_proj", "down_proj", "fc2", "dense", "dense_4h_to_h")
"""Linear layers whose input features tensor parallelism splits (RowParallelLinear)."""


@dataclass(frozen=True)
class AdapterTensor:
    """The LoRA A and B of one adapted tensor of a decoder layer."""

    module: str
    in_features: int
    out_features: int
    rank: int
    """The adapter's rank (for fused experts: r, or r × fused projections, per expert)."""
    experts: int = 1
    """Experts the adapter spans (a ParamWrapper over a 3-D expert parameter); 1 otherwise."""
    magnitude: bool = False
    """DoRA: a trained magnitude vector of ``out_features`` elements (``lora_magnitude_vector``)."""

    def numel_per_layer(self, tensor_parallel: int, expert_parallel: int) -> int:
        """Elements of A and B (and DoRA's magnitude) on one rank."""
        if self.experts > 1:
            return self.rank * (self.experts // expert_parallel) * (self.in_features + self.out_features)
        in_features, out_features = self.in_features, self.out_features
        leaf = self.module.rsplit(".", 1)[-1]
        if leaf in COLUMN_PARALLEL:
            out_features //= tensor_parallel
        elif leaf in ROW_PARALLEL:
            in_features //= tensor_parallel
        return self.rank * (in_features + out_features) + (out_features if self.magnitude else 0)


@dataclass(frozen=True)
class ExpertTargets:
    """The parameters PEFT adapts in MoE layers after its v4→v5 conversion, with their rank multipliers."""

    router: bool = False
    gate_up_proj: int = 0
    """0: not adapted; otherwise the rank multiplier (2 when w1 and w3 were both targeted)."""
    down_proj: int = 0


@dataclass(frozen=True)
class LoraTargets:
    """What one LoRA configuration adapts in a model."""

    rank: int
    modules: frozenset[str]
    """Linear module paths (layer-relative) that carry an adapter."""
    experts: ExpertTargets
    dora: bool = False
    """PEFT use_dora: each linear adapter also has a magnitude vector (``trainmem.dora``)."""

    def adapts(self, path: str, names) -> bool:
        """Whether ``path`` (a linear module, the router module, or ``<experts>.gate_up_proj`` /
        ``<experts>.down_proj``) carries an adapter."""
        if path in self.modules:
            return True
        if path == names.router:
            return self.experts.router
        if path == f"{names.experts}.gate_up_proj":
            return bool(self.experts.gate_up_proj)
        if path == f"{names.experts}.down_proj":
            return bool(self.experts.down_proj)
        return False

    def adapters_of(self, group: LayerGroup) -> list[AdapterTensor]:
        """The adapters of one layer of ``group``'s kind."""
        adapters = []
        for tensor in group.tensors:
            if tensor.linear_features is not None and tensor.module in self.modules:
                in_features, out_features = tensor.linear_features
                adapters.append(AdapterTensor(tensor.module, in_features, out_features, self.rank, magnitude=self.dora))
            elif tensor.group == "router" and self.experts.router:
                experts, hidden = tensor.shape
                adapters.append(AdapterTensor(tensor.module, hidden, experts, self.rank))
            elif tensor.group == "experts":
                leaf = tensor.name.rsplit(".", 1)[-1]
                multiplier = getattr(self.experts, leaf, 0) if leaf in ("gate_up_proj", "down_proj") else 0
                if multiplier:
                    experts, out_features, in_features = tensor.shape
                    adapters.append(
                        AdapterTensor(tensor.name, in_features, out_features, self.rank * multiplier, experts)
                    )
        return adapters


def model_level_linears(family, inventory: ModelInventory) -> list:
    """``nn.Linear`` modules outside the decoder layers that PEFT adapts too (``all-linear`` or a matching name),
    as the family lists them (``DecoderFamily.model_level_lora_modules``: Gemma 4's ``per_layer_model_projection``)."""
    modules = getattr(family, "model_level_lora_modules", ())
    return [t for t in inventory.embedding if t.linear_features is not None and t.module in modules]


def model_level_group(family, inventory: ModelInventory, architecture) -> Optional[LayerGroup]:
    """Those modules as a one-off group (count 1), for :meth:`LoraTargets.adapters_of`; None when there are none."""
    tensors = model_level_linears(family, inventory)
    return LayerGroup(architecture, tuple(tensors), (0,)) if tensors else None


def _matches(module: str, target: str) -> bool:
    return module == target or module.endswith("." + target)


def resolve_lora_targets(lora, family, inventory: ModelInventory) -> LoraTargets:
    """PEFT's adapted tensors for a ``LoRAConfig`` on a model of ``family`` (see the module docstring).

    Raises FieldError (``finetuning.lora.target_modules``) where PEFT refuses the configuration.
    """
    field = "finetuning.lora.target_modules"
    targets: Optional[Union[str, list[str]]] = lora.target_modules
    if targets is None:
        if family.lora_default_targets is None:
            raise FieldError(
                field,
                f"PEFT has no default target_modules for model_type {family.model_type!r}; give target_modules "
                "(module names such as q_proj, v_proj) or 'all-linear'",
            )
        targets = list(family.lora_default_targets)
    linear = inventory.linear_modules() + model_level_linears(family, inventory)
    conversion = dict(family.moe_lora_conversion)
    moe = any(group.architecture.is_moe for group in inventory.layer_groups)
    if targets == LINEAR_TARGET_ALL:
        if not (conversion and moe):
            return LoraTargets(lora.r, frozenset(t.module for t in linear), ExpertTargets(), lora.use_dora)
        targets = sorted({t.module.rsplit(".", 1)[-1] for t in linear} | set(conversion))
    module_targets = list(targets)
    expert_hits: dict[str, set[str]] = {}
    if conversion and moe:
        module_targets = []
        for target in targets:
            old = next((name for name in conversion if target == name or target.endswith("." + name)), None)
            if old is None:
                module_targets.append(target)
            else:
                expert_hits.setdefault(conversion[old], set()).add(old)
    fused_sources: dict[str, set[str]] = {}
    for old, new in conversion.items():
        fused_sources.setdefault(new, set()).add(old)
    multipliers: dict[str, int] = {}
    for new, hits in expert_hits.items():
        required = fused_sources[new]
        if len(hits) < len(required):
            missing = ", ".join(sorted(required - hits))
            raise FieldError(
                field,
                f"{', '.join(sorted(hits))} fused into {new} in transformers 5: target {missing} too (PEFT refuses otherwise)",
            )
        multipliers[new] = len(required)
    modules = frozenset(t.module for t in linear if any(_matches(t.module, target) for target in module_targets))
    experts = ExpertTargets(
        router="router" in multipliers, gate_up_proj=multipliers.get("gate_up_proj", 0), down_proj=multipliers.get("down_proj", 0)
    )
    if not modules and not any((experts.router, experts.gate_up_proj, experts.down_proj)):
        names = sorted({t.module.rsplit(".", 1)[-1] for t in linear} | set(conversion if moe else ()))
        raise FieldError(
            field, f"{list(targets)} match no linear module of this model; allowed: {', '.join(names)}, or 'all-linear'"
        )
    return LoraTargets(lora.r, modules, experts, lora.use_dora)

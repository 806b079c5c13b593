"""Every parameter tensor of a model, listed from its Architecture by its family.

The inventory is the single place that knows which tensors a model has and how big they
are; parameter counts, model-state bytes, LoRA targets and per-layer ZeRO-3/FSDP gathers
are all derived from it. The family (``trainmem.models``) composes the tensors from shared
blocks with the names of the Hugging Face modules (``self_attn.q_proj``,
``mlp.experts.gate_up_proj``, GPT-2's ``attn.c_attn``), so that LoRA ``target_modules`` match
the way PEFT matches them: by the last components of the module path.

A model's decoder layers come in one or more *kinds* (``Architecture.layer_kinds``): DeepSeek's
dense first layers and its MoE layers, say. Each kind lists the tensors of one of its layers and
the indices of the layers that have it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .architecture import Architecture
from .models import family_for
from .models.blocks import ParameterTensor

__all__ = ["LayerGroup", "ModelInventory", "ParameterTensor", "build_inventory"]


@dataclass(frozen=True)
class LayerGroup:
    """The tensors of one decoder layer of a kind, and the layers of the model of that kind."""

    architecture: Architecture
    tensors: tuple[ParameterTensor, ...]
    indices: tuple[int, ...]

    @property
    def count(self) -> int:
        return len(self.indices)

    @property
    def layer_numel(self) -> int:
        return sum(t.numel for t in self.tensors)

    def count_in(self, first: int, stop: int) -> int:
        """Layers of this kind among layers ``first`` … ``stop - 1`` (a pipeline stage)."""
        return sum(1 for index in self.indices if first <= index < stop)


@dataclass(frozen=True)
class ModelInventory:
    """The parameter tensors of a model, grouped by where they sit in the forward pass."""

    embedding: tuple[ParameterTensor, ...]
    layer_groups: tuple[LayerGroup, ...]
    head: tuple[ParameterTensor, ...]
    num_layers: int
    tied_embeddings: bool

    @property
    def embedding_numel(self) -> int:
        return sum(t.numel for t in self.embedding)

    @property
    def head_numel(self) -> int:
        return sum(t.numel for t in self.head)

    @property
    def layers_numel(self) -> int:
        return sum(group.layer_numel * group.count for group in self.layer_groups)

    @property
    def num_parameters(self) -> int:
        """Unique parameters, as ``sum(p.numel() for p in model.parameters())`` counts them."""
        return self.embedding_numel + self.layers_numel + self.head_numel

    @property
    def largest_tensor_numel(self) -> int:
        layer_tensors = [t for group in self.layer_groups for t in group.tensors]
        return max(t.numel for t in (*self.embedding, *layer_tensors, *self.head))

    def linear_modules(self) -> list[ParameterTensor]:
        """The ``nn.Linear`` weights of the decoder layers, each distinct path once (what LoRA may adapt)."""
        seen: dict[str, ParameterTensor] = {}
        for group in self.layer_groups:
            for tensor in group.tensors:
                if tensor.linear_features is not None:
                    seen.setdefault(tensor.name, tensor)
        for tensor in self.head_linear_modules():
            seen.setdefault(tensor.name, tensor)
        return list(seen.values())

    def head_linear_modules(self) -> list[ParameterTensor]:
        """``nn.Linear`` weights of the base model's last module before the head (group ``norms``: Qwen4-Exp's
        ``hyper_connection_mixer``), which PEFT's ``all-linear`` adapts; the output head itself it leaves out."""
        return [t for t in self.head if t.linear_features is not None and t.group == "norms"]

    def head_group(self) -> LayerGroup:
        """The head's tensors as a one-layer group (for the LoRA adapters of :meth:`head_linear_modules`)."""
        return LayerGroup(self.layer_groups[0].architecture, tuple(self.head_linear_modules()), (0,))


def build_inventory(arch: Architecture) -> ModelInventory:
    """List the parameter tensors of ``arch`` in the order the forward pass uses them."""
    family = family_for(arch)
    groups = tuple(
        LayerGroup(kind.architecture, tuple(family.layer(kind.architecture)), kind.indices) for kind in arch.layer_kinds()
    )
    return ModelInventory(
        embedding=tuple(family.embedding(arch)),
        layer_groups=groups,
        head=tuple(family.head(arch)),
        num_layers=arch.num_hidden_layers,
        tied_embeddings=arch.tie_word_embeddings,
    )

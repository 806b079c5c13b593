"""Which modules PEFT's ``modules_to_save`` trains as full copies (peft 0.21).

``get_peft_model`` wraps every module whose name ends with one of the ``modules_to_save`` strings
(a plain string suffix: ``key.endswith(target_key)`` over ``model.named_modules()``,
peft/utils/other.py ``_set_trainable``) in a ``ModulesToSaveWrapper``: the original module is
frozen (``original_module.requires_grad_(False)``) and a ``copy.deepcopy`` of it, in the same dtype,
trains in its place (``ModulesToSaveWrapper.update`` and ``_forward_wrapped``). So each matched module
costs its weights twice, and its copy's gradient and optimizer states; the forward runs the copy,
which saves what a trained module saves.

A wrapped module that is not a leaf (``self_attn``, ``mlp``) copies all the tensors below it, so a
tensor is saved when any leading part of its module path matches. Paths are matched relative to their
scope (``embed_tokens``, ``norm``, ``lm_head``; ``self_attn.q_proj`` inside a decoder layer), so a target
written with the model's own prefix (``model.embed_tokens``) matches by its last components too.

Not modelled, refused with a one-line error: targets naming one layer (``layers.3.mlp``), a module that
also carries a LoRA adapter, and tied input/output embeddings (PEFT copies the tied weight into
separate trained tensors, which trainmem's inventory keeps as one).
"""

from __future__ import annotations

from .errors import FieldError
from .inventory import ModelInventory, ParameterTensor

FIELD = "finetuning.lora.modules_to_save"


def _prefixes(module: str) -> list[str]:
    """``self_attn.q_proj`` -> ``self_attn``, ``self_attn.q_proj``: every module the tensor sits in."""
    parts = module.split(".")
    return [".".join(parts[: end + 1]) for end in range(len(parts))]


def _matches(module: str, target: str) -> bool:
    return any(path.endswith(target) or target.endswith("." + path) for path in _prefixes(module))


def saved_tensor_names(
    targets: list[str], inventory: ModelInventory, lm_head: str = "lm_head", implicit: tuple[str, ...] = ()
) -> frozenset[str]:
    """Names of the inventory tensors (embedding, layer and head scopes) that ``targets`` copy and train.

    ``implicit``: targets PEFT adds itself for the task type (``tasks.peft_task_modules_to_save``:
    ``classifier``, ``score``); each may match nothing.

    Raises FieldError (``finetuning.lora.modules_to_save``) for a target that matches nothing, names one
    layer, or meets tied embeddings.
    """
    if implicit:
        scopes_all = [*inventory.embedding, *inventory.head, *(t for g in inventory.layer_groups for t in g.tensors)]
        present = [target for target in implicit if any(_matches(t.module, target) for t in scopes_all)]
        targets = [*targets, *(target for target in present if target not in targets)]
    if not targets:
        return frozenset()
    scopes: list[ParameterTensor] = [*inventory.embedding, *inventory.head]
    scopes += [tensor for group in inventory.layer_groups for tensor in group.tensors]
    found: set[str] = set()
    tied_head = [tensor for tensor in inventory.embedding if tensor.group == "embeddings"][:1] if inventory.tied_embeddings else []
    for target in targets:
        if any(part.isdigit() for part in target.split(".")):
            raise FieldError(FIELD, f"{target!r} names one layer; only modules of every layer are modelled")
        if tied_head and _matches(lm_head, target):  # the output embedding, tied to the input one
            found.add(tied_head[0].name)
            continue
        hits = {tensor.name for tensor in scopes if _matches(tensor.module, target)}
        if not hits:
            names = sorted({path for tensor in scopes for path in _prefixes(tensor.module)})
            raise FieldError(FIELD, f"{target!r} matches no module of this model; allowed: {', '.join(names)}")
        found |= hits
    ends = {tensor.name for tensor in (*inventory.embedding, *inventory.head) if tensor.group in ("embeddings", "lm_head")}
    if inventory.tied_embeddings and found & ends:
        raise FieldError(
            FIELD,
            "modules_to_save on tied input/output embeddings (tie_word_embeddings) is not modelled: PEFT trains "
            "separate copies of the tied weight",
        )
    return frozenset(found)


def check_quantized_base(saved: frozenset[str], inventory: ModelInventory, method: str) -> None:
    """A ``modules_to_save`` copy of a 4-bit layer module is not modelled (the copy of a ``Linear4bit``)."""
    layer_names = {tensor.name for group in inventory.layer_groups for tensor in group.tensors}
    if method == "qlora" and saved & layer_names:
        raise FieldError(FIELD, "copies of quantized decoder-layer modules under QLoRA are not modelled")


def check_no_adapter_overlap(saved: frozenset[str], adapted_modules: frozenset[str]) -> None:
    """PEFT would wrap a LoRA layer in a ModulesToSaveWrapper; trainmem does not model that combination."""
    both = sorted(name.rsplit(".", 1)[0] for name in saved if name.rsplit(".", 1)[0] in adapted_modules)
    if both:
        raise FieldError(
            FIELD, f"{', '.join(dict.fromkeys(both))} also carries a LoRA adapter (target_modules); not modelled"
        )

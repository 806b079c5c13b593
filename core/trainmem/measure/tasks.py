"""The measured step of an encoder's task (:mod:`trainmem.tasks`): its model class, batch and loss.

* ``sequence_classification`` / ``token_classification`` / ``masked_lm``:
  ``AutoModelFor<Task>.from_config(config, num_labels=...)`` and ``model(input_ids=ids,
  labels=labels).loss``; the labels are int64 (b,) or (b, s) tensors made with the batch.
* ``embedding``: ``AutoModel`` without the pooler (``add_pooling_layer=False``) and
  sentence-transformers 6.2's ``MultipleNegativesRankingLoss`` with mean pooling, written out:
  ``mask = attention_mask.unsqueeze(-1).to(dtype)``, ``(hidden * mask).sum(1)`` (fp32 accumulation
  for 16-bit hidden states) over ``mask.sum(1).clamp(min=1e-9)``, ``cos_sim`` (both sides
  L2-normalised, then ``mm``) of anchors and positives times 20, cross-entropy against
  ``arange(b)``. The anchors and positives are encoded in one forward of 2·b sequences
  (sentence-transformers encodes each column in its own forward: the same saved activations).
  The attention mask (all ones) is a batch tensor; it is not passed to the encoder (an all-ones
  mask is skipped by transformers' SDPA mask anyway).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from ..architecture import Architecture

CONTRASTIVE_SCALE = 20.0


def model_class(task: str) -> Any:
    import transformers

    return {
        "sequence_classification": transformers.AutoModelForSequenceClassification,
        "token_classification": transformers.AutoModelForTokenClassification,
        "masked_lm": transformers.AutoModelForMaskedLM,
        "embedding": transformers.AutoModel,
        "image_classification": transformers.AutoModelForImageClassification,
        "contrastive": transformers.AutoModel,  # CLIPModel / SiglipModel
    }[task]


def build_kwargs(arch: Architecture) -> dict[str, Any]:
    """Keyword arguments of ``from_config`` for the task's model class."""
    from ..models import family_for

    if arch.task == "embedding" and getattr(family_for(arch), "base_model_pooler", False):
        return {"add_pooling_layer": False}
    return {}


class TaskBatch:
    """The tensors of one micro-batch of an encoder task, made before the step."""

    def __init__(self, arch: Architecture, micro_batch_size: int, sequence_length: int, vocab_size: int, device: torch.device):
        self.task = arch.task
        self.pairs = micro_batch_size
        if arch.task == "image_classification":  # a vision encoder (measure/vision_encoders.py)
            from .vision_encoders import image_batch

            self.input_ids, self.labels = image_batch(arch, micro_batch_size, device)
            self.attention_mask = None
            return
        if arch.task == "contrastive":  # (image, text) pairs: pixel_values and the text's input_ids
            from .vision_encoders import image_batch

            self.pixel_values, _ = image_batch(arch, micro_batch_size, device)
            assert arch.text_tower is not None
            self.input_ids = torch.randint(0, arch.text_tower.vocab_size, (micro_batch_size, sequence_length), device=device)
            self.labels, self.attention_mask = None, None
            return
        sequences = 2 * micro_batch_size if arch.task == "embedding" else micro_batch_size
        self.input_ids = torch.randint(0, vocab_size, (sequences, sequence_length), device=device)
        self.labels: Optional[torch.Tensor] = None
        self.attention_mask: Optional[torch.Tensor] = None
        if arch.task == "sequence_classification":
            self.labels = torch.randint(0, arch.num_labels, (micro_batch_size,), device=device)
        elif arch.task == "token_classification":
            self.labels = torch.randint(0, arch.num_labels, (micro_batch_size, sequence_length), device=device)
        elif arch.task == "masked_lm":
            self.labels = torch.randint(0, vocab_size, (micro_batch_size, sequence_length), device=device)
        else:
            self.attention_mask = torch.ones((sequences, sequence_length), dtype=torch.long, device=device)

    def tensors(self) -> list[torch.Tensor]:
        return [t for t in (self.input_ids, self.labels, self.attention_mask, getattr(self, "pixel_values", None))
                if t is not None]

    def loss(self, module: torch.nn.Module, mark_loss: Optional[Any] = None, **kwargs: Any) -> torch.Tensor:
        """The step's loss; ``mark_loss`` is called where the loss begins (after the bare encoder)."""
        if self.task == "contrastive":  # CLIPModel / SiglipModel(return_loss=True)
            return module(input_ids=self.input_ids, pixel_values=self.pixel_values, return_loss=True, **kwargs).loss
        if self.task == "image_classification":
            return module(pixel_values=self.input_ids, labels=self.labels, **kwargs).loss
        if self.task != "embedding":
            return module(input_ids=self.input_ids, labels=self.labels, **kwargs).loss
        hidden = module(input_ids=self.input_ids, **kwargs).last_hidden_state
        if mark_loss is not None:
            mark_loss()
        return contrastive_loss(hidden, self.attention_mask, self.pairs)


def contrastive_loss(hidden: torch.Tensor, attention_mask: torch.Tensor, pairs: int) -> torch.Tensor:
    """Mean pooling, cosine similarities of anchors and positives, in-batch-negatives cross-entropy."""
    import torch.nn.functional as F

    accumulation = torch.float32 if hidden.dtype in (torch.float16, torch.bfloat16) else hidden.dtype
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    summed = (hidden * mask).sum(dim=1, dtype=accumulation)
    counts = torch.clamp(mask.sum(dim=1, dtype=accumulation), min=1e-9)
    embeddings = (summed / counts).to(hidden.dtype)
    anchors, positives = embeddings[:pairs], embeddings[pairs:]
    scores = torch.mm(F.normalize(anchors, p=2, dim=1), F.normalize(positives, p=2, dim=1).transpose(0, 1))
    scores = scores * CONTRASTIVE_SCALE
    labels = torch.arange(pairs, device=scores.device)
    return F.cross_entropy(scores, labels)


def head_module(model: torch.nn.Module) -> Optional[torch.nn.Module]:
    """The first module of the task head, for the ``forward head`` marker (None: the bare encoder)."""
    for name in ("final_norm", "pooler", "pre_classifier", "classifier", "cls", "lm_head", "vocab_transform"):
        for module_name, module in model.named_modules():
            if module_name.rsplit(".", 1)[-1] == name and module is not None:
                return module
    modules = dict(model.named_modules())
    for path in ("text_projection", "text_model.head"):  # a dual encoder: the last module before the similarities
        if modules.get(path) is not None:
            return modules[path]
    return None

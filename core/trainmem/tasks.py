"""The head a model trains with: ``Setup.task``.

A decoder trains its language-model head (``causal_lm``, the default for decoder families). An
encoder (BERT family, ``models/encoder.py``) trains one of the heads transformers builds on it
(transformers 5.24 ``<Family>For<Task>`` classes), or is trained as an embedding model:

* ``sequence_classification``: one label per sequence. BERT: pooler (``dense`` + tanh on the
  first token), dropout, ``classifier`` (``BertForSequenceClassification``); RoBERTa: dropout,
  ``dense``, tanh, dropout, ``out_proj`` on the first token (``RobertaClassificationHead``);
  DistilBERT: ``pre_classifier``, ReLU, dropout, ``classifier``. Cross-entropy over
  ``num_labels`` logits per sequence.
* ``token_classification``: dropout and a ``classifier`` on every token (NER): ``b·s·num_labels``
  logits.
* ``masked_lm``: the MLM head (``dense``, GELU, LayerNorm, a decoder tied to the word embeddings
  with its own bias) on every token: ``b·s·vocab`` logits, cross-entropy over all of them (labels
  of unmasked positions are -100, which the loss skips but the logits still exist).
* ``embedding``: the bare encoder (``AutoModel`` without the pooler) trained contrastively with
  in-batch negatives, as sentence-transformers' ``MultipleNegativesRankingLoss`` does: each of the
  ``micro_batch_size`` pairs (anchor, positive) is encoded (2·b sequences through the encoder),
  mean-pooled, L2-normalised, and the b×b matrix of scaled cosine similarities is the logits of a
  cross-entropy whose labels are the diagonal. The similarity matrix grows with the square of the
  batch; the encoder's activations grow with 2·b.

* ``image_classification``: a vision encoder (``models/vision_encoders.py``: ViT, DINOv2, CLIP's and
  SigLIP's vision towers) pools its last hidden states (the [CLS] token for ViT, [CLS] and the mean
  patch for DINOv2, the mean patch for CLIP, the mean token for SigLIP) into a ``classifier``;
  cross-entropy over ``num_labels`` logits per image (``<Family>ForImageClassification``).

* ``contrastive``: a CLIP or SigLIP dual encoder (``CLIPModel`` / ``SiglipModel`` with ``return_loss=True``,
  ``text_tower.py``, ``vision/contrastive.py``): ``micro_batch_size`` (image, text) pairs; both towers run, their
  pooled outputs are projected and L2-normalised, and the b×b matrix of scaled similarities is the loss's input
  (CLIP: cross-entropy over its rows and over its columns; SigLIP: ``-logsigmoid`` of all b² pairs). The logit
  matrix grows with the square of the batch; the towers' activations with b. ``sequence_length`` is the text's.

Which heads a family has is the family's ``tasks``; asking for another is a one-line error naming
``task.kind``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional

from pydantic import ConfigDict, Field, PositiveInt

from ._base import FrozenModel
from .errors import FieldError

if TYPE_CHECKING:
    from .architecture import Architecture

TaskKind = Literal[
    "causal_lm", "sequence_classification", "token_classification", "masked_lm", "embedding", "image_classification",
    "contrastive",
]
TASK_KINDS: tuple[str, ...] = (
    "causal_lm", "sequence_classification", "token_classification", "masked_lm", "embedding", "image_classification",
    "contrastive",
)
MAX_LABELS = 1_000_000


class Task(FrozenModel):
    """What is trained on top of the model."""

    model_config = ConfigDict(strict=True)

    kind: Optional[TaskKind] = Field(
        default=None,
        description="causal_lm (decoders), sequence_classification, token_classification, masked_lm or embedding "
        "(encoders: contrastive, in-batch negatives), image_classification (vision encoders), contrastive (CLIP / SigLIP image-text pairs). Default: the family's usual head (causal_lm for decoders, "
        "sequence_classification for encoders).",
    )
    num_labels: PositiveInt = Field(
        default=2, le=MAX_LABELS, description=f"Classes of a classification head (config.json num_labels); at most {MAX_LABELS:,}."
    )


def apply_task(arch: Architecture, task: Task, field: str = "task.kind") -> Architecture:
    """``arch`` with its head set to ``task`` (the family's default kind when none is given).

    Raises a FieldError naming ``task.kind`` when the family has no such head. A masked-LM head
    is the only one that uses a tied output embedding: for the other heads the word embeddings
    are no output layer (``tie_word_embeddings`` is dropped)."""
    from .models import family_for

    family = family_for(arch)
    tasks = getattr(family, "tasks", ("causal_lm",))
    if arch.bidirectional and "causal_lm" in tasks:
        raise FieldError(
            "model.architecture.bidirectional",
            "only the encoder families read from a config.json (bert, roberta, xlm-roberta, distilbert) are "
            "bidirectional; give the encoder's hf_config",
        )
    if not arch.bidirectional and "causal_lm" not in tasks:
        raise FieldError(
            "model.architecture.model_type",
            f"{arch.model_type} is an encoder, read from its config.json: give it as hf_config or a preset",
        )
    kind = task.kind or tasks[0]
    if kind not in tasks:
        name = family.model_type or "custom"
        raise FieldError(
            field,
            f"the {name} family has no {kind} head; allowed: {', '.join(tasks)}",
        )
    if kind == "contrastive" and arch.text_tower is None:
        raise FieldError(field, f"contrastive needs both towers: this {arch.model_type} config has no text_config")
    if kind == "contrastive" and arch.text_tower.kind == "siglip" and arch.text_tower.projection_dim != arch.hidden_size:
        raise FieldError(  # SiglipModel: text_embeds @ image_embeds.t() (checked only where the two meet)
            "model.hf_config.text_config.projection_size",
            f"the text head's output ({arch.text_tower.projection_dim}) must equal the vision tower's hidden_size "
            f"({arch.hidden_size}): SigLIP compares them directly",
        )
    if kind == arch.task and task.num_labels == arch.num_labels:
        return arch
    update: dict[str, object] = {"task": kind, "num_labels": task.num_labels}
    if arch.bidirectional:
        update["tie_word_embeddings"] = arch.tie_word_embeddings and kind == "masked_lm"
    return arch.model_copy(update=update)


def check_finetuning(arch: Architecture, method: str) -> None:
    """LoRA and QLoRA on an encoder are modelled as PEFT runs them with the task type of the head
    (:func:`peft_task_type`); nothing is refused here any more. Kept as the hook where a head whose
    PEFT behaviour is not modelled would be refused in one line naming ``finetuning.method``: LoRA on a
    vision encoder (models/vision_encoders.py) is not measured, so it is refused."""
    if arch.image_size and method in ("lora", "qlora"):
        raise FieldError(
            "finetuning.method",
            f"{method} on a vision encoder ({arch.model_type}) is not modelled yet; "
            "use full fine-tuning, optionally with finetuning.frozen groups",
        )


PEFT_TASK_TYPES = {
    "causal_lm": "CAUSAL_LM",
    "sequence_classification": "SEQ_CLS",
    "token_classification": "TOKEN_CLS",
    "embedding": "FEATURE_EXTRACTION",
    "masked_lm": None,
}
"""The ``LoraConfig.task_type`` trainmem assumes for each head (peft 0.21 has no masked-LM task type:
``get_peft_model`` then returns a plain ``PeftModel``)."""

PEFT_CLASSIFIER_MODULES = ("classifier", "score")
"""peft 0.21 ``PeftModelForSequenceClassification.__init__`` / ``PeftModelForTokenClassification.__init__``:
``classifier_module_names = ["classifier", "score"]`` are appended to ``modules_to_save``, so every module
whose path ends with one of them is copied and trained next to its frozen original (BERT's ``classifier``;
RoBERTa's whole ``classifier`` head, dense and out_proj; DistilBERT's ``pre_classifier`` and ``classifier``,
since the match is a plain string suffix; ModernBERT's ``classifier``, its prediction head stays frozen)."""


def check_lora_targets(arch: Architecture, target_modules: object) -> None:
    """``all-linear`` on an encoder with a task head is refused in one line: PEFT then also adapts the head's
    linear layers (BERT's ``pooler.dense``, ModernBERT's ``head.dense``, the MLM transform), which trainmem's
    adapters (decoder layers only) do not model, and with ``TOKEN_CLS`` peft 0.21 itself fails (it wraps the
    adapted ``classifier`` in ``modules_to_save``: "modules_to_save cannot be applied to modules of type
    Linear"). The bare encoder (``embedding``) has no head linears and is accepted."""
    if arch.bidirectional and target_modules == "all-linear" and arch.task != "embedding":
        raise FieldError(
            "finetuning.lora.target_modules",
            f"all-linear on an encoder's {arch.task} head also adapts the head's linear layers, which is not "
            "modelled; list the layer modules instead (e.g. query, key, value, dense)",
        )


def check_head_not_adapted(arch: Architecture, target_modules: object, head: list, saved: frozenset[str]) -> None:
    """A ``target_modules`` entry that also matches a linear layer of an encoder's task head (``dense`` matches
    BERT's ``pooler.dense`` and the MLM ``transform.dense``) is refused in one line: PEFT would adapt it, and
    trainmem's adapters sit in the encoder layers only. Modules PEFT copies (``modules_to_save``) are guarded
    from adapters by PEFT itself, so they are skipped."""
    if not arch.bidirectional or not isinstance(target_modules, (list, tuple)):
        return
    from .lora_targets import _matches

    for tensor in head:
        if tensor.linear_features is None or tensor.name in saved:
            continue
        hits = [target for target in target_modules if _matches(tensor.module, target)]
        if hits:
            raise FieldError(
                "finetuning.lora.target_modules",
                f"{hits[0]!r} also matches the head's {tensor.module}, an adapter trainmem does not model; "
                "name the encoder layers' modules more precisely (e.g. attention.output.dense, output.dense)",
            )


def peft_task_type(arch: Architecture) -> Optional[str]:
    """The PEFT task type of the head ``arch`` trains (see :data:`PEFT_TASK_TYPES`)."""
    return PEFT_TASK_TYPES.get(arch.task, "CAUSAL_LM")


def peft_task_modules_to_save(arch: Architecture) -> tuple[str, ...]:
    """``modules_to_save`` entries PEFT adds for the head's task type (matched only where they exist)."""
    if peft_task_type(arch) in ("SEQ_CLS", "TOKEN_CLS") and arch.bidirectional:
        return PEFT_CLASSIFIER_MODULES
    return ()


def task_description(arch: Architecture) -> str:
    """How the report names the head, e.g. ``sequence_classification head (2 labels)``."""
    if arch.task in ("sequence_classification", "token_classification", "image_classification"):
        return f"{arch.task} head ({arch.num_labels} labels)"
    if arch.task == "embedding":
        return "embedding (contrastive, in-batch negatives: 2 sequences per pair)"
    if arch.task == "contrastive":
        loss = "sigmoid over b² pairs" if arch.text_tower is not None and arch.text_tower.kind == "siglip" else "two cross-entropies"
        return f"contrastive image-text pairs (b × b logits, {loss})"
    return f"{arch.task} head"


def check_sequence_length(arch: Architecture, sequence_length: int) -> None:
    """An encoder's learned position table bounds the sequence: BERT slices ``position_ids[:, :s]`` from a
    buffer of ``max_position_embeddings``; RoBERTa's positions start at ``padding_idx + 1`` (padding_idx 1
    in the published RoBERTa and XLM-R checkpoints, assumed), so 2 of its rows are never a position."""
    if not arch.bidirectional or arch.image_size:  # a vision encoder's sequence is its image's (vision/encoder_checks.py)
        return
    usable = arch.max_position_embeddings - (2 if arch.positions_from_input_ids else 0)
    if sequence_length > usable:
        raise FieldError(
            "sequence_length",
            f"sequence_length ({sequence_length}) exceeds the {usable} positions of this {arch.model_type} "
            f"encoder (max_position_embeddings {arch.max_position_embeddings})",
        )


def encoded_sequences(arch: Architecture, micro_batch_size: int) -> int:
    """Sequences one forward encodes: two per pair (anchor and positive) for the embedding task."""
    return 2 * micro_batch_size if arch.task == "embedding" else micro_batch_size


def label_bytes(arch: Architecture, micro_batch_size: int, sequence_length: int) -> int:
    """The int64 labels of the batch besides the input ids (a causal LM's labels are its input ids;
    the embedding task builds its diagonal labels inside the loss, and its pooling reads the collator's int64
    ``attention_mask`` of the 2b sentences, an input the encoder itself is not given)."""
    if arch.task == "embedding":
        return 2 * micro_batch_size * sequence_length * 8
    if arch.task in ("sequence_classification", "image_classification"):
        return micro_batch_size * 8
    if arch.task == "contrastive":  # no labels: the text's int64 input_ids (the diagonal is built in the loss)
        return micro_batch_size * sequence_length * 8
    if arch.task in ("token_classification", "masked_lm"):
        return micro_batch_size * sequence_length * 8
    return 0

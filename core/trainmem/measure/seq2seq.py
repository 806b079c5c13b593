"""The measured step of an encoder-decoder (T5, mT5): ``AutoModelForSeq2SeqLM`` and its batch.

``model(input_ids=source, labels=target).loss``: ``source`` is (b, sequence_length) int64, ``target`` is
(b, target_length) int64; the model makes ``decoder_input_ids = _shift_right(labels)`` itself, as
Hugging Face's Seq2SeqTrainer passes the batch of ``DataCollatorForSeq2Seq`` (no padding here: every
sample is full length, so no attention masks).
"""

from __future__ import annotations

from typing import Any, Optional

import torch


class Seq2SeqBatch:
    """The tensors of one micro-batch of an encoder-decoder, made before the step (the ``TaskBatch`` interface)."""

    def __init__(self, micro_batch_size: int, source_length: int, target_length: int, vocab_size: int, device: torch.device):
        self.input_ids = torch.randint(0, vocab_size, (micro_batch_size, source_length), device=device)
        self.labels = torch.randint(0, vocab_size, (micro_batch_size, target_length), device=device)

    def tensors(self) -> list[torch.Tensor]:
        return [self.input_ids, self.labels]

    def loss(self, module: torch.nn.Module, mark_loss: Optional[Any] = None, **kwargs: Any) -> torch.Tensor:
        return module(input_ids=self.input_ids, labels=self.labels, **kwargs).loss

"""The measured step of an encoder-decoder (T5, mT5, BART, Whisper): ``AutoModelForSeq2SeqLM`` and its batch.

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

    def __init__(
        self, micro_batch_size: int, source_length: int, target_length: int, vocab_size: int, device: torch.device,
        num_mel_bins: int = 0,
    ):
        # Whisper (num_mel_bins > 0): fp32 input_features (b, mel, 2·source_length), the feature extractor's
        # 30 s log-mel frames, instead of source token ids.
        self.input_features = (
            torch.randn(micro_batch_size, num_mel_bins, 2 * source_length, device=device) if num_mel_bins else None
        )
        self.input_ids = (
            None if num_mel_bins else torch.randint(0, vocab_size, (micro_batch_size, source_length), device=device)
        )
        self.labels = torch.randint(0, vocab_size, (micro_batch_size, target_length), device=device)

    @property
    def source(self) -> torch.Tensor:
        return self.input_features if self.input_features is not None else self.input_ids

    def tensors(self) -> list[torch.Tensor]:
        return [self.source, self.labels]

    def loss(self, module: torch.nn.Module, mark_loss: Optional[Any] = None, **kwargs: Any) -> torch.Tensor:
        if self.input_features is not None:
            return module(input_features=self.input_features, labels=self.labels, **kwargs).loss
        return module(input_ids=self.input_ids, labels=self.labels, **kwargs).loss

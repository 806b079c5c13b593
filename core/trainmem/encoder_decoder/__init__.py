"""Encoder-decoders (T5, mT5, flan-T5): the encoder as a stack before the decoder path (``trainmem.stacks``)."""

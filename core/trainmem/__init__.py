"""trainmem: simulate the GPU memory of a training step."""

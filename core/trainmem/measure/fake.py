"""FakeTensor runs: billion-parameter steps counted in seconds, with no memory.

Under ``FakeTensorMode`` every tensor carries shape, dtype, device and a meta storage of
the right ``nbytes`` but no data, and every op computes only its output's metadata. The
tracker counts those storages exactly as it counts real ones. Three things need care:

* **Building.** The model is built on the meta device (no memory, and peft's
  ``module.to()`` works there while it fails under FakeTensorMode), then
  :func:`materialize` replaces every parameter and buffer by an empty fake tensor of the
  same shape and dtype on the run's device, keeping tied weights tied and
  ``requires_grad`` as it was.
* **Data-dependent checks.** Code that looks at tensor values (``.item()``, ``if
  tensor.all()``) cannot run on fake tensors. transformers notices fake tensors and takes
  its "tracing" path instead, which differs from the eager path in memory (see
  :mod:`trainmem.measure.transformers_compat`). Adafactor's relative step calls Python
  ``max()`` on a tensor, so the runner uses an explicit learning rate.
* **Device.** Fake tensors live on a device only by name; kernel choices that depend on it
  (SDPA's CPU flash kernel, the optimizer's for-loop default) follow that name.
"""

from __future__ import annotations

import torch


def materialize(model: torch.nn.Module, device: torch.device | str) -> None:
    """Replace the meta parameters and buffers of ``model`` by fake (or real empty) tensors on ``device``.

    Call inside an active ``FakeTensorMode`` so that ``torch.empty`` returns fake tensors.
    A tensor shared by several modules (tied embeddings) is replaced by one shared tensor.
    """
    replaced: dict[int, torch.Tensor] = {}
    for module in model.modules():
        for name, parameter in list(module._parameters.items()):
            if parameter is None:
                continue
            if id(parameter) not in replaced:
                empty = torch.empty(parameter.shape, dtype=parameter.dtype, device=device)
                replaced[id(parameter)] = torch.nn.Parameter(empty, requires_grad=parameter.requires_grad)
            module._parameters[name] = replaced[id(parameter)]
        for name, buffer in list(module._buffers.items()):
            if buffer is None:
                continue
            if id(buffer) not in replaced:
                replaced[id(buffer)] = torch.empty(buffer.shape, dtype=buffer.dtype, device=device)
            module._buffers[name] = replaced[id(buffer)]
        for name, value in list(vars(module).items()):
            if isinstance(value, torch.Tensor) and value.device.type == "meta":
                setattr(module, name, torch.empty(value.shape, dtype=value.dtype, device=device))

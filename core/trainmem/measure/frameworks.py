"""How a distributed measurement wraps the model: DDP, FSDP2, DTensor tensor parallelism, DeepSpeed ZeRO.

Each framework is set up the way its documentation shows, from the Setup's fields:

================  ==========================================================================
ddp               ``torch.nn.parallel.DistributedDataParallel(model)`` (bucket_cap_mb from
                  ``parallelism.bucket_size_mib``, ``gradient_as_bucket_view=False``, its default)
fsdp              FSDP2: ``fully_shard(layer, mesh, reshard_after_forward, mp_policy)`` on every
                  decoder layer, then on the root model (torchtitan's and the FSDP2 tutorial's
                  layout); ``bf16-mixed`` -> ``MixedPrecisionPolicy(param_dtype=bf16,
                  reduce_dtype=parallelism.fsdp_reduce_dtype or bf16)``
tensor parallel   DTensor: ``parallelize_module`` with torchtitan's Llama plan (q/k/v, gate/up
                  ``ColwiseParallel``; o, down ``RowwiseParallel``; the embedding
                  ``RowwiseParallel(input_layouts=Replicate())`` (vocabulary-sharded), the head
                  ``ColwiseParallel(output_layouts=Replicate())``); with ``sequence_parallel``
                  the norms are ``SequenceParallel`` and the activations between blocks are
                  sharded on the sequence
fsdp + tensor     torchtitan's 2-D recipe (``FSDP2TP``): the TP plan on the ``tp`` dimension of a
parallel          (dp, tp) mesh, then ``fully_shard`` per decoder layer and on the root over ``dp``
zero              ``deepspeed.initialize(model, optimizer=<the setup's torch optimizer>,
                  config={zero_optimization: {stage}, bf16: {enabled}})`` on DeepSpeed's CPU
                  accelerator (``DS_ACCELERATOR=cpu``; gloo)
================  ==========================================================================

With ``finetuning.method == "lora"`` the model each framework wraps is the PEFT model
(:func:`~trainmem.measure.hf_model.build_model`), and the optimizer gets its trainable parameters only.

:class:`Framework` also names the storages it owns (:meth:`Framework.owned_tensors`), by the
attribute that holds them, so that a measurement reports e.g. DeepSpeed's
``averaged_gradients`` or FSDP2's unsharded parameters as parts of their category.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

import torch

from ..setup import Setup
from .hf_model import base_model, decoder_layers
from .optimizers import BuiltOptimizer, build_optimizer
from .step import TrainingStep

Owned = list[tuple[str, str, torch.Tensor]]
"""(category, part, tensor) triples."""


def framework_name(setup: Setup) -> str:
    """Which framework a distributed setup runs: ddp, fsdp1, fsdp2, dtensor-tp or deepspeed."""
    parallel = setup.parallelism
    if parallel.tensor_parallel_size > 1:
        return "fsdp2-tp" if parallel.strategy == "fsdp" else "dtensor-tp"
    if parallel.strategy == "fsdp":
        return "fsdp1" if parallel.fsdp_version == 1 else "fsdp2"
    if parallel.strategy == "zero":
        return "deepspeed"
    return "ddp"


class Framework:
    """The wrapped model, its optimizer and the step that drives them."""

    name = "ddp"

    def __init__(self, setup: Setup, model: torch.nn.Module, world_size: int) -> None:
        self.setup = setup
        self.model = model
        self.world_size = world_size
        self.forward_module: torch.nn.Module = model
        self.built: Optional[BuiltOptimizer] = None
        self.on_buffer: Callable[[str, str, torch.Tensor], None] = lambda category, part, tensor: None
        """Called with (category, part, tensor) when the framework makes a transient buffer worth naming."""

    # ---------------------------------------------------------------- build

    def wrap(self) -> None:
        from torch.nn.parallel import DistributedDataParallel

        self.forward_module = DistributedDataParallel(
            self.model, bucket_cap_mb=self.setup.parallelism.bucket_size_mib, gradient_as_bucket_view=False
        )
        self._torch_optimizer()

    def _torch_optimizer(self) -> None:
        trainable = [parameter for parameter in self.model.parameters() if parameter.requires_grad]
        self.built = build_optimizer(self.setup.optimizer.name, self.setup.optimizer.implementation, trainable)

    @property
    def optimizer(self) -> Any:
        assert self.built is not None
        return self.built.optimizer

    def training_step(self, batch: torch.Tensor) -> TrainingStep:
        return TrainingStep(self.setup, self.model, self.optimizer, batch, forward_module=self.forward_module)

    # ---------------------------------------------------------------- what it owns

    def owned_tensors(self) -> Owned:
        """Tensors the framework holds outside parameters, .grad and optimizer.state."""
        return []

    def host_tensors(self) -> Owned:
        """Tensors the framework would keep in host memory on a GPU machine (offload), as (category, part,
        tensor); on the CPU they share the one pool, so the measurement counts them apart."""
        return []

    def parameter_tensors(self) -> Iterator[torch.Tensor]:
        yield from self.model.parameters()
        yield from self.model.buffers()

    def gradient_tensors(self) -> Iterator[torch.Tensor]:
        """``.grad`` of every parameter, and DeepSpeed's ``grad_accum`` where it keeps one."""
        for parameter in self.model.parameters():
            for name in ("grad", "grad_accum"):
                value = getattr(parameter, name, None)
                if isinstance(value, torch.Tensor):
                    yield value

    def optimizer_state_tensors(self) -> Iterator[torch.Tensor]:
        for state in self.optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    yield value

    @property
    def optimizer_class(self) -> str:
        assert self.built is not None
        return self.built.qualified_class

    @property
    def optimizer_kwargs(self) -> dict:
        assert self.built is not None
        return self.built.kwargs

    @property
    def optimizer_implementation(self) -> str:
        assert self.built is not None
        return self.built.implementation


class DDP(Framework):
    """DistributedDataParallel; its Reducer's flat buckets are allocated in C++ (seen as dispatched empty ops)."""


class FSDP2(Framework):
    """``fully_shard`` per decoder layer and on the root (torch/distributed/fsdp/_fully_shard/_fully_shard.py)."""

    name = "fsdp2"

    def wrap(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        parallel = self.setup.parallelism
        mesh = init_device_mesh("cpu", (self.world_size,))
        policy = MixedPrecisionPolicy()
        if self.setup.precision in ("bf16-mixed", "fp16-mixed"):
            half = torch.bfloat16 if self.setup.precision == "bf16-mixed" else torch.float16
            reduce = {None: None, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[
                parallel.fsdp_reduce_dtype
            ]
            policy = MixedPrecisionPolicy(param_dtype=half, reduce_dtype=reduce)
        options: dict[str, Any] = {
            "mesh": mesh,
            "reshard_after_forward": parallel.fsdp_reshard_after_forward,
            "mp_policy": policy,
        }
        if parallel.offload_parameters or parallel.offload_optimizer:
            from torch.distributed.fsdp import CPUOffloadPolicy

            # pin_memory needs CUDA; on the CPU the placement is what is measured (host_tensors).
            options["offload_policy"] = CPUOffloadPolicy(pin_memory=False)
        for layer in decoder_layers(self.model):
            fully_shard(layer, **options)
        fully_shard(self.model, **options)
        self.forward_module = self.model
        self._torch_optimizer()
        self._label_collective_buffers()

    def _label_collective_buffers(self) -> None:
        """Name FSDP2's transient communication buffers as they are made.

        ``foreach_all_gather`` (``_fsdp_collectives.py``) returns the flat all-gather output
        (world size × the group's padded shard, in the param dtype) that ``foreach_all_gather_copy_out``
        then copies into the unsharded parameters; ``foreach_reduce`` returns the flat
        reduce-scatter input (the group's unsharded gradients, in the reduce dtype). Both are
        looked up by name in ``_fsdp_param_group``, so wrapping them there labels every call.
        """
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group

        framework = self
        all_gather, reduce = _fsdp_param_group.foreach_all_gather, _fsdp_param_group.foreach_reduce

        def labelled_all_gather(*args: Any, **kwargs: Any) -> Any:
            result = all_gather(*args, **kwargs)
            if result is not None:
                framework.on_buffer("parameters", "parameters/fsdp all-gather output", result.all_gather_output)
            return result

        def labelled_reduce(*args: Any, **kwargs: Any) -> Any:
            result = reduce(*args, **kwargs)
            if result and isinstance(result[0], torch.Tensor):
                framework.on_buffer("gradients", "gradients/fsdp reduce-scatter input", result[0])
            return result

        _fsdp_param_group.foreach_all_gather = labelled_all_gather
        _fsdp_param_group.foreach_reduce = labelled_reduce

    def host_tensors(self) -> Owned:
        """``CPUOffloadPolicy`` (``_fsdp_param.py``: ``FSDPParam`` keeps ``sharded_param`` on the CPU, the
        reduce-scattered gradient is copied to it in ``foreach_reduce``, and the optimizer steps on the
        CPU): the sharded parameters, their gradients and the optimizer states are host memory."""
        parallel = self.setup.parallelism
        if not (parallel.offload_parameters or parallel.offload_optimizer):
            return []
        host: Owned = []
        # The sharded parameters as FSDP2 holds them: during forward and backward the module's registered
        # parameters are the unsharded (device) ones, so model.parameters() would name those.
        for fsdp_param in self._fsdp_params():
            parameter = fsdp_param.sharded_param
            host.append(("parameters", "parameters/fsdp sharded parameters (CPUOffloadPolicy)", parameter))
            if isinstance(parameter.grad, torch.Tensor):
                host.append(("gradients", "gradients/fsdp sharded gradients (CPUOffloadPolicy)", parameter.grad))
        for tensor in self.optimizer_state_tensors():
            host.append(("optimizer_states", "optimizer_states/optimizer state", tensor))
        return host

    def _fsdp_params(self) -> Iterator[Any]:
        for module in self.model.modules():
            get_state = getattr(module, "_get_fsdp_state", None)
            group = get_state()._fsdp_param_group if get_state is not None else None
            if group is not None:
                yield from group.fsdp_params

    def owned_tensors(self) -> Owned:
        owned: Owned = []
        for module in self.model.modules():
            get_state = getattr(module, "_get_fsdp_state", None)
            if get_state is None:
                continue
            group = get_state()._fsdp_param_group
            if group is None:
                continue
            for fsdp_param in group.fsdp_params:
                unsharded = getattr(fsdp_param, "_unsharded_param", None)
                if isinstance(unsharded, torch.Tensor):
                    owned.append(("parameters", "parameters/fsdp unsharded parameters", unsharded))
                for output in getattr(fsdp_param, "all_gather_outputs", []) or []:
                    owned.append(("parameters", "parameters/fsdp all-gather outputs", output))
                unsharded_grad = getattr(fsdp_param, "unsharded_accumulated_grad", None)
                if isinstance(unsharded_grad, torch.Tensor):
                    owned.append(("gradients", "gradients/fsdp unsharded accumulated gradients", unsharded_grad))
        return owned


class FSDP1(Framework):
    """``FullyShardedDataParallel`` (torch/distributed/fsdp/fully_sharded_data_parallel.py) with a
    ``ModuleWrapPolicy`` on the decoder layers (one FlatParameter per layer, the rest in the root),
    ``use_orig_params=True`` and the setup's sharding strategy."""

    name = "fsdp1"

    def wrap(self) -> None:
        from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        parallel = self.setup.parallelism
        layer_class = type(decoder_layers(self.model)[0])
        mixed = None
        if self.setup.precision in ("bf16-mixed", "fp16-mixed"):
            half = torch.bfloat16 if self.setup.precision == "bf16-mixed" else torch.float16
            reduce = {None: half, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[
                parallel.fsdp_reduce_dtype
            ]
            mixed = MixedPrecision(param_dtype=half, reduce_dtype=reduce)
        mesh = None
        if parallel.fsdp_sharding_strategy == "HYBRID_SHARD":
            # HSDP: shard within a "node" of gpus_per_node ranks, replicate across them (a 2-D mesh;
            # FSDP1's own default would size the shard group by torch.cuda.device_count()).
            from torch.distributed.device_mesh import init_device_mesh

            shard = min(self.world_size, parallel.gpus_per_node)
            mesh = init_device_mesh("cpu", (self.world_size // shard, shard), mesh_dim_names=("replicate", "shard"))
        self.model = FullyShardedDataParallel(
            self.model,
            auto_wrap_policy=ModuleWrapPolicy({layer_class}),
            sharding_strategy=getattr(ShardingStrategy, parallel.fsdp_sharding_strategy),
            mixed_precision=mixed,
            use_orig_params=True,
            device_id=torch.device("cpu"),
            device_mesh=mesh,
            **self._cpu_offload(),
        )
        self.forward_module = self.model
        self._torch_optimizer()

    def _offloads(self) -> bool:
        parallel = self.setup.parallelism
        return parallel.offload_parameters or parallel.offload_optimizer

    def _cpu_offload(self) -> dict[str, Any]:
        """``CPUOffload(offload_params=True)`` for an offloading setup. FSDP1 pins its host shard and gradient
        (``FlatParamHandle._init_param_attributes``: ``_local_shard.pin_memory()``, ``_cpu_grad``), and
        ``Tensor.pin_memory`` raises without an accelerator: on a CPU-only machine it is made to return the tensor
        itself (what pinning changes, the page-locked copy, is not device memory), and the CPU's stub stream is
        given the no-op ``synchronize`` FSDP1 calls after the backward."""
        if not self._offloads():
            return {}
        from torch.distributed.fsdp import CPUOffload

        torch.Tensor.pin_memory = lambda tensor, *args, **kwargs: tensor  # type: ignore[method-assign]
        if not hasattr(torch.cpu.Stream, "synchronize"):
            # _post_backward_final_callback waits for the (GPU -> CPU) gradient copies with
            # current_stream().synchronize(); the CPU's stub stream has nothing to wait for.
            torch.cpu.Stream.synchronize = lambda stream: None  # type: ignore[attr-defined]
        return {"cpu_offload": CPUOffload(offload_params=True)}

    def host_tensors(self) -> Owned:
        """FSDP1's CPU offload (``_flat_param.py``, ``_runtime_utils.py``): each FlatParameter's sharded data
        (``_local_shard``) and its sharded gradient (``_cpu_grad``, allocated for the run; ``_offload_grad``
        copies the reduce-scattered gradient into it) are host memory, and the optimizer steps them there (its
        states are host memory too). The unsharded (padded) FlatParameters, the all-gather and reduce-scatter
        buffers stay on the device."""
        if not self._offloads():
            return []
        host: Owned = []
        for flat in self._flat_parameters():
            for category, name in (("parameters", "_local_shard"), ("gradients", "_cpu_grad")):
                tensor = getattr(flat, name, None)
                if isinstance(tensor, torch.Tensor):
                    host.append((category, f"{category}/fsdp1 {name} (CPUOffload)", tensor))
        for tensor in self.optimizer_state_tensors():
            host.append(("optimizer_states", "optimizer_states/optimizer state", tensor))
        return host

    def _flat_parameters(self) -> Iterator[Any]:
        from torch.distributed.fsdp import FullyShardedDataParallel

        for module in self.model.modules():
            if isinstance(module, FullyShardedDataParallel):
                flat = getattr(getattr(module, "_handle", None), "flat_param", None)
                if flat is not None:
                    yield flat

    def owned_tensors(self) -> Owned:
        from torch.distributed.fsdp import FullyShardedDataParallel

        owned: Owned = []
        for module in self.model.modules():
            if not isinstance(module, FullyShardedDataParallel):
                continue
            handle = getattr(module, "_handle", None)
            flat = getattr(handle, "flat_param", None)
            if flat is None:
                continue
            owned.append(("parameters", "parameters/fsdp1 sharded FlatParameter", flat))
            for name in ("_full_param_padded", "_mp_shard"):
                tensor = getattr(flat, name, None)
                if isinstance(tensor, torch.Tensor):
                    owned.append(("parameters", f"parameters/fsdp1 {name}", tensor))
            for name in ("_saved_grad_shard", "_cpu_grad"):
                tensor = getattr(flat, name, None)
                if isinstance(tensor, torch.Tensor):
                    owned.append(("gradients", f"gradients/fsdp1 {name}", tensor))
        return owned


class DTensorTP(Framework):
    """``parallelize_module`` with torchtitan's Llama plan (torchtitan/models/llama3/infra/parallelize.py)."""

    name = "dtensor-tp"

    def wrap(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh

        self._apply_tp_plan(init_device_mesh("cpu", (self.world_size,)))
        self.forward_module = self.model
        self._torch_optimizer()

    def _apply_tp_plan(self, mesh: Any) -> None:
        """torchtitan's Llama plan over ``mesh`` (1-D: the tensor-parallel ranks)."""
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            PrepareModuleInput,
            RowwiseParallel,
            SequenceParallel,
            parallelize_module,
        )

        sequence_parallel = self.setup.parallelism.sequence_parallel
        hf = base_model(self.model)
        if sequence_parallel:
            root_plan = {
                "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
                "model.norm": SequenceParallel(),
                "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
            }
            layer_plan: dict[str, Any] = {
                "input_layernorm": SequenceParallel(),
                "self_attn": PrepareModuleInput(
                    input_kwarg_layouts={"hidden_states": Shard(1)},
                    desired_input_kwarg_layouts={"hidden_states": Replicate()},
                ),
                "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1)),
                "post_attention_layernorm": SequenceParallel(),
                "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1)),
            }
        else:
            root_plan = {
                "model.embed_tokens": RowwiseParallel(input_layouts=Replicate()),
                "lm_head": ColwiseParallel(output_layouts=Replicate()),
            }
            layer_plan = {"self_attn.o_proj": RowwiseParallel(), "mlp.down_proj": RowwiseParallel()}
        layer_plan.update(
            {
                "self_attn.q_proj": ColwiseParallel(),
                "self_attn.k_proj": ColwiseParallel(),
                "self_attn.v_proj": ColwiseParallel(),
                "mlp.gate_proj": ColwiseParallel(),
                "mlp.up_proj": ColwiseParallel(),
            }
        )
        parallelize_module(hf, mesh, root_plan)
        for layer in decoder_layers(self.model):
            parallelize_module(layer, mesh, layer_plan)

    def training_step(self, batch: torch.Tensor) -> TrainingStep:
        step = super().training_step(batch)
        if self.setup.parallelism.sequence_parallel:
            # Between blocks the hidden states hold s/tp tokens; transformers would derive the rotary
            # positions from that length, so the full positions are passed (as torchtitan does).
            step.forward_kwargs["position_ids"] = torch.arange(batch.shape[1]).unsqueeze(0)
        return step


class FSDP2TP(DTensorTP):
    """torchtitan's 2-D recipe: the DTensor TP plan on the inner ``tp`` dimension of a (dp, tp) mesh, then
    ``fully_shard`` per decoder layer and on the root over the outer ``dp`` dimension (torchtitan's
    ``parallelize_llama``: ``apply_tp`` before ``apply_fsdp``)."""

    name = "fsdp2-tp"

    def wrap(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        parallel = self.setup.parallelism
        tp = parallel.tensor_parallel_size
        mesh = init_device_mesh("cpu", (self.world_size // tp, tp), mesh_dim_names=("dp", "tp"))
        self._apply_tp_plan(mesh["tp"])
        options = {"mesh": mesh["dp"], "reshard_after_forward": parallel.fsdp_reshard_after_forward}
        for layer in decoder_layers(self.model):
            fully_shard(layer, **options)
        fully_shard(self.model, **options)
        self.forward_module = self.model
        self._torch_optimizer()
        FSDP2._label_collective_buffers(self)  # type: ignore[arg-type]

    def owned_tensors(self) -> Owned:
        return FSDP2.owned_tensors(self)  # type: ignore[arg-type]


def deepspeed_config(setup: Setup) -> dict[str, Any]:
    """The ds_config a setup stands for (DeepSpeed 0.19's keys, deepspeed/runtime/zero/config.py):

    * ``zero_optimization``: ``stage``, ``reduce_bucket_size`` (``parallelism.zero_reduce_bucket_size``),
      ``stage3_max_live_parameters``, ``overlap_comm`` when the setup chooses it, and
      ``offload_optimizer`` / ``offload_param`` ``{"device": "cpu"}``;
    * ``bf16.enabled`` for the bf16 recipes; ``bf16-master-weights-fp32-grads`` adds
      ``data_types.grad_accum_dtype: "fp32"`` (with ZeRO-1 and no offload the engine then wraps the
      client optimizer in ``BF16_Optimizer``, ``DeepSpeedEngine._do_optimizer_sanity_check``).
    """
    parallel = setup.parallelism
    zero: dict[str, Any] = {
        "stage": parallel.zero_stage,
        "reduce_bucket_size": parallel.zero_reduce_bucket_size,
        "stage3_max_live_parameters": parallel.zero3_max_live_parameters,
    }
    if parallel.zero_overlap_comm is not None:
        zero["overlap_comm"] = parallel.zero_overlap_comm
    if parallel.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    if parallel.offload_parameters:
        zero["offload_param"] = {"device": "cpu"}
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": setup.micro_batch_size,
        "gradient_accumulation_steps": setup.gradient_accumulation_steps,
        "zero_optimization": zero,
        "bf16": {"enabled": setup.precision in ("bf16-master-weights", "bf16-mixed", "bf16-master-weights-fp32-grads")},
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 10**9,
    }
    if setup.precision == "bf16-master-weights-fp32-grads":
        config["data_types"] = {"grad_accum_dtype": "fp32"}
    return config


def model_building_context(setup: Setup) -> Any:
    """Where a distributed measurement builds the model: under ``deepspeed.zero.Init`` for ZeRO-3 with
    ``parallelism.model_load == "sharded"`` (each parameter is partitioned as its module's ``__init__``
    ends, ``partition_parameters.py``), else plainly."""
    import contextlib

    parallel = setup.parallelism
    if parallel.strategy == "zero" and parallel.zero_stage == 3 and parallel.model_load == "sharded":
        import deepspeed
        import torch._dynamo  # noqa: F401  before zero.Init patches torch.Tensor.__new__ (dynamo checks its signature)
        import transformers.generation.utils  # noqa: F401  (its import pulls in torch._dynamo lazily)

        return deepspeed.zero.Init(config_dict_or_path=deepspeed_config(setup))
    return contextlib.nullcontext()


class DeepSpeed(Framework):
    """``deepspeed.initialize`` (deepspeed/runtime/engine.py) with ZeRO stage 1, 2 or 3."""

    name = "deepspeed"

    def wrap(self) -> None:
        import deepspeed

        self._torch_optimizer()
        client = self.built
        assert client is not None
        config = deepspeed_config(self.setup)
        engine, optimizer, _, _ = deepspeed.initialize(model=self.model, optimizer=client.optimizer, config=config)
        self.engine = engine
        self.zero_optimizer = optimizer
        self.forward_module = engine
        self._label_reduce_buckets()

    def _label_reduce_buckets(self) -> None:
        """ZeRO-1/2 allocate their reduce buckets in ``setup_buckets`` when a backward starts and clear
        them at its end: name them as they are made.

        Two more transient tensors are named as they appear (stage 1/2 only):

        * each ``param.grad`` as DeepSpeed's gradient hook receives it (``process_gradients``,
          called from ``grad_handling_hook``): under ZeRO-2 the hook copies it into the bucket and
          drops it at once, so no snapshot would see it as a gradient;
        * the outputs of ``self.flatten`` (``_flatten_dense_tensors``): ``allreduce_bucket``
          flattens the bucket's gradients before the all-reduce, ``step`` flattens the partition;
        * under offload, the fp64 copy ``set_norm_for_param_grad_in_gpu`` takes of each gradient for
          its norm.
        """
        optimizer = self.zero_optimizer
        setup_buckets = getattr(optimizer, "setup_buckets", None)
        if setup_buckets is None:
            return
        framework = self
        process_gradients = getattr(optimizer, "process_gradients", None)
        if process_gradients is not None:

            def labelled_process_gradients(param: Any, *args: Any, **kwargs: Any) -> Any:
                grad = getattr(param, "grad", None)
                if isinstance(grad, torch.Tensor):
                    framework.on_buffer("gradients", "gradients/param.grad (as DeepSpeed's gradient hook receives it)", grad)
                return process_gradients(param, *args, **kwargs)

            optimizer.process_gradients = labelled_process_gradients
        flatten = getattr(optimizer, "flatten", None)
        if flatten is not None:

            def labelled_flatten(*args: Any, **kwargs: Any) -> Any:
                result = flatten(*args, **kwargs)
                if isinstance(result, torch.Tensor):
                    framework.on_buffer("overhead", "overhead/deepspeed flattened gradients (self.flatten)", result)
                return result

            optimizer.flatten = labelled_flatten
        norm_in_gpu = getattr(optimizer, "set_norm_for_param_grad_in_gpu", None)
        if norm_in_gpu is not None:

            def labelled_norm_in_gpu(*args: Any, **kwargs: Any) -> Any:
                # ``accumulated_grad.data.to(get_norm_dtype()).norm(2)``: name the fp64 copy as it is made.
                original_to = torch.Tensor.to

                def labelled_to(tensor: torch.Tensor, *to_args: Any, **to_kwargs: Any) -> Any:
                    result = original_to(tensor, *to_args, **to_kwargs)
                    if result is not tensor:
                        framework.on_buffer("overhead", "overhead/deepspeed fp64 gradient copy for its norm", result)
                    return result

                torch.Tensor.to = labelled_to  # type: ignore[method-assign]
                try:
                    return norm_in_gpu(*args, **kwargs)
                finally:
                    torch.Tensor.to = original_to  # type: ignore[method-assign]

            optimizer.set_norm_for_param_grad_in_gpu = labelled_norm_in_gpu

        def labelled_setup_buckets(*args: Any, **kwargs: Any) -> Any:
            result = setup_buckets(*args, **kwargs)
            for bucket in getattr(optimizer, "ipg_buckets", {}).values():
                for tensor in _tensors_in(getattr(bucket, "buffer", None), 2):
                    framework.on_buffer("overhead", "overhead/deepspeed reduce bucket (ipg_buckets buffer)", tensor)
            return result

        optimizer.setup_buckets = labelled_setup_buckets

    @property
    def optimizer(self) -> Any:
        return self.zero_optimizer

    def training_step(self, batch: torch.Tensor) -> TrainingStep:
        return DeepSpeedStep(self.setup, self.model, self.zero_optimizer, batch, forward_module=self.engine)

    def optimizer_state_tensors(self) -> Iterator[torch.Tensor]:
        inner = getattr(self.zero_optimizer, "optimizer", self.zero_optimizer)
        for state in inner.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    yield value

    def parameter_tensors(self) -> Iterator[torch.Tensor]:
        for parameter in self.model.parameters():
            yield parameter
            partition = getattr(parameter, "ds_tensor", None)
            if isinstance(partition, torch.Tensor):
                yield partition
        yield from self.model.buffers()

    def owned_tensors(self) -> Owned:
        owned: Owned = []
        for bucket in getattr(self.zero_optimizer, "ipg_buckets", {}).values():
            for tensor in _tensors_in(getattr(bucket, "buffer", None), 2):
                owned.append(("overhead", "overhead/deepspeed reduce bucket (ipg_buckets buffer)", tensor))
        for name, tensor in named_tensors(self.zero_optimizer):
            owned.append((*_DEEPSPEED_ATTRIBUTES.get(name, ("overhead", "overhead/deepspeed " + name)), tensor))
        return owned

    def host_tensors(self) -> Owned:
        """What DeepSpeed puts in host memory under offload, by its source (0.19):

        * ZeRO-1/2 ``offload_optimizer`` (``stage_1_and_2.py``, ``DeepSpeedZeroOptimizer.__init__``
          with ``cpu_offload``, ``self.device = 'cpu'``): the fp32 master partition
          ``single_partition_of_fp32_groups`` and its ``.grad`` (``initialize_optimizer_states``),
          the pinned bit16 staging copy ``param_buffer_of_bit16_for_cpu_offload_groups``,
          ``temp_grad_buffer_for_cpu_offload`` (largest parameter, pinned), the gradient
          accumulators ``accumulated_grads_in_cpu`` and the optimizer's states. On the GPU stay
          ``bit16_groups_flat``, the reduce buckets and ``temp_grad_buffer_for_gpu_offload``.
        * ZeRO-3 ``offload_optimizer`` (``stage3.py``, ``self.device = 'cpu'``):
          ``fp32_partitioned_groups_flat`` and its ``.grad`` (``initialize_optimizer_states``), the
          pinned ``grad_partitions_flat_buffer`` and the optimizer's states; ``offload_param``: the
          parameters' partitions (``ds_tensor``).
        """
        parallel = self.setup.parallelism
        optimizer = self.zero_optimizer
        host: Owned = []
        if parallel.offload_optimizer:
            for name in ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat"):
                category, part = _DEEPSPEED_ATTRIBUTES[name]
                for tensor in _tensors_in(getattr(optimizer, name, None), 1):
                    host.append((category, part, tensor))
                    if isinstance(tensor.grad, torch.Tensor):
                        host.append(("gradients", "gradients/deepspeed fp32 gradient partition (.grad of the master)", tensor.grad))
            for name, category in (
                ("param_buffer_of_bit16_for_cpu_offload_groups", "overhead"),
                ("temp_grad_buffer_for_cpu_offload", "overhead"),
                ("accumulated_grads_in_cpu", "gradients"),
                ("grad_partitions_flat_buffer", "gradients"),
            ):
                for tensor in _tensors_in(getattr(optimizer, name, None), 1):
                    host.append((category, f"{category}/deepspeed {name}", tensor))
            for tensor in self.optimizer_state_tensors():
                host.append(("optimizer_states", "optimizer_states/optimizer state", tensor))
        if parallel.offload_parameters:
            for parameter in self.model.parameters():
                partition = getattr(parameter, "ds_tensor", None)
                if isinstance(partition, torch.Tensor):
                    host.append(("parameters", "parameters/deepspeed ds_tensor (offload_param)", partition))
        return host

    @property
    def optimizer_class(self) -> str:
        cls = type(self.zero_optimizer)
        return f"{cls.__module__}.{cls.__qualname__}"


_DEEPSPEED_ATTRIBUTES = {
    # stage 1 and 2 (deepspeed/runtime/zero/stage_1_and_2.py, DeepSpeedZeroOptimizer.__init__)
    "bit16_groups_flat": ("parameters", "parameters/deepspeed bit16_groups_flat"),
    "single_partition_of_fp32_groups": ("optimizer_states", "optimizer_states/deepspeed fp32 partition (master)"),
    "averaged_gradients": ("gradients", "gradients/deepspeed averaged_gradients"),
    "grads_in_partition": ("gradients", "gradients/deepspeed grads_in_partition"),
    "ipg_buffer": ("overhead", "overhead/deepspeed ipg_buffer (reduce bucket)"),
    # BF16_Optimizer (deepspeed/runtime/bf16_optimizer.py, _setup_for_real_optimizer): ZeRO-1 with bf16 and
    # data_types.grad_accum_dtype fp32 — a full-size fp32 gradient buffer and an fp32 master partition
    "fp32_groups_flat_partition": ("optimizer_states", "optimizer_states/deepspeed fp32 partition (master)"),
    "fp32_groups_gradients_flat": ("gradients", "gradients/deepspeed fp32_groups_gradients_flat"),
    "non_expert_gradients": ("gradients", "gradients/deepspeed fp32_groups_gradients_flat"),
    "fp32_groups_gradients": ("gradients", "gradients/deepspeed fp32_groups_gradients_flat"),
    "fp32_groups_actual_gradients_flat": ("gradients", "gradients/deepspeed fp32_groups_gradients_flat"),
    "fp32_groups_gradient_flat_partition": ("gradients", "gradients/deepspeed fp32_groups_gradients_flat"),
    # stage 3 (deepspeed/runtime/zero/stage3.py, DeepSpeedZeroOptimizer_Stage3.__init__)
    "fp16_partitioned_groups_flat": ("parameters", "parameters/deepspeed fp16_partitioned_groups_flat"),
    "fp32_partitioned_groups_flat": ("optimizer_states", "optimizer_states/deepspeed fp32 partition (master)"),
    "grad_partitions_flat_buffer": ("gradients", "gradients/deepspeed grad_partitions_flat_buffer"),
    "_DeepSpeedZeroOptimizer_Stage3__param_id_to_grad_partition": (
        "gradients",
        "gradients/deepspeed grad_partitions_flat_buffer",
    ),
}


def named_tensors(owner: Any, depth: int = 2) -> Iterator[tuple[str, torch.Tensor]]:
    """(attribute name, tensor) for every tensor an object holds in its attributes (lists/dicts, ``depth`` deep)."""
    for name, value in list(vars(owner).items()):
        for tensor in _tensors_in(value, depth):
            yield name, tensor


def _tensors_in(value: Any, depth: int) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif depth > 0 and isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors_in(item, depth - 1)
    elif depth > 0 and isinstance(value, dict):
        for item in value.values():
            yield from _tensors_in(item, depth - 1)


class DeepSpeedStep(TrainingStep):
    """DeepSpeed's loop: ``engine.backward(loss)`` (it scales by the accumulation steps), ``engine.step()``
    after every micro-batch (it steps the optimizer and zeroes the gradients at the accumulation boundary)."""

    def backward(self, loss: torch.Tensor, accumulation: int) -> None:
        self.forward_module.backward(loss)
        if self.micro_batch < accumulation:
            self.forward_module.step()

    def optimizer_step(self) -> None:
        self.forward_module.step()

    def zero_grad(self) -> None:
        pass

    def _optimizer_state_tensors(self) -> list[torch.Tensor]:
        inner = getattr(self.optimizer, "optimizer", self.optimizer)
        return [value for state in inner.state.values() for value in state.values() if isinstance(value, torch.Tensor)]


FRAMEWORKS = {
    "ddp": DDP, "fsdp1": FSDP1, "fsdp2": FSDP2, "dtensor-tp": DTensorTP, "fsdp2-tp": FSDP2TP, "deepspeed": DeepSpeed,
}

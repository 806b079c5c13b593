"""The symbolic autograd tape follows PyTorch's saving rules (see trainmem/tape.py)."""

import pytest

from trainmem.architecture import Architecture
from trainmem.catalogs import presets
from trainmem.hf_config import architecture_from_hf_config
from trainmem.inventory import build_inventory
from trainmem.layers import LayerKernels, LayerShape, Trainability, trace_layer
from trainmem.tape import Sym, Tape


def test_mul_saves_the_other_operand_of_each_input_that_needs_grad():
    tape = Tape(device="cpu")
    x = tape.new(10, "fp32", True)
    constant = Sym(10, "fp32", False)
    tape.mul(x, constant)
    assert [t is constant for t in tape.nodes[-1].saved] == [True]


def test_frozen_linear_does_not_save_its_input():
    tape = Tape(device="cpu")
    x = tape.new(4 * 8, "bf16", True)
    frozen = Sym(8 * 16, "bf16", False, "parameter")
    tape.linear(x, frozen, 16)
    assert tape.saved_bytes() == 0  # only the (frozen) weight is needed for the input's gradient


def test_a_view_keeps_its_whole_storage_alive():
    tape = Tape(device="cpu")
    qkv = tape.new(30, "fp32", True)
    q, k, v = tape.split(qkv, [10, 10, 10])
    tape.matmul(q, k, 100)
    assert tape.saved_bytes() == 30 * 4


def test_autocast_caches_casts_of_trainable_weights_only():
    tape = Tape(device="cuda", autocast="bf16")
    x = tape.new(4 * 64, "fp32", True)
    trainable = Sym(64 * 64, "fp32", True, "parameter")
    frozen = Sym(64 * 64, "fp32", False, "parameter")
    tape.linear(x, trainable, 64)
    tape.linear(x, frozen, 64)
    assert tape.cached_weight_copy_bytes == 64 * 64 * 2


def test_dropout_mask_is_one_byte_on_cuda_and_input_sized_on_cpu():
    for device, mask_bytes in (("cuda", 1), ("cpu", 2)):
        tape = Tape(device=device)
        x = tape.new(1024, "bf16", True)
        tape.dropout(x, 0.1)
        assert tape.saved_bytes() == 1024 * mask_bytes


def test_cuda_allocations_are_counted_in_512_byte_blocks():
    cuda, cpu = Tape(device="cuda"), Tape(device="cpu")
    assert cuda.new(10, "fp32", True).storage_nbytes == 512
    assert cpu.new(10, "fp32", True).storage_nbytes == 40


@pytest.mark.parametrize(
    "name", ["gpt2", "llama-3.2-1b", "phi-3-mini", "gemma-2-2b", "mixtral-8x7b", "qwen1.5-moe-a2.7b", "qwen2.5-0.5b"]
)
def test_backward_leaves_one_gradient_per_parameter_of_the_layer(name):
    """The replayed backward produces a gradient for every parameter of the layer, once."""
    arch = architecture_from_hf_config(presets()[name].config)
    shape = LayerShape(
        batch=1,
        seq=16,
        kv_seq=16,
        heads=arch.num_attention_heads,
        kv_heads=arch.kv_heads,
        head_dim=arch.resolved_head_dim,
        hidden=arch.hidden_size,
        intermediate=arch.intermediate_size,
        stream_tokens=16,
        experts_per_token=arch.num_experts_per_tok if arch.is_moe else 0,
        shared_intermediate=arch.shared_expert_intermediate_size,
    )
    # On CPU, bytes are counted exactly (CUDA rounds each gradient up to 512 bytes).
    kernels = LayerKernels(device="cpu", autocast=None, weight_dtype="bf16", stream_dtype="bf16", attention="fused")
    trace = trace_layer(arch, shape, kernels, Trainability(lambda m: True, lambda m: False), True)
    assert trace.parameter_grad_bytes == build_inventory(arch).layer_groups[0].layer_numel * 2


def test_layer_input_gradient_is_one_stream_tensor():
    arch = Architecture(
        vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128
    )
    shape = LayerShape(
        batch=2, seq=8, kv_seq=8, heads=4, kv_heads=4, head_dim=16, hidden=64, intermediate=128, stream_tokens=16
    )
    kernels = LayerKernels(device="cuda", autocast=None, weight_dtype="fp32", stream_dtype="fp32", attention="fused")
    trace = trace_layer(arch, shape, kernels, Trainability(lambda m: True, lambda m: False), True)
    assert trace.input_grad_bytes == 16 * 64 * 4


@pytest.mark.torch
def test_the_cpu_autocast_lists_follow_torch():
    """Probe CPU autocast (torch 2.13) on bf16 inputs: the tape's CPU fp32 list names ops torch runs in fp32, and
    the ops it leaves out (log_softmax, logsumexp, exp, sum, pow, rsqrt) stay in bf16."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from trainmem.tape import AUTOCAST_FP32, AUTOCAST_LOW

    x = torch.randn(4, 8, dtype=torch.bfloat16)
    target = torch.randn(4, 8, dtype=torch.bfloat16)
    labels = torch.randint(0, 8, (4,))
    ops = {
        "nll_loss": lambda: F.nll_loss(x, labels),
        "cross_entropy": lambda: F.cross_entropy(x, labels),
        "kl_div": lambda: F.kl_div(x, target, reduction="none", log_target=True),
        "log_softmax": lambda: F.log_softmax(x, -1),
        "logsumexp": lambda: torch.logsumexp(x, -1),
        "exp": lambda: torch.exp(x),
        "sum": lambda: x.sum(),
        "pow": lambda: x.pow(2),
        "rsqrt": lambda: torch.rsqrt(x),
        "mm": lambda: x.float() @ x.float().T,
    }
    with torch.autocast("cpu", dtype=torch.bfloat16):
        dtypes = {name: op().dtype for name, op in ops.items()}
    for name, dtype in dtypes.items():
        if name in AUTOCAST_FP32["cpu"]:
            assert dtype == torch.float32, name
        elif name in AUTOCAST_LOW["cpu"]:
            assert dtype == torch.bfloat16, name
        else:
            assert dtype == torch.bfloat16, name  # left alone: the input's dtype


@pytest.mark.torch
def test_a_residual_add_hands_its_gradient_on_as_measured():
    """``out = x + fc2(gelu(fc1(x)))`` (a pre-LN block's MLP half): AddBackward0 gives both inputs the incoming
    gradient itself, so the backward peak (at fc2's backward) holds one residual-stream gradient, not two. The
    tape's replayed peak equals the live bytes PyTorch's engine reaches, counted by the measurement tracker."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from trainmem.measure.tracker import StorageTracker

    rows, h, i = 64, 8, 32
    torch.manual_seed(0)
    fc0, fc1, fc2 = torch.nn.Linear(h, h), torch.nn.Linear(h, i), torch.nn.Linear(i, h)
    pixels = torch.randn(rows, h)  # needs no gradient: fc0's backward only makes its weight's
    tracker = StorageTracker()
    with tracker:
        x = fc0(pixels)
        out = x + fc2(F.gelu(fc1(x)))
        del x
        incoming = torch.ones_like(out)
        tracker.mark("backward", "backward", 1)
        out.backward(incoming)
    live, at_backward, peak = 0, None, 0
    for kind, _, nbytes in tracker.events:
        if kind == 2:  # MARK
            at_backward = live
            continue
        live += nbytes if kind == 0 else -nbytes
        if at_backward is not None:
            peak = max(peak, live - at_backward)
    saved_bytes = 4 * (rows * h + rows * i + rows * i)  # fc1's input x, gelu's input, fc2's input
    measured = peak + saved_bytes + 4 * rows * h  # the tape counts the saved tensors and the incoming gradient

    tape = Tape(device="cpu")
    x = tape.new(rows * h, "fp32", True)

    def parameter(numel):
        return Sym(numel, "fp32", True, "parameter")

    hidden = tape.linear(x, parameter(i * h), i, parameter(i))
    activated = tape.unary_saving_input("gelu", hidden)
    tape.release(hidden)
    mixed = tape.linear(activated, parameter(h * i), h, parameter(h))
    tape.release(activated)
    out = tape.add(x, mixed)
    tape.release(x, mixed)
    assert tape.saved_bytes() == saved_bytes
    assert tape.backward([out]).peak_bytes == measured

"""The encoder fixes found op by op against measured steps (README, "What the encoders' tape got wrong").

Each rule is checked on a small tape, and the corpus cases that exposed it stay within 0.1% of their
measured peak (predictions only: no torch).
"""

import pytest

import trainmem
from trainmem.layers import LayerKernels, LayerProgram, LayerShape, Trainability
from trainmem.measure.corpus import load_corpus
from trainmem.models.modernbert import ModernBert
from trainmem.tape import Sym, Tape
from trainmem.validate import compare

FIXED_CASES = (
    "modernbert-small-ampbf16-lora-seqcls-sdpa-b4-s256",
    "bert-small-nodropout-ampbf16-embedding-fused-b8-s128",
    "bert-small-nodropout-fp32-seqcls-fused-b8-s256",
    "bert-small-ampbf16-seqcls-eager-b8-s256",
    "deberta-small-ampbf16-seqcls-b4-s256",
    "deberta-v3-base-ampbf16-tokcls-b8-s512-fake",
    "llava-small-fp32-trained-tower-4img-b2-s128",
)


@pytest.mark.parametrize("case_id", FIXED_CASES)
def test_the_cases_that_exposed_the_rules_are_within_a_tenth_of_a_percent(case_id):
    measurement = next(m for m in load_corpus() if m.id == case_id)
    comparison = compare(measurement, trainmem.estimate(measurement.setup, suggestions=False))
    assert abs(comparison.relative_error) <= 0.001, (case_id, comparison.relative_error)


def test_add_hands_its_output_gradient_to_both_inputs_without_a_copy():
    tape = Tape(device="cpu")
    x = tape.new(100, "fp32", True)
    branch = tape.scale(x)  # a second path from x
    out = tape.add(x, branch)
    replay = tape.backward([out])
    # the output's gradient (400 B) is passed on; the scale's backward makes x's second gradient (a transient)
    assert replay.peak_bytes == 400 + 400
    assert replay.input_grad_bytes == 400


def test_add_with_a_cast_input_makes_that_input_its_own_gradient():
    tape = Tape(device="cpu")
    residual = tape.new(100, "fp32", True)
    low = tape.new(100, "bf16", True)
    out = tape.add(residual, low)  # fp32 + bf16 -> fp32: the bf16 input's gradient is a cast
    replay = tape.backward([out])
    assert replay.input_grad_bytes == 400 + 200


def test_sum_backward_is_a_view_of_the_output_gradient():
    tape = Tape(device="cpu")
    x = tape.new(1000, "fp32", True)
    total = tape.sum(x, 10)
    replay = tape.backward([total])
    assert replay.input_grad_bytes == 40  # expand() of the (10,) gradient: no (1000,) tensor, the (10,) one lives on
    cast = Tape(device="cpu")
    y = cast.new(1000, "bf16", True)
    summed = cast.sum(y, 10, dtype="fp32")  # sum(dtype=float32) casts the gradient back: a new tensor
    assert cast.backward([summed]).input_grad_bytes == 2000


def _program(tape: Tape, lora_rank: int = 0) -> LayerProgram:
    from trainmem.hf_config import architecture_from_hf_config

    arch = architecture_from_hf_config(
        {"model_type": "llama", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
         "num_attention_heads": 2, "vocab_size": 64}
    )
    shape = LayerShape(1, 4, 4, 2, 2, 8, 16, 32, 4)
    kernels = LayerKernels(
        device="cpu", autocast="bf16", weight_dtype="fp32", stream_dtype="fp32", attention="fused",
        lora_rank=lora_rank, adapter_dtype="fp32",
    )
    has_adapter = (lambda module: True) if lora_rank else (lambda module: False)
    return LayerProgram(arch, shape, kernels, Trainability(lambda module: True, has_adapter), tape)


def test_a_module_called_twice_is_cast_once_and_gets_one_gradient():
    tape = Tape(device="cpu", autocast="bf16")
    program = _program(tape)
    x = tape.new(4 * 16, "fp32", True)
    first = program.linear("q_proj", x, 16, 16, False)
    second = program.linear("q_proj", x, 16, 16, False)
    assert tape.cached_weight_copy_bytes == 16 * 16 * 2
    replay = tape.backward([tape.add(first, second)])
    assert replay.parameter_grad_bytes == 16 * 16 * 4


def test_peft_input_cast_lives_until_the_adapter_sum():
    tape = Tape(device="cpu", autocast="bf16")
    program = _program(tape, lora_rank=2)
    x = tape.new(4 * 16, "bf16", True)  # a bf16 input: PEFT casts it to the fp32 adapters' dtype
    program.linear("o_proj", x, 16, 16, False)
    fp32_casts = [t for t in tape.live.values() if t.dtype == "fp32" and t.numel == 4 * 16]
    assert not fp32_casts  # released once lora.Linear.forward returns
    alive = []
    original = tape.add

    def spy(a, b):
        alive.append(any(t.dtype == "fp32" and t.numel == 4 * 16 for t in tape.live.values()))
        return original(a, b)

    tape.add = spy
    program.linear("o_proj", x, 16, 16, False)
    assert alive == [True]  # the cast is alive at ``result + lora_B(lora_A(x)) * scaling``


def test_modernbert_keeps_its_position_ids_and_sliding_mask_through_the_forward():
    from trainmem.hf_config import architecture_from_hf_config

    arch = architecture_from_hf_config(
        {"model_type": "modernbert", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
         "num_attention_heads": 2, "vocab_size": 100, "local_attention": 64, "global_attn_every_n_layers": 3}
    )
    family = ModernBert()
    names = [name for name, _, _ in family.forward_locals_bytes(arch, 1, 256, "fused")]
    assert names == ["position ids", "sliding-window attention mask"]
    assert dict((n, b) for n, b, _ in family.forward_locals_bytes(arch, 1, 256, "fused"))["sliding-window attention mask"] == 256 * 256
    assert [n for n, _, _ in family.forward_locals_bytes(arch, 1, 16, "fused")] == ["position ids"]  # under the half window
    assert [n for n, _, _ in family.forward_locals_bytes(arch, 1, 256, "eager")] == ["position ids"]


def test_sym_identity_is_what_the_weight_cache_keys_on():
    weight = Sym(4, "fp32", True, "parameter")
    tape = Tape(device="cpu", autocast="bf16")
    assert tape.autocast_input("linear", weight) is tape.autocast_input("linear", weight)


def test_the_add_that_consumes_the_incoming_gradient_hands_it_on():
    tape = Tape(device="cpu")
    x = tape.new(100, "fp32", True)
    out = tape.add(x, tape.scale(x))
    assert tape.backward([out]).peak_bytes == 800  # the incoming gradient becomes x's; the scale's part is summed in

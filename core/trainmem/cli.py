"""The ``trainmem`` command line: a thin shell over ``trainmem.estimate``.

    trainmem estimate --preset llama-2-13b --gpus 8 --zero 3 --precision bf16-mixed \\
        --micro-batch-size 4 --seq-len 4096 --checkpointing full --gpu a100-80gb
    trainmem estimate setup.json --json
    trainmem presets | gpus | optimizers [--json]
    trainmem schema
    trainmem compare a.json b.json [--json | --markdown]   # or: trainmem compare a.json --zero 3
    trainmem measure ... / trainmem validate ...   (see their --help)

Exit status: 0 on success, 1 when ``--fail-if-not-fit`` is given and the setup does not
fit, 2 on bad input (with one line naming the field and what is allowed), 3 on an internal
error (one line too; ``TRAINMEM_DEBUG=1`` shows the traceback), 130 when interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Optional, Sequence

from pydantic import ValidationError

from .catalogs import gpus, optimizers, presets
from .cli_values import decimal_number, whole_number
from .errors import one_line, printable
from .files import read_json_file
from .inputs.record import InputError
from .patch import merge_patch


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        words = self.prog.split()
        prog = "trainmem" if len(words) == 1 else f"trainmem {words[-1]}"
        sys.stderr.write(f"{prog}: error: {printable(message)}\n")
        raise SystemExit(2)


OneLineParser = _OneLineParser
"""For the other subcommands' parsers (measure, validate)."""


def _given_twice(parser: argparse.ArgumentParser, namespace: argparse.Namespace, action: argparse.Action) -> None:
    """A flag given twice (``--mbs 2 --micro-batch-size 4``) is a conflict, not "the last one wins"."""
    seen = namespace.__dict__.setdefault("_flags_given", set())
    if action.dest in seen:
        names = "/".join(action.option_strings) or action.dest
        parser.error(f"argument {names}: given more than once")
    seen.add(action.dest)


class _StoreOnce(argparse._StoreAction):
    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[no-untyped-def]
        if option_string is not None:
            _given_twice(parser, namespace, self)
            if values == [] and self.nargs is None:  # `--mbs=--`: argparse strips the '--' and passes []
                parser.error(f"argument {'/'.join(self.option_strings)}: expected a value, got '--'")
        super().__call__(parser, namespace, values, option_string)


class _StoreTrueOnce(argparse._StoreTrueAction):
    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[no-untyped-def]
        _given_twice(parser, namespace, self)
        super().__call__(parser, namespace, values, option_string)


def _add_estimate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.register("action", None, _StoreOnce)
    parser.register("action", "store", _StoreOnce)
    parser.register("action", "store_true", _StoreTrueOnce)
    parser.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="a setup JSON file (see `trainmem schema`), or the run's own files: TRL/TrainingArguments, DeepSpeed, "
        "Accelerate, Axolotl, LLaMA-Factory, PEFT adapter_config.json, config.json; flags override their values",
    )
    parser.add_argument("--json", action="store_true", help="print the full report as JSON")
    _add_input_arguments(parser)
    parser.add_argument("--fail-if-not-fit", action="store_true", help="exit with status 1 when it does not fit")
    model = parser.add_argument_group("model")
    model.add_argument("--preset", help="a model preset (trainmem presets)")
    model.add_argument("--hf-config", metavar="CONFIG_JSON", help="a Hugging Face config.json file")
    model.add_argument("--num-parameters", type=whole_number, help="only a parameter count (model states only)")
    model.add_argument(
        "--task",
        help="the head: causal_lm (decoders), sequence_classification, token_classification, masked_lm, embedding",
    )
    model.add_argument("--num-labels", type=whole_number, help="classes of a classification head (default 2)")
    run = parser.add_argument_group("batch and precision")
    run.add_argument("--micro-batch-size", "--mbs", type=whole_number, dest="micro_batch_size")
    run.add_argument("--seq-len", "--sequence-length", type=whole_number, dest="sequence_length")
    run.add_argument(
        "--target-len", "--target-length", type=whole_number, dest="target_length",
        help="encoder-decoders (t5, mt5): the decoder's tokens per sample; --seq-len is then the source length",
    )
    run.add_argument("--grad-accum", "--gradient-accumulation-steps", type=whole_number, dest="gradient_accumulation_steps")
    run.add_argument("--precision", help="fp32, amp-bf16, bf16-mixed, bf16-master-weights, bf16-pure, ...")
    run.add_argument("--optimizer", help="adamw, adam, sgd, sgd-momentum, adamw-8bit, adafactor, lion, ...")
    run.add_argument("--optimizer-implementation", choices=["foreach", "for-loop", "fused"])
    run.add_argument("--checkpointing", choices=["none", "selective", "full"], dest="activation_checkpointing")
    run.add_argument("--attention", choices=["sdpa", "flash_attention_2", "eager", "sdpa-math"])
    run.add_argument("--loss", choices=["standard", "chunked", "liger"])
    par = parser.add_argument_group("parallelism")
    par.add_argument("--gpus", type=whole_number, dest="num_gpus", help="GPUs in the run")
    par.add_argument("--zero", type=whole_number, choices=[0, 1, 2, 3], help="DeepSpeed ZeRO stage")
    par.add_argument(
        "--fsdp",
        nargs="?",
        const="FULL_SHARD",
        choices=["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"],
        help="PyTorch FSDP",
    )
    par.add_argument("--ddp", action="store_true", help="PyTorch DDP (the default data parallelism)")
    par.add_argument("--tp", "--tensor-parallel", type=whole_number, dest="tensor_parallel_size")
    par.add_argument("--pp", "--pipeline-parallel", type=whole_number, dest="pipeline_parallel_size")
    par.add_argument("--cp", "--context-parallel", type=whole_number, dest="context_parallel_size")
    par.add_argument("--ep", "--expert-parallel", type=whole_number, dest="expert_parallel_size")
    par.add_argument("--etp", "--expert-tensor-parallel", type=whole_number, dest="expert_tensor_parallel_size")
    par.add_argument("--sequence-parallel", action="store_true", default=None)
    par.add_argument("--offload-optimizer", action="store_true", default=None)
    par.add_argument("--offload-params", action="store_true", default=None, dest="offload_parameters")
    tune = parser.add_argument_group("fine-tuning")
    tune.add_argument("--lora", type=whole_number, metavar="RANK", help="LoRA with this rank")
    tune.add_argument("--qlora", type=whole_number, metavar="RANK", help="QLoRA (4-bit NF4 base) with this LoRA rank")
    tune.add_argument("--lora-targets", help="comma-separated module names, or all-linear")
    hw = parser.add_argument_group("hardware")
    hw.add_argument("--gpu", help="a GPU of the catalog (trainmem gpus)")
    hw.add_argument("--gpu-memory-gib", type=decimal_number, help="a custom GPU with this much memory")
    hw.add_argument("--headroom", type=decimal_number, dest="headroom_fraction", help="fraction to keep free (default 0.10)")
    hw.add_argument("--device", choices=["cuda", "cpu"], help="cpu replays a CPU measurement")
    hw.add_argument(
        "--alloc-conf",
        dest="cuda_alloc_conf",
        help="PYTORCH_CUDA_ALLOC_CONF to replay the caching allocator with, e.g. expandable_segments:True",
    )


def _add_input_arguments(parser: argparse.ArgumentParser) -> None:
    from .inputs.detect import KINDS
    from .inputs.writers import FORMATS

    files = parser.add_argument_group("trainer files")
    files.add_argument("--from", dest="from_kind", choices=KINDS, help="read every FILE as this kind")
    files.add_argument("--emit", choices=FORMATS, help="write the setup as this kind of file (to stdout)")
    files.add_argument("--emit-to", metavar="PATH", help="write the --emit file here instead of stdout")
    files.add_argument("--apply", type=whole_number, metavar="N", help="apply suggestion N of the report first (1 = the first)")


def setup_from_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The setup dict: the setup file's contents (if any) with the flags on top."""
    setup: dict[str, Any] = {}
    files = list(getattr(args, "files", None) or [])
    if len(files) > 1:
        raise _InputError("setup: give one setup file (several files are read as trainer files)")
    if files:
        try:
            setup = read_json_file(files[0], "setup file")
        except ValueError as error:
            raise _InputError(f"setup: {error}") from None
        if not isinstance(setup, dict):
            raise _InputError(f"setup: {files[0]!r} must hold a JSON object")
    return merge_patch(setup, flag_patch(args))


def _encoder_numel(arch: Any) -> int:
    """An encoder-decoder's encoder stack (its Architecture is the decoder's; trainmem.encoder_decoder)."""
    from .encoder_decoder.stack import encoder_stack

    stack = encoder_stack(arch)
    return stack.numel if stack is not None else 0


def flag_patch(args: argparse.Namespace) -> dict[str, Any]:
    """The setup fields the flags set (a JSON merge patch)."""
    patch: dict[str, Any] = {}
    models = [m for m in ("preset", "hf_config", "num_parameters") if getattr(args, m) is not None]
    if len(models) > 1:
        raise _InputError("model: give only one of --preset, --hf-config, --num-parameters")
    if models:
        patch["model"] = {models[0]: getattr(args, models[0])}
    for name in (
        "micro_batch_size",
        "sequence_length",
        "target_length",
        "gradient_accumulation_steps",
        "precision",
        "activation_checkpointing",
        "attention",
        "loss",
        "headroom_fraction",
    ):
        if getattr(args, name) is not None:
            patch[name] = getattr(args, name)
    if args.optimizer is not None or args.optimizer_implementation is not None:
        patch["optimizer"] = {
            k: v
            for k, v in (("name", args.optimizer), ("implementation", args.optimizer_implementation))
            if v is not None
        }
    parallel: dict[str, Any] = {}
    for name in (
        "num_gpus",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "context_parallel_size",
        "expert_parallel_size",
        "expert_tensor_parallel_size",
        "sequence_parallel",
        "offload_optimizer",
        "offload_parameters",
    ):
        if getattr(args, name) is not None:
            parallel[name] = getattr(args, name)
    strategies = [flag for flag in ("zero", "fsdp") if getattr(args, flag) is not None] + (["ddp"] if args.ddp else [])
    if len(strategies) > 1:
        raise _InputError("parallelism.strategy: give only one of --ddp, --zero, --fsdp")
    if args.zero is not None:
        parallel.update(strategy="zero", zero_stage=args.zero)
    if args.fsdp is not None:
        parallel.update(strategy="fsdp", fsdp_sharding_strategy=args.fsdp, zero_stage=0)
    if args.ddp:
        parallel.update(strategy="ddp", zero_stage=0)
    if parallel:
        patch["parallelism"] = parallel
    if args.lora is not None and args.qlora is not None:
        raise _InputError("finetuning.method: give only one of --lora, --qlora")
    finetuning: dict[str, Any] = {}
    if args.lora is not None or args.qlora is not None:
        finetuning = {
            "method": "lora" if args.lora is not None else "qlora",
            "lora": {"r": args.lora if args.lora is not None else args.qlora},
        }
    if args.lora_targets:
        targets: Any = (
            args.lora_targets
            if args.lora_targets == "all-linear"
            else [t.strip() for t in args.lora_targets.split(",") if t.strip()]
        )
        finetuning = merge_patch(finetuning, {"lora": {"target_modules": targets}})
    if finetuning:
        patch["finetuning"] = finetuning
    if args.gpu is not None and args.gpu_memory_gib is not None:
        raise _InputError("gpu: give only one of --gpu, --gpu-memory-gib")
    if args.gpu is not None:
        patch["gpu"] = args.gpu
    if args.gpu_memory_gib is not None:
        patch["gpu"] = {"memory_gib": args.gpu_memory_gib}
    if args.device is not None:
        patch["runtime"] = {"device": args.device}
    if args.cuda_alloc_conf is not None:
        patch.setdefault("runtime", {})["cuda_alloc_conf"] = args.cuda_alloc_conf
    task = {k: v for k, v in (("kind", args.task), ("num_labels", args.num_labels)) if v is not None}
    if task:
        patch["task"] = task
    return patch


class _InputError(Exception):
    """Bad input found before validation (unreadable file, conflicting flags)."""


def _estimate(args: argparse.Namespace) -> int:
    from .inputs.cli import run_estimate

    return run_estimate(args, setup_from_arguments, flag_patch)


def _add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    """A (a setup or a saved ``estimate --json`` report), and B: a second file, flags on top of A, or both."""
    _add_estimate_arguments(parser)  # its FILE arguments are A and, optionally, B (default: A itself)
    parser.add_argument("--markdown", action="store_true", help="print the comparison as a Markdown table")


def _read_side(path: str) -> tuple[dict[str, Any], Any]:
    """(setup dict, Report or None): a report file (``estimate --json``) is used as it is, unless flags change it."""
    from .report import Report

    try:
        data = read_json_file(path, "setup file")
    except ValueError as error:
        raise _InputError(f"setup: {error}") from None
    if not isinstance(data, dict):
        raise _InputError(f"setup: {path!r} must hold a JSON object")
    if "peak_total_bytes" in data and isinstance(data.get("setup"), dict):
        return data["setup"], Report.model_validate(data)
    return data, None


def _compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .compare import compare, render_comparison
    from .estimate import estimate
    from .render_markdown import render_comparison_markdown

    files = list(args.files or [])
    if not files:
        raise _InputError("setup: give the first setup file (trainmem compare A.json B.json, or A.json and flags)")
    if len(files) > 2:
        raise _InputError("compare: give two setup files at most (A and B)")
    if args.json and args.markdown:
        raise _InputError("compare: give only one of --json, --markdown")
    first, second = files[0], (files[1] if len(files) == 2 else None)
    setup_a, report_a = _read_side(first)
    setup_b, report_b = _read_side(second) if second else (setup_a, report_a)
    args.files = []  # what is left of the arguments is the flags: a patch on top of B
    flags = setup_from_arguments(args)
    if not second and not flags:
        raise _InputError("compare: give a second setup file, or flags that change the first (e.g. --zero 3)")
    if flags:
        setup_b, report_b = merge_patch(setup_b, flags), None
    a = report_a or estimate(setup_a)
    b = report_b or estimate(setup_b)
    b_label = Path(second).name if second else f"{Path(first).name} with the flags"
    if second and flags:
        b_label += " with the flags"
    comparison = compare(a, b, a_label=Path(first).name, b_label=b_label)
    if args.json:
        print(comparison.model_dump_json(indent=2))
    elif args.markdown:
        print(render_comparison_markdown(comparison), end="")
    else:
        print(render_comparison(comparison))
    return 1 if args.fail_if_not_fit and not b.fit.fits else 0


def _write(text: str) -> None:
    """Print ``text``; a terminal that cannot show a character (``PYTHONIOENCODING=ascii``) gets a
    replacement for it rather than a UnicodeEncodeError."""
    try:
        sys.stdout.write(text + "\n")
    except UnicodeEncodeError:
        encoding = sys.stdout.encoding or "ascii"
        sys.stdout.write((text + "\n").encode(encoding, "replace").decode(encoding))
    sys.stdout.flush()


def _catalog(kind: str, as_json: bool) -> int:
    if kind == "presets":
        from .estimate import estimate  # noqa: F401  (parameter counts come from the inventory)
        from .hf_config import architecture_from_hf_config
        from .inventory import build_inventory

        rows = []
        for preset in presets().values():
            arch = architecture_from_hf_config(preset.config)
            rows.append(
                {
                    "name": preset.name,
                    "display_name": preset.display_name,
                    "hf_id": preset.hf_id,
                    "model_type": arch.model_type,
                    "num_parameters": build_inventory(arch).num_parameters + _encoder_numel(arch),
                }
            )
        if as_json:
            _write(json.dumps(rows, indent=2))
        else:
            for row in rows:
                print(f"{row['name']:<20} {row['num_parameters']:>17,}  {row['display_name']}  ({row['hf_id']})")
    elif kind == "gpus":
        rows = [g.model_dump() | {"memory_bytes": g.memory_bytes} for g in gpus().values()]
        if as_json:
            _write(json.dumps(rows, indent=2))
        else:
            for g in gpus().values():
                print(f"{g.name:<16} {g.memory_mib / 1024:>7.1f} GiB  {g.display_name}")
    else:
        rows = [o.model_dump(by_alias=True) for o in optimizers().values()]
        if as_json:
            _write(json.dumps(rows, indent=2))
        else:
            for o in optimizers().values():
                print(f"{o.name:<18} {o.display_name}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = _OneLineParser(prog="trainmem", description="Simulate the GPU memory of a training step.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineParser)
    _add_estimate_arguments(commands.add_parser("estimate", help="estimate the memory of a setup"))
    _add_compare_arguments(
        commands.add_parser(
            "compare",
            help="compare two setups: the peaks, categories and parts of B against A",
            description="Compare setup (or report) B with A: trainmem compare A.json B.json, or "
            "trainmem compare A.json --zero 3 (B is A with the flags on top). --fail-if-not-fit looks at B.",
        )
    )
    for kind in ("presets", "gpus", "optimizers"):
        sub = commands.add_parser(kind, help=f"list the {kind} trainmem knows")
        sub.add_argument("--json", action="store_true")
    commands.add_parser("schema", help="print the JSON Schema of a setup file")
    commands.add_parser("measure", help="measure a setup with PyTorch (needs trainmem[measure])", add_help=False)
    commands.add_parser("validate", help="compare predictions with the measured corpus", add_help=False)

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("measure", "validate"):
        return _delegate(argv[0], argv[1:])
    try:
        args = parser.parse_args(argv)
        if args.command == "estimate":
            return _estimate(args)
        if args.command == "compare":
            return _compare(args)
        if args.command == "schema":
            from .setup import Setup

            _write(json.dumps(Setup.model_json_schema(), indent=2))
            return 0
        return _catalog(args.command, args.json)
    except ValidationError as error:
        return _fail(one_line(error))
    except InputError as error:  # a trainer file that cannot be read (names the file and the key)
        return _fail(str(error))
    except (_InputError, ValueError) as error:  # a ValueError names what the simulator cannot model
        return _fail(str(error))
    except (RecursionError, MemoryError) as error:
        return _fail(f"the input is too large or too deeply nested ({type(error).__name__})")
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except KeyboardInterrupt:
        sys.stderr.write("trainmem: interrupted\n")
        return 130
    except Exception as error:  # a bug in trainmem, not in the input: still one line, and a way to see more
        if os.environ.get("TRAINMEM_DEBUG"):
            raise
        return _fail(
            f"internal error ({type(error).__name__}: {error}); please report it with the command line "
            "(TRAINMEM_DEBUG=1 shows the traceback)",
            status=3,
        )


def _fail(message: str, status: int = 2) -> int:
    sys.stderr.write(f"trainmem: error: {printable(message, 2000)}\n")
    return status


def _silence_stdout() -> None:
    """After a closed pipe (``trainmem presets | head -1``), the interpreter's final flush must not fail too."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _delegate(command: str, argv: list[str]) -> int:
    """``trainmem measure`` / ``validate``: their own parsers, the same one-line failures."""
    try:
        if command == "measure":
            from .measure.cli import main as measure_main

            return measure_main(argv)
        from .validate import main as validate_main

        return validate_main(argv)
    except ValidationError as error:
        return _fail(one_line(error))
    except ValueError as error:
        return _fail(str(error))
    except KeyboardInterrupt:
        sys.stderr.write("trainmem: interrupted\n")
        return 130
    except Exception as error:  # noqa: BLE001 - one line, as for estimate
        if os.environ.get("TRAINMEM_DEBUG"):
            raise
        return _fail(f"internal error ({type(error).__name__}: {error}); TRAINMEM_DEBUG=1 shows the traceback", 3)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

"""The ``ortpipe`` command line: ``ortpipe bench`` and ``ortpipe info``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import models
from ._errors import PipelineError
from .bench import MODES, format_table, run_modes
from .devices import Device, HostDevice, cuda_unavailable_reason, resolve_device

DEFAULT_MODEL = "convnet"
DEFAULT_LINK_GBPS = 12.0


def _depths(text: str) -> list[int]:
    try:
        depths = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--depth takes whole numbers like 1,2,3, got {text!r}") from None
    if not depths or min(depths) < 1:
        raise argparse.ArgumentTypeError(f"--depth takes numbers >= 1, got {text!r}")
    return depths


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__}, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ortpipe", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="throughput of naive, IOBinding and pipelined runs of one model")
    bench.add_argument(
        "model",
        nargs="?",
        default=DEFAULT_MODEL,
        help=f"a built-in model ({', '.join(models.BUILTIN)}) or an .onnx file; default {DEFAULT_MODEL}",
    )
    bench.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N")
    bench.add_argument("--batch-size", type=_positive(int), default=32)
    bench.add_argument("--depth", type=_depths, default=[1, 2, 3], help="pipeline depths, e.g. 1,2,3")
    bench.add_argument("--batches", type=_positive(int), default=40, help="timed batches per mode")
    bench.add_argument("--warmup", type=int, default=3, help="untimed batches per mode")
    bench.add_argument("--modes", default=",".join(MODES), help=f"subset of {','.join(MODES)}")
    bench.add_argument(
        "--link-gbps",
        type=_positive(float),
        default=None,
        help=f"emulated link on the host device (default {DEFAULT_LINK_GBPS:g} GB/s with no GPU)",
    )
    bench.add_argument("--latency-us", type=float, default=10.0, help="emulated link latency per copy")
    bench.add_argument("--threads", type=_positive(int), default=None, help="ORT intra-op threads")
    bench.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    sub.add_parser("info", help="ORT, CuPy and device facts")
    return parser


def _bench_device(args: argparse.Namespace) -> tuple[Device, str]:
    if args.link_gbps is not None and args.device in ("auto", "cpu", "host"):
        device = HostDevice(link_gbps=args.link_gbps, latency_us=args.latency_us)
        return device, "host device with an emulated link (--link-gbps)"
    if args.device == "auto":
        reason = cuda_unavailable_reason(0)
        if reason is None:
            return resolve_device("cuda:0"), "CUDA found"
        device = HostDevice(link_gbps=DEFAULT_LINK_GBPS, latency_us=args.latency_us)
        return device, f"no CUDA ({reason}); host device with an emulated {DEFAULT_LINK_GBPS:g} GB/s link"
    return resolve_device(args.device), f"--device {args.device}"


def _bench_batches(model_arg: str, batch_size: int, count: int) -> tuple[Any, list[dict[str, np.ndarray]]]:
    if model_arg in models.BUILTIN:
        model = models.get(model_arg)
        return model, [models.example_batch(model_arg, batch_size, seed=i) for i in range(count)]
    path = Path(model_arg)
    if not path.is_file():
        raise PipelineError(f"model {model_arg!r} is neither a built-in ({', '.join(models.BUILTIN)}) nor a file")
    from ._session import OrtSession

    probe = OrtSession(path, HostDevice())
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(count):
        batch = {}
        for spec in probe.inputs:
            dims = [batch_size if axis == 0 and not isinstance(d, int) else d for axis, d in enumerate(spec.shape)]
            if not all(isinstance(d, int) for d in dims):
                raise PipelineError(f"input {spec.name!r} has free dims {spec.describe_shape()}: not supported yet")
            batch[spec.name] = rng.random(dims).astype(spec.dtype)
        batches.append(batch)
    return path, batches


def cmd_bench(args: argparse.Namespace) -> int:
    device, why = _bench_device(args)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    model, batches = _bench_batches(args.model, args.batch_size, args.batches + max(args.warmup, 0))
    warm, timed = batches[: args.warmup], batches[args.warmup :]
    print(f"device: {device.name}  [{why}]")
    print(f"model: {args.model}  batch size {args.batch_size}, {len(timed)} timed batches, {len(warm)} warm-up")
    results = run_modes(
        model, device, timed, warmup=warm, depths=args.depth, modes=modes, intra_op_threads=args.threads
    )
    print(format_table(results))
    if args.json is not None:
        payload = {
            "device": device.describe(),
            "model": str(args.model),
            "batch_size": args.batch_size,
            "results": [row.to_dict() for row in results],
        }
        args.json.write_text(json.dumps(payload, indent=2))
        print(f"wrote {args.json}")
    device.close()
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    import onnxruntime as ort

    print(f"onnxruntime {ort.__version__}: providers {ort.get_available_providers()}")
    reason = cuda_unavailable_reason(0)
    print("cuda: available" if reason is None else f"cuda: not available ({reason})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"bench": cmd_bench, "info": cmd_info}[args.command](args)
    except PipelineError as exc:
        print(f"ortpipe: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

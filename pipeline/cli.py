"""The ``ortpipe`` command line: ``ortpipe bench`` and ``ortpipe info``."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import models
from ._errors import PipelineError
from ._progress import Progress
from .bench import MODES, ModeResult, Workload, format_table, measure_copy_gbps, run_modes
from .devices import Device, HostDevice, cuda_unavailable_reason, resolve_device

DEFAULT_MODEL = "convnet"
DEFAULT_LINK_GBPS = 12.0
DTYPES = ("float32", "float16", "float64", "uint8", "int8", "int32", "int64", "bool")


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


def _input_spec(text: str) -> tuple[str, tuple[int, ...], str | None]:
    """NAME:SHAPE[:DTYPE], SHAPE as 3x224x224 or 3,224,224 (without the batch dim)."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise argparse.ArgumentTypeError(
            f"--input takes NAME:SHAPE[:DTYPE], e.g. frames:3x224x224:float32, got {text!r}"
        )
    try:
        shape = tuple(int(d) for d in parts[1].replace(",", "x").split("x") if d)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--input {text!r}: SHAPE must be whole numbers like 3x224x224") from None
    dtype = parts[2] if len(parts) == 3 else None
    if dtype is not None and dtype not in DTYPES:
        raise argparse.ArgumentTypeError(f"--input {text!r}: unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
    return parts[0], shape, dtype


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
    amount = bench.add_mutually_exclusive_group()
    amount.add_argument("--batches", type=_positive(int), default=None, help="timed batches per mode (default 40)")
    amount.add_argument("--duration", type=_positive(float), default=None, help="timed seconds per mode")
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
    bench.add_argument(
        "--input",
        type=_input_spec,
        action="append",
        default=[],
        metavar="NAME:SHAPE[:DTYPE]",
        help="shape (without the batch dim) of an input with free dims; repeatable",
    )
    bench.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    bench.add_argument("--trace", type=Path, default=None, help="Chrome trace (Perfetto) of the deepest pipelined run")
    bench.add_argument("--plot", type=Path, default=None, help="PNG timeline of the deepest pipelined run")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    sub.add_parser("info", help="ORT, CuPy and device facts, with measured copy bandwidth")
    _add_run(sub)
    return parser


def _size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--size takes WIDTHxHEIGHT, e.g. 224x224, got {text!r}") from None
    if width < 1 or height < 1:
        raise argparse.ArgumentTypeError(f"--size must be positive, got {text!r}")
    return width, height


def _column_map(text: str) -> tuple[str, list[str]]:
    name, sep, columns = text.partition("=")
    if not sep or not name or not columns:
        raise argparse.ArgumentTypeError(f"--input-column takes INPUT=COL[,COL...], got {text!r}")
    return name, [c for c in columns.split(",") if c]


def _add_run(sub: Any) -> None:
    run = sub.add_parser("run", help="run a model over a video, .npy, Parquet table or image folder")
    run.add_argument("model", help=f"an .onnx file or a built-in model ({', '.join(models.BUILTIN)})")
    run.add_argument("--input", required=True, type=Path, help="a video, .npy, .parquet, or a folder of images")
    run.add_argument("--output", required=True, type=Path, help=".npy or .parquet")
    run.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N")
    run.add_argument("--batch-size", type=_positive(int), default=64)
    run.add_argument("--depth", type=_positive(int), default=3)
    run.add_argument(
        "--preprocess",
        default=None,
        help="device-side conversion, e.g. scale=1/255,mean=0.485:0.456:0.406,std=0.229:0.224:0.225,"
        "layout=nhwc ('none' to send the input as it is; default for video and images: "
        "scale=1/255,layout=nhwc when the model takes float NCHW)",
    )
    run.add_argument("--input-name", default=None, help="the model input a video/.npy/image source feeds")
    run.add_argument(
        "--input-column",
        type=_column_map,
        action="append",
        default=[],
        metavar="INPUT=COL[,COL]",
        help="Parquet columns of a model input (one list column, or scalar columns in order)",
    )
    run.add_argument("--id-column", default=None, help="Parquet column written beside the outputs (default row_id)")
    run.add_argument("--size", type=_size, default=None, help="resize video frames / images to WIDTHxHEIGHT")
    run.add_argument("--pix-fmt", default="rgb24", choices=["rgb24", "bgr24"], help="channel order of video frames")
    run.add_argument("--threads", type=_positive(int), default=None, help="ORT intra-op threads")
    run.add_argument("--no-progress", action="store_true")


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


def synthetic_batches(model_arg: str, batch_size: int, count: int, inputs: Sequence[Any] = ()) -> tuple[Any, list]:
    """The model (built-in or file) and ``count`` random batches that fit it."""
    if model_arg in models.BUILTIN and not inputs:
        return models.get(model_arg), [models.example_batch(model_arg, batch_size, seed=i) for i in range(count)]
    from ._session import OrtSession

    model: Any = models.get(model_arg) if model_arg in models.BUILTIN else Path(model_arg)
    if isinstance(model, Path) and not model.is_file():
        raise PipelineError(f"model {model_arg!r} is neither a built-in ({', '.join(models.BUILTIN)}) nor a file")
    probe = OrtSession(model, HostDevice())
    given = {name: (shape, dtype) for name, shape, dtype in inputs}
    unknown = sorted(set(given) - set(probe.input_names))
    if unknown:
        raise PipelineError(f"--input names {unknown} are not inputs of the model: {probe.input_names}")
    rng = np.random.default_rng(0)
    shapes = {}
    for spec in probe.inputs:
        shape, dtype = given.get(spec.name, (None, None))
        dims = (
            [batch_size, *shape]
            if shape is not None
            else [batch_size if axis == 0 and not isinstance(d, int) else d for axis, d in enumerate(spec.shape)]
        )
        if len(dims) != spec.rank or not all(isinstance(d, int) for d in dims):
            raise PipelineError(
                f"input {spec.name!r} is {spec.describe_shape()}: give its shape without the batch dim, "
                f"e.g. --input {spec.name}:{'x'.join('224' for _ in range(spec.rank - 1))}"
            )
        if dtype is not None and np.dtype(dtype) != spec.dtype:
            raise PipelineError(f"--input {spec.name}: the model takes {spec.dtype.name}, not {dtype}")
        shapes[spec.name] = (dims, spec.dtype)
    batches = [{n: _random(rng, d, t) for n, (d, t) in shapes.items()} for _ in range(count)]
    return model, batches


def _random(rng: np.random.Generator, dims: list[int], dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iu":
        return rng.integers(0, 2, dims).astype(dtype)  # 0/1: valid for index-like inputs too
    if dtype.kind == "b":
        return rng.random(dims) < 0.5
    return rng.random(dims).astype(dtype)


def _device_line(device: Device) -> dict[str, Any]:
    info = dict(device.describe())
    info.update(_pcie(device))
    try:
        info["measured_copy_gbps"] = {k: round(v, 2) for k, v in measure_copy_gbps(device, 32 << 20, 2).items()}
    except Exception as exc:  # noqa: BLE001 - a report, not a failure
        info["measured_copy_gbps"] = f"unavailable: {exc}"
    return info


def _pcie(device: Device) -> dict[str, Any]:
    """PCIe generation and width from NVML, where pynvml (nvidia-ml-py) is installed."""
    if device.kind != "cuda":
        return {}
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(device.ort_device[1])
        return {
            "pcie_gen": pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle),
            "pcie_width": pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle),
            "pcie_gen_max": pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle),
        }
    except Exception as exc:  # noqa: BLE001 - optional facts
        return {"pcie": f"unknown ({type(exc).__name__}: {exc}); pip install nvidia-ml-py"}


def _describe(info: dict[str, Any]) -> str:
    parts = [str(info.get("name"))]
    if "pcie_gen" in info:
        parts.append(f"PCIe Gen{info['pcie_gen']} x{info['pcie_width']}")
    copy = info.get("measured_copy_gbps")
    if isinstance(copy, dict):
        parts.append(f"pinned copies h2d {copy['h2d']:.1f} GB/s, d2h {copy['d2h']:.1f} GB/s (measured)")
    return ", ".join(parts)


def cmd_bench(args: argparse.Namespace) -> int:
    device, why = _bench_device(args)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    count = args.batches if args.batches is not None else (None if args.duration else 40)
    model, pool = synthetic_batches(args.model, args.batch_size, min(count or 16, 16), args.input)
    work = Workload(pool, count=count, duration=args.duration, warmup=args.warmup)
    info = _device_line(device)
    print(f"device: {_describe(info)}  [{why}]")
    amount = f"{count} timed batches" if count else f"{args.duration:g} s"
    print(f"model: {args.model}  batch size {args.batch_size}, {amount} per mode, {args.warmup} warm-up")
    progress = Progress(
        "bench",
        total=count * (len(modes) + len(args.depth) - 1) if count else None,
        enabled=False if args.no_progress else None,
    )
    kept: list[Any] = []
    results = run_modes(
        model,
        device,
        work,
        depths=args.depth,
        modes=modes,
        intra_op_threads=args.threads,
        tick=progress.tick,
        keep=lambda pipe: kept.append(pipe.stats),
    )
    progress.close()
    print(format_table(results))
    _write_outputs(args, info, results, kept[-1] if kept else None)
    device.close()
    return 0


def _write_outputs(args: argparse.Namespace, info: dict[str, Any], results: list[ModeResult], stats: Any) -> None:
    if args.json is not None:
        payload = {
            "device": info,
            "model": str(args.model),
            "batch_size": args.batch_size,
            "results": [row.to_dict() for row in results],
        }
        args.json.write_text(json.dumps(payload, indent=2))
        print(f"wrote {args.json}")
    if (args.trace or args.plot) and stats is None:
        raise PipelineError("--trace/--plot need a pipelined mode in --modes")
    if args.trace is not None:
        from .trace import write_chrome_trace

        write_chrome_trace(stats, args.trace, title=f"ortpipe {args.model}")
        print(f"wrote {args.trace} (open in https://ui.perfetto.dev)")
    if args.plot is not None:
        from .trace import plot_timeline

        plot_timeline(stats, args.plot, title=f"{args.model}, depth {max(args.depth)}")
        print(f"wrote {args.plot}")


def cmd_info(args: argparse.Namespace) -> int:
    import onnxruntime as ort

    from . import __version__

    print(f"ortpipe {__version__}")
    print(f"onnxruntime {ort.__version__}: providers {ort.get_available_providers()}")
    try:
        import cupy

        print(f"cupy {cupy.__version__}")
    except ImportError:
        print("cupy: not installed (pip install 'ortpipe[cuda]')")
    reason = cuda_unavailable_reason(0)
    if reason is not None:
        print(f"cuda: not available ({reason})")
        host = HostDevice()
        print(f"device: {_describe(_device_line(host))}")
        return 0
    import cupy

    from .devices import CudaDevice

    print(f"cuda runtime {cupy.cuda.runtime.runtimeGetVersion()}, driver {cupy.cuda.runtime.driverGetVersion()}")
    for index in range(cupy.cuda.runtime.getDeviceCount()):
        device = CudaDevice(index)
        print(f"device: {_describe(_device_line(device))}")
    return 0


def _auto_preprocess(args: argparse.Namespace, model: Any, kind: str) -> Any:
    """--preprocess as given; for frames and images, uint8 NHWC -> float NCHW / 255 by default."""
    from ._preprocess import Preprocess
    from ._session import OrtSession

    if args.preprocess is not None:
        return None if args.preprocess.strip().lower() == "none" else Preprocess.parse(args.preprocess)
    if kind not in ("video", "images"):
        return None
    probe = OrtSession(model, HostDevice())
    spec = (
        probe.inputs[0]
        if args.input_name is None
        else next((s for s in probe.inputs if s.name == args.input_name), probe.inputs[0])
    )
    if spec.dtype.kind == "f" and spec.rank == 4:
        print("preprocess: uint8 frames -> float NCHW, scale 1/255 (on the device); --preprocess to change")
        return Preprocess(input=spec.name, scale=1 / 255, layout="nhwc")
    return None


def _frame_size(args: argparse.Namespace, pipe: Any) -> tuple[int, int] | None:
    """--size, or the model's fixed H and W for frames."""
    if args.size is not None:
        return args.size
    for spec in pipe.source_inputs:
        if spec.rank == 4 and all(isinstance(d, int) for d in spec.shape[1:3]):
            return spec.shape[2], spec.shape[1]  # NHWC: (W, H)
    return None


def cmd_run(args: argparse.Namespace) -> int:
    from ._pipeline import Pipeline, PipelineOptions
    from .jobs import JobSummary, open_sink, open_source, run_job, source_kind
    from .sinks import writable

    kind = source_kind(args.input)
    model: Any = models.get(args.model) if args.model in models.BUILTIN else args.model
    writable(args.output)  # fail before any work
    preprocess = _auto_preprocess(args, model, kind)
    options = PipelineOptions(intra_op_threads=args.threads)
    summary = JobSummary()
    with Pipeline(
        model, device=args.device, depth=args.depth, batch_size=args.batch_size, preprocess=preprocess, options=options
    ) as pipe:
        source = open_source(
            args.input,
            pipe,
            args.batch_size,
            input_name=args.input_name,
            columns=dict(args.input_column),
            id_column=args.id_column,
            size=_frame_size(args, pipe),
            pix_fmt=args.pix_fmt,
        )
        sink = open_sink(args.output, pipe.output_names)
        total = len(source) if hasattr(source, "__len__") else 0  # type: ignore[arg-type]
        progress = Progress(
            "run",
            total=(total + args.batch_size - 1) // args.batch_size if total else None,
            enabled=False if args.no_progress else None,
        )
        print(f"device: {pipe.device.name}; {kind} {str(args.input)!r} -> {str(args.output)!r}")
        with _first_ctrl_c_stops() as stop:
            run_job(pipe, source, sink, progress, summary, stop)
    print(summary)
    if summary.interrupted:
        print(
            f"interrupted after {summary.items} items; {str(args.output)!r} holds them and is readable", file=sys.stderr
        )
        return 130
    return 0


@contextlib.contextmanager
def _first_ctrl_c_stops() -> Iterator[threading.Event]:
    """The first Ctrl-C ends the job gracefully (in-flight batches written, file closed); a second one aborts."""
    stop = threading.Event()

    def on_sigint(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread: no signal handling there
        yield stop
        return
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"bench": cmd_bench, "info": cmd_info, "run": cmd_run}[args.command](args)
    except PipelineError as exc:
        print(f"ortpipe: error: {exc}", file=sys.stderr)
        return 2 if args.command != "run" else 1
    except ValueError as exc:  # bad option values (e.g. --preprocess)
        print(f"ortpipe: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

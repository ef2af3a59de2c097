"""``ortpipe bench``'s options, in groups (inputs; running: devices, batches, modes;
outputs; reports): the parser is built for every command, so this module imports
only what the options name, not the measuring itself (``cli/bench``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import models
from ..bench import DEFAULT_MODES, MODES
from ..bench_check import ATOL, RTOL
from ._args import (
    add_config_option,
    add_ort_options,
    add_output_names_option,
    add_top_k_options,
    batch_sizes,
    choices_of,
    constant_spec,
    copy_threads,
    data_spec,
    depths,
    input_spec,
    nonnegative_float,
    positive,
)

DEFAULT_MODEL = "convnet"
DEFAULT_BATCH_SIZE = 32
#: timed seconds a mode gets in each round, where --batches is not given (figures steady from run to run
#: need time, not a count: 40 batches of a small model are over in milliseconds)
DEFAULT_DURATION_S = 0.5
#: rounds of every mode in turn (issue 26: one pass each, runs minutes apart disagreed on the fastest mode)
DEFAULT_ROUNDS = 3


def add_bench(sub: Any) -> None:
    bench = sub.add_parser("bench", help="throughput of naive, IOBinding and pipelined runs of one model")
    bench.add_argument(
        "model",
        nargs="?",
        default=DEFAULT_MODEL,
        help=f"a built-in model ({', '.join(models.BUILTIN)}) or an .onnx file; default {DEFAULT_MODEL}",
    )
    sub.add_parser(
        "info",
        help="ORT, CuPy and device facts, with measured copy bandwidth",
        description="What this machine offers ortpipe: ONNX Runtime's build and providers, CuPy and the GPUs it "
        "sees, NVDEC, and the copy bandwidth measured between page-locked host memory and each device.",
    )
    _bench_what(bench.add_argument_group("inputs"))
    _bench_how(bench.add_argument_group("running: devices, batches, modes"))
    _bench_outputs(bench.add_argument_group("outputs"))
    _bench_reports(bench.add_argument_group("reports"))


def _bench_what(what: Any) -> None:
    """What is measured: the model's inputs (random, a file's, or a table's)."""
    what.add_argument(
        "--input",
        type=input_spec,
        action="append",
        default=[],
        metavar="NAME:SHAPE[:DTYPE]",
        help="shape (without the batch dim) of an input with free dims; repeatable",
    )
    what.add_argument(
        "--data",
        type=data_spec,
        action="append",
        default=[],
        metavar="[NAME=]PATH",
        help="your own batches instead of random ones: a .npy (one-input model), an .npz of input name -> "
        "array, or NAME=PATH.npy per input; axis 0 is split into batches, up to 16 kept in memory",
    )
    add_constant_option(what)


def _bench_how(how: Any) -> None:
    """How it is run: devices, batches, depths, modes, the emulated link, threads, ORT."""
    how.add_argument(
        "--device",
        default="auto",
        help="auto (default), cpu, cuda, cuda:N; several (cuda:0,cuda:1, cuda:all) add the multi mode over "
        "them all, the other modes running on the first",
    )
    how.add_argument(
        "--instances",
        type=positive(int),
        default=1,
        help="pipelines on each device in the multi mode (2 or more add it: sessions sharing one GPU)",
    )
    how.add_argument(
        "--batch-size",
        type=batch_sizes,
        default=None,
        help=f"rows per batch (default: the model's fixed batch dim, else {DEFAULT_BATCH_SIZE}); several, "
        "e.g. 1,8,32, run every mode at each",
    )
    how.add_argument("--depth", type=depths, default=[1, 2, 3], help="pipeline depths, e.g. 1,2,3 (default 1,2,3)")
    amount = how.add_mutually_exclusive_group()
    amount.add_argument(
        "--batches", type=positive(int), default=None, help="timed batches per mode and round (default: --duration)"
    )
    amount.add_argument(
        "--duration",
        type=positive(float),
        default=None,
        help=f"timed seconds per mode and round (default {DEFAULT_DURATION_S:g})",
    )
    add_config_option(how)
    how.add_argument(
        "--rounds",
        type=positive(int),
        default=DEFAULT_ROUNDS,
        help=f"the modes take turns this many times, A B C A B C ...; each row is its median round, with the "
        f"spread (default {DEFAULT_ROUNDS})",
    )
    how.add_argument(
        "--warmup", type=int, default=3, help="untimed batches per mode, their outputs checked (default 3)"
    )
    how.add_argument(
        "--rtol",
        type=nonnegative_float,
        default=RTOL,
        help=f"each mode's outputs of the warm-up batches must be within atol + rtol * |session.run's| "
        f"(Polygraphy's rule); a mode outside it fails the bench (default {RTOL:g})",
    )
    how.add_argument(
        "--atol", type=nonnegative_float, default=ATOL, help=f"the absolute tolerance of that check (default {ATOL:g})"
    )
    how.add_argument(
        "--modes",
        type=choices_of(MODES, "--modes"),
        default=None,
        help=f"some of {','.join(MODES)} (default: {','.join(DEFAULT_MODES)}, and auto on the CPU backend, "
        "where Pipeline runs the direct path by default and the engine modes do not; caller = the engine with no "
        "stage threads, auto = as Pipeline issues by default, graph = caller with CUDA graphs (CUDA only), "
        "arrays = whole host arrays as run() and a .npy take them, registered in place where the device "
        "gains; multi = several pipelines, see --device and --instances)",
    )
    how.add_argument(
        "--link-gbps",
        type=positive(float),
        default=None,
        help="a GPU's link emulated on the host device, GB/s (default none: without a GPU, the CPU as it is)",
    )
    how.add_argument("--latency-us", type=float, default=10.0, help="emulated link latency per copy")
    how.add_argument("--threads", type=positive(int), default=None, help="ORT intra-op threads")
    how.add_argument(
        "--copy-threads",
        type=copy_threads,
        default="auto",
        help="threads sharing each large host copy in the engine modes (default auto: one per two CPUs, 1-8)",
    )
    add_ort_options(how)


def _bench_outputs(outputs: Any) -> None:
    """Which outputs come back (and a top k taken on the device)."""
    add_output_names_option(outputs)
    add_top_k_options(outputs)


def _bench_reports(reports: Any) -> None:
    """Where the figures go: JSON, traces, timelines, a baseline to compare with."""
    reports.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    reports.add_argument(
        "--trace",
        type=Path,
        default=None,
        help="Chrome trace (Perfetto) of the deepest pipelined (else caller, auto, graph, multi) run, "
        "at the last batch size",
    )
    reports.add_argument(
        "--plot",
        type=Path,
        default=None,
        help="PNG timeline of the deepest pipelined (else caller, auto, graph, multi) run, at the last batch size",
    )
    reports.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="JSON",
        help="a saved --json of an earlier run: each row's items/s and p99 latency against the same row there",
    )
    reports.add_argument(
        "--profile-ops",
        action="store_true",
        help="after the modes, ORT's profiler over the same batches: time by operator (at the last batch size)",
    )
    reports.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_constant_option(parser: Any) -> None:
    parser.add_argument(
        "--constant",
        type=constant_spec,
        action="append",
        default=[],
        metavar="NAME=VALUE[,VALUE]",
        help="the value of an input that is not batched (a threshold, a scale), fed to every run; repeatable",
    )

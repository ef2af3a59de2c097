"""``ortpipe tune``'s arguments (NOTE [ tuning ]): built with every command's parser, so this
module imports only the parsing helpers."""

from __future__ import annotations

from typing import Any

from ._args import data_spec, input_spec, nonnegative_float, positive
from ._bench_options import add_constant_option


def add_tune(sub: Any) -> None:
    """``ortpipe tune``'s arguments."""
    tune = sub.add_parser("tune", help="the batch size, depth, issuing and threads that win for one model here")
    tune.add_argument("model", help="a built-in model or an .onnx file")
    tune.add_argument("--output", required=True, metavar="T.json", help="where the settings are written")
    tune.add_argument(
        "--data",
        type=data_spec,
        action="append",
        default=[],
        metavar="[NAME=]PATH",
        help="your own inputs (.npy, or .npz of several), rows on axis 0: measured on them (default: random)",
    )
    tune.add_argument(
        "--input",
        type=input_spec,
        action="append",
        default=[],
        metavar="NAME:SHAPE[:DTYPE]",
        help="shape (without the batch dim) of an input with free dims, for random batches; repeatable",
    )
    add_constant_option(tune)
    tune.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N")
    tune.add_argument(
        "--budget", type=positive(float), default=60.0, metavar="SECONDS", help="time the search may take (default 60)"
    )
    tune.add_argument(
        "--memory-gb",
        type=positive(float),
        default=None,
        help="the most memory a candidate's buffers may take (default: half the host memory available)",
    )
    tune.add_argument(
        "--rounds", type=positive(int), default=3, help="each step's candidates take turns this many times (default 3)"
    )
    tune.add_argument("--rtol", type=nonnegative_float, default=1e-5, help="the output check's relative tolerance")
    tune.add_argument("--atol", type=nonnegative_float, default=1e-5, help="the output check's absolute tolerance")

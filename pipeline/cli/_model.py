"""The model a run of ``ortpipe run`` uses, as a local run and a Ray run both need it: its
declared inputs, read once, and the preprocessing frames and images get by default."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Sequence
from typing import Any


def auto_preprocess(args: argparse.Namespace, declared: Callable[[], Sequence[Any]], kind: str) -> Any:
    """--preprocess as given; for frames and images, uint8 NHWC -> float NCHW / 255 by default."""
    from ..session import Preprocess

    if args.preprocess is not None:
        return None if args.preprocess.strip().lower() == "none" else Preprocess.parse(args.preprocess)
    if kind not in ("video", "videos", "images"):
        return None
    constant = {name for name, _ in args.constant}
    inputs = [s for s in declared() if s.name not in constant]
    if not inputs:
        return None
    spec = next((s for s in inputs if s.name == args.input_name), inputs[0])
    if spec.dtype.kind == "f" and spec.rank == 4:
        print("preprocess: uint8 frames -> float NCHW, scale 1/255 (on the device); --preprocess to change")
        return Preprocess(input=spec.name, scale=1 / 255, layout="nhwc")
    return None


def declared_inputs_of(model: Any) -> Callable[[], Sequence[Any]]:
    """The model file's declared inputs, read (without a session) the first time they are asked for, once."""
    from ..session import declared_inputs

    return functools.cache(lambda: declared_inputs(model))

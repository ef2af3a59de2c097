"""Every benchmark checks its outputs (issue 38, item 3), as Polygraphy's ``run --onnxrt`` does.

Each mode's outputs of the workload's warm-up batches are compared with ``session.run``'s on
the same batches and device (the ``naive`` mode's, or a session of its own where ``naive``
did not run): the largest absolute and relative difference of every output, and whether
every value is within ``atol + rtol * |reference|`` (numpy's ``isclose``; Polygraphy's
defaults, 1e-5 each).  Strings and integers must be equal, shapes the same.  A mode whose
outputs differ fails the benchmark, naming it, the output and the batch.  A workload of
arrays already in a device's memory (NOTE [ device arrays ]; the GPU suite's) is not checked:
``session.run`` takes host arrays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

RTOL = ATOL = 1e-5

Outputs = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class OutputCheck:
    """How far a mode's outputs are from ``session.run``'s; ``mismatch`` says the first that is too far."""

    max_abs_diff: float
    max_rel_diff: float
    rtol: float = RTOL
    atol: float = ATOL
    mismatch: str | None = None

    @property
    def ok(self) -> bool:
        return self.mismatch is None

    def to_dict(self) -> dict[str, Any]:
        """The JSON's ``check`` (docs/measuring.md)."""
        return {
            "max_abs_diff": self.max_abs_diff,
            "max_rel_diff": self.max_rel_diff,
            "rtol": self.rtol,
            "atol": self.atol,
            "ok": self.ok,
            "mismatch": self.mismatch,
        }


def compare_outputs(
    got: Sequence[Outputs], want: Sequence[Outputs], rtol: float = RTOL, atol: float = ATOL
) -> OutputCheck:
    """``got`` (a mode's outputs, a batch each) against ``want`` (``session.run``'s)."""
    worst_abs = worst_rel = 0.0
    mismatch = None
    if len(got) != len(want):
        mismatch = f"{len(got)} batches of outputs against session.run's {len(want)}"
    for index, (ours, theirs) in enumerate(zip(got, want, strict=False)):
        for name, expected in theirs.items():
            value = ours.get(name)
            abs_diff, rel_diff, why = _compared(value, np.asarray(expected), rtol, atol)
            worst_abs, worst_rel = max(worst_abs, abs_diff), max(worst_rel, rel_diff)
            if why is not None and mismatch is None:
                mismatch = f"output {name!r} of batch {index}: {why}"
    return OutputCheck(worst_abs, worst_rel, rtol, atol, mismatch)


def compare_runs(
    got: Sequence[Outputs], want: Sequence[Outputs], rtol: float = RTOL, atol: float = ATOL
) -> OutputCheck:
    """:func:`compare_outputs` where ``got`` holds ``want``'s batches once for each pipeline
    that ran them (a multi row: each pipeline warms up on the same batches)."""
    copies = max(1, len(got) // max(1, len(want)))
    return compare_outputs(got, list(want) * copies, rtol, atol)


def _compared(value: Any, expected: np.ndarray, rtol: float, atol: float) -> tuple[float, float, str | None]:
    """The largest absolute and relative difference, and why it is a mismatch (None: it is not)."""
    if value is None:
        return 0.0, 0.0, "missing"
    got = np.asarray(value)
    if got.shape != expected.shape:
        return 0.0, 0.0, f"shape {list(got.shape)} against {list(expected.shape)}"
    if expected.dtype.kind not in "fc" or got.dtype.kind not in "fc":  # strings, integers, bools: equal
        equal = bool(np.array_equal(got, expected))
        return 0.0, 0.0, None if equal else "values differ (they must be equal)"
    if got.size == 0:
        return 0.0, 0.0, None
    a, b = got.astype(np.float64), expected.astype(np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    diff = np.where(both_nan, 0.0, np.abs(a - b))
    scale = np.abs(b)
    rel = np.divide(diff, scale, out=np.where(diff > 0, np.inf, 0.0), where=scale > 0)
    close = np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    abs_diff = float(np.nanmax(diff)) if diff.size else 0.0
    rel_diff = float(np.nanmax(rel)) if rel.size else 0.0
    if bool(close.all()):
        return abs_diff, rel_diff, None
    return (
        abs_diff,
        rel_diff,
        f"max abs diff {abs_diff:.3g}, max rel diff {rel_diff:.3g} (rtol {rtol:g}, atol {atol:g})",
    )


def worst(checks: Sequence[OutputCheck | None]) -> OutputCheck | None:
    """One check for several (every row of a benchmark): the largest differences, the first mismatch."""
    made = [check for check in checks if check is not None]
    if not made:
        return None
    mismatch = next((check.mismatch for check in made if check.mismatch is not None), None)
    return OutputCheck(
        max(check.max_abs_diff for check in made),
        max(check.max_rel_diff for check in made),
        made[0].rtol,
        made[0].atol,
        mismatch,
    )

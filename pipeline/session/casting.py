"""Which casts of an input the pipeline makes, and the check that they change no integer.

NOTE [ input dtypes ] (in ``layout``) casts an input of another dtype where
numpy's ``same_kind`` allows: within its kind (float64 to float32, int64 to
int32) and from integers or bools to floats.  Within the kind a cast rounds
or wraps as the model's own dtype would have stored the value.  Integers to
floats are another matter: float32 holds every integer only up to 2**24
(float64: 2**53), so an id or a count beyond it would reach the model as
another number, silently.  Such a cast is made only where every value of the
batch is exact in the float, and refused otherwise, naming the value.
"""

from __future__ import annotations

import numpy as np


def castable(source: np.dtype, target: np.dtype) -> bool:
    """Whether an input of dtype ``source`` is cast to the model's ``target`` (NOTE [ input dtypes ])."""
    return bool(np.can_cast(source, target, casting="same_kind"))


def inexact_integer(values: np.ndarray, target: np.dtype) -> int | None:
    """An integer of ``values`` that the float dtype ``target`` cannot hold exactly, None where
    every one fits (or the cast is not from integers to floats)."""
    if values.dtype.kind not in "iu" or np.dtype(target).kind != "f" or not values.size:
        return None
    exact = 2 ** (np.finfo(target).nmant + 1)
    low, high = int(values.min()), int(values.max())
    if high > exact:
        return high
    return low if low < -exact else None


def exact_cast_refusal(values: np.ndarray, target: np.dtype) -> str | None:
    """Why ``values`` cannot be cast to ``target`` without changing one, None where they can."""
    value = inexact_integer(values, target)
    if value is None:
        return None
    target = np.dtype(target)
    return (
        f"{values.dtype.name} value {value:,} is not exact as {target.name} (which holds integers up to "
        f"2**{np.finfo(target).nmant + 1}): the model would get {float(np.asarray(value).astype(target)):.0f}"
    )

"""Which casts of an input the pipeline makes, and the check that they change no integer.

NOTE [ input dtypes ] (in ``layout``) casts an input of another dtype where
numpy's ``same_kind`` allows: within its kind (float64 to float32, int64 to
int32) and from integers or bools to floats.  Within the kind a cast rounds
or wraps as the model's own dtype would have stored the value.  Integers to
floats are another matter: float32 holds every integer only up to 2**24
(float64: 2**53), so an id or a count beyond it would reach the model as
another number, silently.  Such a cast is made only where every value of the
batch is exact in the float, and refused otherwise, naming the value.  A
float that overflows a narrower float (a float64 past float32's 3.4e38) would
reach the model as infinity: refused the same way.  :func:`refused_at` gives the
place of the first value refused, for a table to name its column and row.
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


def overflowing_float(values: np.ndarray, target: np.dtype) -> float | None:
    """A finite float of ``values`` past the largest of the narrower float dtype ``target``
    (it would become infinity), None where none is."""
    target = np.dtype(target)
    if values.dtype.kind != "f" or target.kind != "f" or target.itemsize >= values.dtype.itemsize or not values.size:
        return None
    largest = np.finfo(target).max
    with np.errstate(invalid="ignore"):
        past = np.isfinite(values) & (np.abs(values) > largest)  # infinity stays itself
    return float(values[past].flat[0]) if past.any() else None


def _refused_value(values: np.ndarray, target: np.dtype) -> int | float | None:
    """The value of ``values`` that a cast to ``target`` would change (an integer past the float's
    exact ones, a float past the narrower float's largest), None where none would change."""
    value = inexact_integer(values, target)
    return value if value is not None else overflowing_float(values, target)


def exact_cast_refusal(values: np.ndarray, target: np.dtype) -> str | None:
    """Why ``values`` cannot be cast to ``target`` without changing one, None where they can."""
    target = np.dtype(target)
    value = _refused_value(values, target)
    if value is None:
        return None
    if values.dtype.kind in "iu":
        return (
            f"{values.dtype.name} value {value:,} is not exact as {target.name} (which holds integers up to "
            f"2**{np.finfo(target).nmant + 1}): the model would get {float(np.asarray(value).astype(target)):.0f}"
        )
    return (
        f"{values.dtype.name} value {value:g} overflows {target.name} (at most {np.finfo(target).max:g}): "
        "the model would get infinity"
    )


def refused_at(values: np.ndarray, target: np.dtype) -> tuple[int, ...] | None:
    """The index of the value :func:`exact_cast_refusal` names, its first place in row order: the
    cell a table's message names beside that value."""
    value = _refused_value(values, np.dtype(target))
    if value is None:
        return None
    return tuple(int(i) for i in np.argwhere(values == value)[0])

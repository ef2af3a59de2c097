"""Whether padding a short batch would change its real rows' results.

NOTE [ rows that interact ]: a model that fixes its batch dim, or runs with
static shapes, gets a short batch padded with zero rows to the bound size,
and the padding rows' outputs are cut off.  That is exact only where each
row's outputs depend on that row alone.  A model whose rows interact
(``x - mean(x, axis=0)``, batch statistics, attention across the batch) gives
the real rows other values beside zero rows - silently.  So before the first
padded batch of a shape runs, the session runs that shape twice: one real row
(random floats, ones for integers and bools, ``"a"`` for strings) padded with
zeros, as the engine pads, and the same row padded with copies of itself.
Row 0 of every output with a row each must be the same in both; where it is
not, the run is refused before a result is changed.  An output without a row
each (a reduction over the batch, a detector's hits, a count) is the batch's
as a whole: the padding rows would be in it, whatever they are, so a model with
such an output is refused padding outright, naming the output.

The two paddings give the rows different sums, means and spreads - what batch
statistics read - for two model runs once per padded shape.  Rows that interact
in a way both paddings leave alike (a maximum over the rows that the real row
already holds) would pass unseen: the check is a guard, not a proof.  A model that cannot run
on such made-up rows (it divides by an input, or takes indices) cannot be
checked this way: it is said as a warning, and its batches run padded as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from .specs import Shape, TensorSpec

Runner = Callable[[dict[str, np.ndarray]], Sequence[np.ndarray]]


def real_row(spec: TensorSpec, shape: Shape, rng: np.random.Generator) -> np.ndarray:
    """One made-up row of ``spec`` at ``shape`` (dim 0 is 1)."""
    row_shape = (1, *shape[1:])
    kind = spec.dtype.kind
    if kind == "f":
        return rng.standard_normal(row_shape).astype(spec.dtype)
    if kind == "O":
        return np.full(row_shape, "a", dtype=object)
    return np.ones(row_shape, spec.dtype)


def padded_two_ways(row: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """``row`` padded to ``bound`` rows with zeros (as the engine pads), and with copies of itself."""
    zeros = np.full((bound - 1, *row.shape[1:]), "", dtype=object) if row.dtype.kind == "O" else None
    if zeros is None:
        zeros = np.zeros((bound - 1, *row.shape[1:]), row.dtype)
    return np.concatenate([row, zeros]), np.repeat(row, bound, axis=0)


def changed_by_padding(
    run: Runner,
    inputs: Sequence[TensorSpec],
    shapes: Mapping[str, Shape],
    output_names: Sequence[str],
) -> list[str]:
    """What padding would change, an output a line: those without a row each, and those with one
    whose real row differs between the two paddings of one made-up row; [] where nothing.

    ``run`` takes the batched inputs' feeds (constants are the runner's to add) and may
    raise: a model that cannot run on made-up rows is the caller's to say."""
    rng = np.random.default_rng(0)
    bound = next(iter(shapes.values()))[0]
    zero_padded, self_padded = {}, {}
    for spec in inputs:
        row = real_row(spec, shapes[spec.name], rng)
        zero_padded[spec.name], self_padded[spec.name] = padded_two_ways(row, bound)
    first, second = run(zero_padded), run(self_padded)
    changed = []
    for name, a, b in zip(output_names, first, second, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        if not (a.ndim and b.ndim and a.shape[0] == b.shape[0] == bound):
            changed.append(f"{name!r} has no row each ({list(a.shape)} for {bound} rows): the padding rows are in it")
        elif not _same(a[:1], b[:1]):
            changed.append(f"{name!r} of a row changes with the other rows of its batch: the rows interact")
    return changed


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal, floats within their arithmetic's noise (a reduction split otherwise by a
    thread pool); rows that interact change a value far more than that."""
    if a.dtype.kind in "fc":
        return bool(np.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True))
    return bool(np.array_equal(a, b))

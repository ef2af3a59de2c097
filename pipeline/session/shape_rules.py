"""Output shapes for new input shapes, foretold from the probes already run.

NOTE [ shapes foretold ]: an output's shape is found by running the model on zeros of
each new input shape (a probe, ``OrtSession.output_layout``): real models' output dims
need not follow their input dims by name.  A run of ever-new shapes - a text's token
batches, rows x padded length, new almost every batch - paid a probe each, a second
run of the model for every batch.  So once two probes have run, each output dim is
matched against them: a dim equal in every probe to one input dim that has taken two
values there follows that input dim; a dim that kept one value while every input dim
it might follow kept its value too is a constant.  Where every dim of every output is
foretold so, the layout is taken without a run; where any is not (a dim that follows
none, an input dim that never varied before and varies now), the model is probed as
before, and the probe joins those the rules are read from.

A foretold shape is what a probe would have said of a model whose dims follow its
inputs; an output whose shape depends on the data (a detector's hits) is found by the
real run's shape differing from it, as it was from a probe's
(NOTE [ data-dependent outputs ]).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .specs import Shape

#: one probe: the input shapes it ran at, and each output's dtype and shape
Probe = tuple[Mapping[str, Shape], Mapping[str, tuple[np.dtype, Shape]]]
#: an input dim: the input's name and the axis
InputDim = tuple[str, int]


def foretold(probes: Sequence[Probe], shapes: Mapping[str, Shape]) -> dict[str, tuple[np.dtype, Shape]] | None:
    """Each output's dtype and shape at input ``shapes``, foretold from ``probes``; None where
    any dim cannot be (fewer than two probes, or a dim no rule of them fixes)."""
    if len(probes) < 2 or any(set(inputs) != set(shapes) for inputs, _ in probes):
        return None
    if any(len(inputs[name]) != len(shape) for inputs, _ in probes for name, shape in shapes.items()):
        return None
    first_outputs = probes[0][1]
    layout = {}
    for name, (dtype, shape) in first_outputs.items():
        dims = []
        for axis in range(len(shape)):
            dim = _dim(probes, shapes, name, axis)
            if dim is None:
                return None
            dims.append(dim)
        layout[name] = (dtype, tuple(dims))
    return layout


def _dim(probes: Sequence[Probe], shapes: Mapping[str, Shape], output: str, axis: int) -> int | None:
    """Output ``output``'s dim ``axis`` at ``shapes``: the input dim it follows, or its constant."""
    values = []
    for _, outputs in probes:
        _, shape = outputs[output]
        if len(shape) <= axis:
            return None
        values.append(shape[axis])
    followed = [
        dim
        for dim in _input_dims(shapes)
        if all(inputs[dim[0]][dim[1]] == v for (inputs, _), v in zip(probes, values, strict=True))
    ]
    varied = [dim for dim in followed if len({inputs[dim[0]][dim[1]] for inputs, _ in probes}) > 1]
    if varied:
        now = {shapes[name][index] for name, index in varied}
        return int(now.pop()) if len(now) == 1 else None
    if len(set(values)) != 1:
        return None
    # a constant, unless it may follow an input dim that never varied and varies now
    if any(shapes[name][index] != probes[0][0][name][index] for name, index in followed):
        return None
    return int(values[0])


def _input_dims(shapes: Mapping[str, Shape]) -> list[InputDim]:
    return [(name, axis) for name, shape in shapes.items() for axis in range(len(shape))]

"""A classifier's probabilities written a class a column.

NOTE [ class columns ]: a classifier exported with its converter's defaults
has a probabilities output of ``[N, classes]`` (its ZipMap made a tensor:
NOTE [ ZipMap ] in ``session``), and the session knows each column's class.
Tables get one column a class, named after the output and the class
(``output_probability_0``, ``output_probability_setosa``), as a user of
scikit-learn's ``predict_proba`` with its ``classes_`` would make them;
``.npy`` keeps the ``[N, classes]`` array, its columns in the order of
``Pipeline.class_labels``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..util.errors import SinkError
from ._handing_on import HandingOn


def class_column_names(output: str, classes: Sequence[int | str]) -> list[str]:
    """The columns of ``output``'s probabilities, one a class."""
    return [f"{output}_{label}" for label in classes]


def class_columns(
    outputs: Mapping[str, np.ndarray], labels: Mapping[str, Sequence[int | str]]
) -> dict[str, np.ndarray]:
    """``outputs`` with each output that ``labels`` names split into a column a class."""
    split: dict[str, np.ndarray] = {}
    for name, values in outputs.items():
        classes = labels.get(name)
        if classes is None:
            split[name] = values
            continue
        if values.ndim != 2 or values.shape[1] != len(classes):
            raise SinkError(
                f"output {name!r} has shape {list(values.shape)}, expected [rows, {len(classes)}]: a column for each "
                f"of its classes {list(classes)}"
            )
        for column, values_of_class in zip(class_column_names(name, classes), values.T, strict=True):
            split[column] = values_of_class
    return split


class ClassColumnsSink(HandingOn):
    """Writes into ``sink`` each probabilities output that ``labels`` names a class a column
    (NOTE [ class columns ]); everything else is ``sink``'s."""

    def __init__(self, sink: object, labels: Mapping[str, Sequence[int | str]]) -> None:
        super().__init__(sink)
        self.labels = dict(labels)

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        self._sink.write(index, rows, class_columns(outputs, self.labels), meta)

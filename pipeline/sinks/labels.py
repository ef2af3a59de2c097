"""Sinks that hand rows on: to your function, or with class names added."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..util.errors import SinkError
from ._handing_on import HandingOn


class CallbackSink:
    """Calls ``fn(index, outputs, meta)`` per batch; the arrays are copies you may keep."""

    def __init__(self, fn: Callable[[int, dict[str, np.ndarray], dict[str, np.ndarray]], None]) -> None:
        self.fn = fn

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        self.fn(index, {name: values.copy() for name, values in outputs.items()}, meta)

    def close(self) -> None:
        pass


class LabelledSink(HandingOn):
    """Writes into ``sink`` each batch's class indices (``index_output``: the
    ``..._index`` output of ``--top-k``, :func:`pipeline.heads.with_top_k`) and
    beside them their names, ``labels[index]``, as ``label_output`` (default:
    ``..._label`` in place of ``..._index``): a table says ``tabby cat``, not
    281.  Everything else is ``sink``'s (resuming, completion, closing)."""

    def __init__(self, sink: Any, index_output: str, labels: Sequence[str], label_output: str | None = None) -> None:
        if not labels:
            raise SinkError("labels: none given, one name a class is needed")
        super().__init__(sink)
        self.index_output = index_output
        self.label_output = label_output or f"{index_output.removesuffix('_index')}_label"
        self.labels = np.asarray([str(label) for label in labels])

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        classes = outputs.get(self.index_output)
        if classes is None:
            written = sorted(outputs)
            raise SinkError(f"labels name the classes of {self.index_output!r}, not an output written: {written}")
        unnamed = classes[(classes < 0) | (classes >= len(self.labels))]
        if unnamed.size:
            raise SinkError(
                f"batch {index}: class {int(unnamed[0])} of {self.index_output!r} has no label: "
                f"{len(self.labels)} labels are given, for classes 0 to {len(self.labels) - 1}"
            )
        self._sink.write(index, rows, {**outputs, self.label_output: self.labels[classes]}, meta)


def read_labels(path: str | Path) -> list[str]:
    """A labels file: text, one class name a line, the first line naming class 0 (the
    last line's newline optional; a line of its own may not be empty); or JSON
    (``.json``): a list of names, or an object of class numbers ``"0"``.. ``"N-1"``,
    where a name may come as ``[id, name]`` (ImageNet's ``imagenet_class_index.json``)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SinkError(f"labels {str(path)!r} cannot be read as text: {exc}") from exc
    if path.suffix.lower() == ".json":
        return _json_labels(path, text)
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    empty = [number for number, line in enumerate(lines) if not line.strip()]
    if not lines or empty:
        where = f"line {empty[0] + 1} is empty" if empty else "it is empty"
        raise SinkError(f"labels {str(path)!r}: one class name a line, line N naming class N-1; {where}")
    return [line.strip() for line in lines]


def _json_labels(path: Path, text: str) -> list[str]:
    """The class names of a JSON labels file (:func:`read_labels`)."""
    expected = 'a list of names, or {"0": name, "1": name, ...}, a name or [id, name] each'
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SinkError(f"labels {str(path)!r} is not JSON: {exc}") from exc
    if isinstance(value, dict):
        numbers = sorted(value, key=lambda key: int(key) if str(key).isdigit() else -1)
        if numbers != [str(number) for number in range(len(value))]:
            raise SinkError(f"labels {str(path)!r}: its keys are to be the classes 0 to {len(value) - 1}; {expected}")
        value = [value[number] for number in numbers]
    names = [item[-1] if isinstance(item, list) and item else item for item in value] if isinstance(value, list) else []
    if not names or not all(isinstance(name, str) and name.strip() for name in names):
        raise SinkError(f"labels {str(path)!r}: expected {expected}")
    return [name.strip() for name in names]

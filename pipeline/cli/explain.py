"""``ortpipe run ... --explain``: the table's plan (NOTE [ the table plan ]) and the columns
the output would have, from the schema and the first rows only; nothing is written.

The output's columns are not described from rules of their own: the first few rows
are run and written, by the sink the run would use, into a scratch file of the same
format, and its columns are read back.  So what ``--explain`` says is what the run
writes, class columns and ``output_`` prefixes included.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..jobs import sink_kind
from ..util.capabilities import table_plan

#: rows run to learn the outputs' columns
_ROWS = 4
#: the scratch file's suffix by the output's kind (``jobs.sink_kind``): a Parquet data set's, a stored
#: output's and a Parquet file's as Parquet
_SUFFIXES = {"csv": ".csv", "jsonl": ".jsonl"}


def explain(source: Any, pipe: Any, output: str, output_format: str, make_sink: Callable[[Path], Any]) -> list[str]:
    """The plan's lines and the output's columns, from the first rows of ``source``
    run through ``pipe`` and written by ``make_sink(path)`` into a scratch file."""
    plan = table_plan(source)
    lines = [f"plan: {line}" for line in plan.lines()] if plan is not None else []
    first = next(iter(source), None)
    if first is None:
        return [*lines, "output: the input has no rows"]
    rows = min(_ROWS, len(next(iter(first.inputs.values()))))
    inputs = {name: values[:rows] for name, values in first.inputs.items()}
    meta = {name: values[:rows] for name, values in first.meta.items()}
    outputs = pipe.run(inputs)
    kind = sink_kind(output, output_format)
    if kind == "npy":  # arrays of the outputs alone, a file each
        return [*lines, *(f"output: {name}: {v.dtype} {list(v.shape[1:])} a row" for name, v in outputs.items())]
    with tempfile.TemporaryDirectory(prefix="ortpipe-explain-") as folder:
        scratch = Path(folder) / f"explain{_SUFFIXES.get(kind.split()[0], '.parquet')}"
        sink = make_sink(scratch)
        try:
            sink.write(0, rows, outputs, meta)
            complete = getattr(sink, "mark_complete", None)
            if complete is not None:
                complete()
        finally:
            sink.close()
        schema = _written_schema(scratch)
    if kind.endswith(" table"):  # a Delta or Iceberg table: written as a Parquet file here, in the types it has
        from ..sinks import portable_schema

        schema = portable_schema(schema)
    return [*lines, *(f"output: {field.name}: {field.type}" for field in schema)]


def _written_schema(path: Path) -> Any:
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson
    import pyarrow.parquet as pq

    if path.suffix == ".csv":
        return pcsv.read_csv(path).schema
    if path.suffix == ".jsonl":
        return pjson.read_json(path).schema
    return pq.read_schema(path)

"""Which sink each kind of output gets: a registry from the kind (``jobs.sink_kind``) to the
function that makes its sink, each taking the same :class:`SinkRequest`.

``open_sink`` decides where a sink goes (a file, a replacement beside it, object storage, a
table's commits) and what wraps it (class columns, the job's record); this module only says
which sink a kind is written by, so that a new kind of output is one function and one entry.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..sinks import (
    JOURNAL_PART_SECONDS,
    CsvSink,
    CsvStreamSink,
    JobRecord,
    JsonLinesSink,
    JsonLinesStreamSink,
    NpySink,
    ParquetDatasetSink,
    ParquetSink,
    SinkError,
)
from ..sinks.delta import DeltaSink
from ..sinks.iceberg import IcebergSink
from .summary import Sink


@dataclass(frozen=True)
class SinkRequest:
    """What every kind's sink is made from (``open_sink``'s arguments, once)."""

    #: the outputs written, and those written per batch (known once the first batch is)
    output_names: list[str]
    data_dependent: Callable[[], frozenset[str]]
    part_rows: int | None = None
    part_seconds: float | None = None
    compression: str = "snappy"
    #: where a stream is written (None: standard output's bytes)
    stream: BinaryIO | None = None
    #: the job that writes it (NOTE [ who wrote it ] in sinks); a table's commits carry its id
    record: JobRecord | None = None
    #: an Iceberg output's catalog (``util.iceberg``)
    catalog: str = "default"


#: a kind's sink at ``at``, resumed or overwritten as asked
Factory = Callable[[str | Path, bool, bool, SinkRequest], Sink]


def table_job(record: JobRecord | None) -> tuple[str, int | None]:
    """The id a table output's commits carry for the job of ``record``
    (NOTE [ parts committed to a Delta table ]), made from what makes its rows but the version
    of a Delta or Iceberg input, which its commits carry beside it (a resume reads the version
    its parts were made from); and that version."""
    if record is None:
        raise SinkError("a table output's commits carry the job's id: open_sink needs the job's record= for it")
    options = {name: value for name, value in record.options.items() if name != "input_version"}
    read = record.options.get("input_version")
    identity = json.dumps(
        {"input": record.input, "model": record.model, "options": options}, sort_keys=True, default=str
    )
    return "ortpipe-" + hashlib.sha256(identity.encode()).hexdigest()[:20], read


def _npy(at: str | Path, resume: bool, overwrite: bool, r: SinkRequest) -> Sink:
    return NpySink(at, r.output_names, r.data_dependent, resume)


def _parquet_file(at: str | Path, resume: bool, overwrite: bool, r: SinkRequest) -> Sink:
    seconds = JOURNAL_PART_SECONDS if r.part_seconds is None else r.part_seconds
    return ParquetSink(at, data_dependent=r.data_dependent, resume=resume, compression=r.compression,
                       part_rows=r.part_rows, part_seconds=seconds)  # fmt: skip


def _data_set(at: str | Path, resume: bool, overwrite: bool, r: SinkRequest) -> Sink:
    return ParquetDatasetSink(at, data_dependent=r.data_dependent, resume=resume, part_rows=r.part_rows,
                              compression=r.compression, overwrite=overwrite, part_seconds=r.part_seconds)  # fmt: skip


def _csv(at: str | Path, resume: bool, overwrite: bool, r: SinkRequest) -> Sink:
    return CsvSink(at, r.data_dependent, resume)


def _jsonl(at: str | Path, resume: bool, overwrite: bool, r: SinkRequest) -> Sink:
    return JsonLinesSink(at, r.data_dependent, resume)


def _csv_stream(at: str | Path, resume: bool, overwrite: bool, r: SinkRequest) -> Sink:
    return CsvStreamSink(r.stream, r.data_dependent)


def _jsonl_stream(at: str | Path, resume: bool, overwrite: bool, r: SinkRequest) -> Sink:
    return JsonLinesStreamSink(r.stream, r.data_dependent)


def _delta(at: str | Path, resume: bool, overwrite: bool, r: SinkRequest) -> Sink:
    app_id, read = table_job(r.record)
    return DeltaSink(at, app_id, resume=resume, part_rows=r.part_rows, compression=r.compression,
                     overwrite=overwrite, part_seconds=r.part_seconds, input_version=read)  # fmt: skip


def _iceberg(at: str | Path, resume: bool, overwrite: bool, r: SinkRequest) -> Sink:
    app_id, read = table_job(r.record)
    return IcebergSink(str(at), app_id, r.catalog, resume=resume, part_rows=r.part_rows, overwrite=overwrite,
                       part_seconds=r.part_seconds, input_version=read)  # fmt: skip


#: each kind of output (``jobs.sink_kind``) and what makes its sink
SINKS: dict[str, Factory] = {
    "npy": _npy,
    "parquet": _parquet_file,
    "parquet data set": _data_set,
    "csv": _csv,
    "jsonl": _jsonl,
    "csv stream": _csv_stream,
    "jsonl stream": _jsonl_stream,
    "delta table": _delta,
    "iceberg table": _iceberg,
}

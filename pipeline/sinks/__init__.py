"""Sinks: where a run's outputs go, written as results arrive.

A sink's ``write(index, rows, outputs, meta)`` is called by the consumer with
views of the pinned output slot (valid during the call), so writing overlaps
inference: the engine keeps copying and running the next batches meanwhile,
and no extra copy is made before the write.  ``close()`` always runs - also
after an error or Ctrl-C - and leaves a readable file with every row written
so far; a sink that wrote nothing (an empty input, a run that failed first)
leaves no file rather than an empty, unreadable one.

* :class:`NpySink` - one ``.npy`` per output, streamed (the header's row count
  is rewritten on close);
* :class:`ParquetSink` - one table: the metadata columns (row id, or frame
  index and timestamp, or path) next to one column per output, written as
  parts in a journal beside the file until it is closed, so a killed run
  keeps every part it closed;
* :class:`ParquetDatasetSink` - the same table as a folder of Parquet files
  (a data set, as Spark writes one), each part renamed into place when
  closed, so a killed run loses only the part it was writing, and a
  ``_SUCCESS`` file once the job ran to its end;
* :class:`CsvSink` - the same as CSV, an output of several values a row
  spread over one column per value;
* :class:`CsvStreamSink` - the same CSV written to a stream as it comes
  (``ortpipe run --output -``: standard output, for whatever reads the pipe);
* :class:`JsonLinesSink` - JSON Lines, an object a row, an output of several
  values a row as a list; :class:`JsonLinesStreamSink` the same to a stream;
* :class:`CallbackSink` - your function;
* :class:`InputOrderSink` - rows run out of order handed to another sink in input order.

NOTE [ resuming ]: a long job that stopped - Ctrl-C, a scheduler's SIGTERM,
or killed outright - goes on where it ended: its sink, opened with
``resume=True``, keeps the whole rows the earlier run left in its file(s)
(``kept_rows``), cutting off a partial row a kill left behind, and the job
leaves out as many rows of its source (``jobs.resumed``: unread where the
format allows) and appends the rest, so the file ends as one uninterrupted
run would have left it. Rows are counted, so the input must be the same, in
the same order; where the output keeps metadata (a table: ids, file and row,
path), ``jobs.resumed`` holds the input's row before the first new one
against the output's last row and refuses an input that differs there (a
source whose rows need not be its places - a folder of images that skips
files, a folder of videos - says where to go on from the last row, or from
``kept_columns``: NOTE [ frame positions ]). What
each format keeps of a run that was killed: a ``.npy`` every whole row
(found from the file's size: the header says 0 until the file is closed); a
CSV every whole line; a Parquet data set every part it had closed, and a
Parquet file the same, since it is written as a data set in a journal
beside it until it is closed (NOTE [ journaled Parquet ]); a resumed file
that was closed becomes its journal's part 0. Outputs written per
batch (a detector's boxes) are resumed in Parquet: each batch writes them
before its main table row, and a data set closes their parts with the main
table's, at the same batch, theirs first - so after a kill they are never
behind it, and the parts they have beyond it are dropped; this run's batches
are numbered after the last one the main table holds, so the tables join as
one run's would. ``.npy`` and CSV do not keep them in step with the rows:
such a run is refused at its first write.
"""

from __future__ import annotations

from ..util.errors import SinkError
from ._base import (
    DataDependent,
    OutputKinds,
    Several,
    check_items,
    check_rows,
    file_part,
    portable_schema,
    writable,
    writable_folder,
)
from ._parts import (
    DEFAULT_PART_BYTES,
    PARQUET_CODECS,
    SUCCESS,
    clear_data_set,
    durable,
    parquet_codec,
    parquet_rows,
    parquet_writer,
    refuse_other_files,
    refuse_used_folder,
    whole_parts,
)
from .classes import ClassColumnsSink, class_column_names, class_columns
from .csv import CsvSink, CsvStreamSink
from .journal import JOURNAL_PART_BYTES, JOURNAL_PART_SECONDS, finish_moving_merged, journal_of, remove_journal
from .jsonl import JsonLinesSink, JsonLinesStreamSink
from .labels import CallbackSink, LabelledSink, read_labels
from .npy import NpySink, read_npy_header_rows
from .ordered import InputOrderSink
from .parquet import ParquetDatasetSink, ParquetSink
from .replacing import (
    ReplacingSink,
    finish_replacing,
    move_replacement_up,
    replacement_of,
    replacement_under_way,
    staging_folder,
)
from .written_by import (
    JobRecord,
    RecordingSink,
    read_record,
    record_path,
    refuse_other_job,
    refuse_unrecorded,
    write_record,
)

__all__ = [
    "portable_schema",
    "CallbackSink",
    "CsvSink",
    "CsvStreamSink",
    "DEFAULT_PART_BYTES",
    "DataDependent",
    "JOURNAL_PART_BYTES",
    "JOURNAL_PART_SECONDS",
    "JobRecord",
    "JsonLinesSink",
    "JsonLinesStreamSink",
    "LabelledSink",
    "ClassColumnsSink",
    "InputOrderSink",
    "class_column_names",
    "class_columns",
    "NpySink",
    "OutputKinds",
    "PARQUET_CODECS",
    "ParquetDatasetSink",
    "ParquetSink",
    "RecordingSink",
    "ReplacingSink",
    "SUCCESS",
    "Several",
    "SinkError",
    "check_items",
    "check_rows",
    "clear_data_set",
    "durable",
    "file_part",
    "finish_moving_merged",
    "finish_replacing",
    "journal_of",
    "move_replacement_up",
    "parquet_codec",
    "parquet_writer",
    "read_labels",
    "read_npy_header_rows",
    "read_record",
    "record_path",
    "refuse_other_files",
    "refuse_other_job",
    "refuse_unrecorded",
    "refuse_used_folder",
    "remove_journal",
    "replacement_of",
    "replacement_under_way",
    "staging_folder",
    "parquet_rows",
    "whole_parts",
    "writable",
    "writable_folder",
    "write_record",
]

"""The record of the job that wrote an output, kept beside it.

NOTE [ who wrote it ]: rows are counted, not named, so a ``--resume`` that
goes on after the rows of another job's output - an ``--overwrite`` killed
before its replacement held a row, a command rerun with another input - would
keep that job's rows under this one's name and exit 0.  So every output
records the job that writes it, in a hidden file beside it,
``.NAME.ortpipe-job.json``: the input (its path, and a file's size and
a digest of its first and last bytes; a URL without its secrets, NOTE [ secrets said nowhere ]),
the model (its SHA-256), and the options that change rows.
It is written before the first row (:class:`RecordingSink`), atomically, and a
replacement's lies in its staging folder, moved with it
(NOTE [ replaced when whole ]).  A resume whose job does not match refuses, naming both
(:func:`refuse_other_job`).  An output that holds rows but no record (written by
another tool, or by an ortpipe from before records) is never resumed, nor called
finished: ortpipe continues only what it wrote (:func:`refuse_unrecorded`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..util.errors import SinkError
from ..util.redact import redacted
from ..util.storage import StoredPath
from ._handing_on import HandingOn
from ._parts import durable

#: the record's format; a record of another one is not compared, it is refused
RECORD_VERSION = 1


def record_path(output: str | Path | StoredPath) -> Path | StoredPath:
    """The hidden file beside ``output`` (a file or a data set folder; an object beside a
    stored output) that records who wrote it."""
    beside = output if isinstance(output, StoredPath) else Path(output)
    return beside.parent / f".{beside.name}.ortpipe-job.json"


@dataclasses.dataclass(frozen=True)
class JobRecord:
    """Who writes an output: ``input`` (what identifies it), ``model`` (``sha256:...``) and
    ``options`` (those that change rows, by their command-line names)."""

    input: Mapping[str, Any]
    model: str
    options: Mapping[str, Any]

    @classmethod
    def of(cls, input: str | Path, model: Any, options: Mapping[str, Any]) -> JobRecord:
        """The record of a job reading ``input`` (a path or a URL) with ``model`` (a path,
        bytes, or an ONNX ``ModelProto``) and ``options`` (JSON-able once made plain)."""
        return cls(input_identity(input), model_digest(model), {k: _plain(v) for k, v in sorted(options.items())})

    def as_json(self) -> dict[str, Any]:
        return {"version": RECORD_VERSION, **dataclasses.asdict(self)}

    def differences(self, other: JobRecord) -> list[str]:
        """What differs from ``other``, each as ``what: ours / theirs``."""
        said = []
        if self.input != other.input:
            said.append(f"input {_said_input(self.input)} / {_said_input(other.input)}")
        if self.model != other.model:
            said.append(f"model {self.model[:19]} / {other.model[:19]}")
        for name in sorted(set(self.options) | set(other.options)):
            ours, theirs = self.options.get(name), other.options.get(name)
            if ours != theirs:
                said.append(f"{name} {ours!r} / {theirs!r}")
        return said


#: an input file is told from another by the digest of its first and last bytes this long (and its size)
SAMPLED_BYTES = 1 << 20


def input_identity(input: str | Path) -> dict[str, Any]:
    """A file by its absolute path, size and the SHA-256 of its first and last
    :data:`SAMPLED_BYTES` (a file made again alike is the same input, whatever its time;
    a table's footer or header differs where its rows do); a folder by its path (its
    files are checked by the rows' metadata); a URL or a pipe as it is."""
    text = str(input)
    if "://" in text or text == "-":  # a URL without its secrets (NOTE [ secrets said nowhere ])
        return {"path": redacted(text)}
    path = Path(text).absolute()
    if not path.is_file():
        return {"path": str(path)}
    size = path.stat().st_size
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        digest.update(file.read(SAMPLED_BYTES))
        if size > SAMPLED_BYTES:
            file.seek(max(SAMPLED_BYTES, size - SAMPLED_BYTES))
            digest.update(file.read(SAMPLED_BYTES))
    return {"path": str(path), "bytes": size, "sampled": f"sha256:{digest.hexdigest()}"}


def model_digest(model: Any) -> str:
    """``sha256:<hex>`` of a model file's bytes (read in blocks), of bytes, or of a ModelProto's."""
    digest = hashlib.sha256()
    if isinstance(model, (str, Path)):
        with open(model, "rb") as file:
            for block in iter(lambda: file.read(1 << 22), b""):
                digest.update(block)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        digest.update(model)
    else:  # an onnx.ModelProto
        digest.update(model.SerializeToString())
    return f"sha256:{digest.hexdigest()}"


def read_record(output: str | Path | StoredPath) -> JobRecord | None:
    """The record beside ``output``, None where there is none; a SinkError where it cannot be read."""
    path = record_path(output)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
        if data.get("version") != RECORD_VERSION:
            raise ValueError(f"version {data.get('version')!r}, this ortpipe reads {RECORD_VERSION}")
        return JobRecord(data["input"], data["model"], data["options"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SinkError(
            f"{str(path)!r}, the record of the job that wrote {str(output)!r}, cannot be read ({exc}): "
            "--overwrite replaces the output"
        ) from exc


def write_record(output: str | Path | StoredPath, record: JobRecord) -> None:
    """``record`` beside ``output``, whole or not at all (written aside, then renamed; an object is)."""
    path = record_path(output)
    if isinstance(path, StoredPath):
        path.write_text(json.dumps(record.as_json(), indent=1))
        return
    aside = path.with_name(path.name + ".new")
    aside.write_text(json.dumps(record.as_json(), indent=1))
    durable(aside)
    os.replace(aside, path)


def refuse_other_job(
    output: str | Path | StoredPath, record: JobRecord, shown: str | Path | StoredPath | None = None
) -> bool:
    """A SinkError where ``output`` was written by another job than ``record``'s, naming
    both (``shown``: the output as the user named it, where ``output`` is its replacement);
    whether ``output`` has a record at all (for :func:`refuse_unrecorded`)."""
    earlier = read_record(output)
    if earlier is None:
        return False
    differ = record.differences(earlier)
    if differ:
        raise SinkError(
            f"cannot resume: {str(shown or output)!r} was written by another job (this run / that one: "
            f"{'; '.join(differ)}): resume with the same input, model and options, or --overwrite to replace it"
        )
    return True


def refuse_unrecorded(sink: Any, recorded: bool, output: str | Path | StoredPath) -> None:
    """A SinkError, ``sink`` closed, where a resumed ``sink`` kept rows of ``output`` (as the user
    named it) and it has no record of the job that wrote them (``recorded``: what
    :func:`refuse_other_job` found; NOTE [ who wrote it ])."""
    from ..util.capabilities import kept_rows

    if recorded or not kept_rows(sink):
        return
    sink.close()
    raise SinkError(
        f"cannot resume: {str(output)!r} holds rows but no record of the job that wrote them (another tool "
        "wrote it, or an ortpipe from before records): ortpipe continues only what it wrote; --overwrite starts it "
        "again"
    )


class RecordingSink(HandingOn):
    """``sink``, which writes ``output``, with ``record`` written beside it before its first
    row - not at its opening, so that a run refused before it writes leaves the earlier
    output's record as it was.  See NOTE [ who wrote it ]."""

    def __init__(self, sink: Any, output: str | Path | StoredPath, record: JobRecord) -> None:
        super().__init__(sink)
        self.recorded_at = output if isinstance(output, StoredPath) else Path(output)
        self.record = record
        self._written = False

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        if not self._written:
            write_record(self.recorded_at, self.record)
            self._written = True
        super().write(index, rows, outputs, meta)


def _plain(value: Any) -> Any:
    """An option's value as JSON keeps it: paths as text, tuples as lists, mappings sorted."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _said_input(identity: Mapping[str, Any]) -> str:
    said = repr(identity.get("path"))
    if "bytes" in identity:
        said += f" ({identity['bytes']:,} bytes, {str(identity.get('sampled'))[:19]})"
    return said

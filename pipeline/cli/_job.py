"""The record of the job ``ortpipe run`` asks for (NOTE [ who wrote it ] in sinks): its input, its
model and the options that change its rows."""

from __future__ import annotations

import argparse

from .. import models
from ..sinks import JobRecord
from ..util.redact import redacted_options

#: the options of ``ortpipe run`` that change what rows an output holds (NOTE [ who wrote it ] in sinks)
ROW_OPTIONS = (
    "input_name", "input_column", "id_column", "keep", "image_column", "video_column", "constant", "preprocess",
    "size", "pix_fmt", "fit", "every", "fps", "skip_unreadable", "video_format", "video_option", "jpeg_draft",
    "exif_orientation", "shard", "top_k", "softmax", "labels", "output_names", "data_dependent",
    "text_column", "text_pair_column", "tokenizer", "max_length", "pooling", "normalize", "input_version",
    "input_format",
)  # fmt: skip


def job_record(args: argparse.Namespace, engine: str = "local") -> JobRecord:
    """The record of the job ``args`` asks for, kept beside its output: its input, its model, the
    options that change rows, the first row (--rows), and the ``engine`` that writes it."""
    model = args.model
    if model in models.BUILTIN:
        model = models.get(model)
    folder = getattr(args, "text_folder", None)  # a text model's folder: its model file is the model
    if folder is not None:
        model = folder.model
    options = {name: getattr(args, name, None) for name in ROW_OPTIONS}
    given = options.get("video_option")
    if given:  # a header or a password FFmpeg is given (NOTE [ secrets said nowhere ])
        options["video_option"] = sorted(redacted_options(dict(given)).items())
    options["first_row"] = args.rows[0] if getattr(args, "rows", None) else 0
    options["engine"] = engine
    where = f"iceberg://{args.catalog}/{args.input}" if args.input_format == "iceberg" else args.input
    return JobRecord.of(where, model, options)

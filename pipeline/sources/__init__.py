"""Sources: batches from files, without holding the whole input in memory.

One module a kind of input - ``tables`` (arrays and tables), ``videos``,
``images``, ``archives`` - on ``_base`` (what every source is), ``files`` (which
files a folder holds) and ``_opening`` (how a video is opened: a file, a URL, a
pipe; FFmpeg's format and options; the device it is decoded on); every public
name is here.

Each source yields :class:`SourceBatch` items: the arrays the model (or its
preprocessing) takes, and per-row metadata that the sinks write beside the
outputs (a row id, or a frame's index and timestamp, or an image's path).

* :class:`NpySource` - a ``.npy`` array, memory-mapped;
* :class:`ParquetSource` - a Parquet table read in record batches (pyarrow),
  columns mapped to model inputs;
* :class:`ParquetDatasetSource` - a folder of Parquet files (a partitioned
  data set) read as one table, each row's file and row kept;
* :class:`CsvSource` - a CSV file streamed with pyarrow's reader, columns
  mapped the same way;
* :class:`VideoSource` - a video file decoded with PyAV into uint8 HWC frames;
* :class:`VideoFolderSource` - the videos below a folder, frame after frame;
* :class:`ImageFolderSource` - the images below a folder, read with Pillow;
* :class:`ImageTableSource` - the images a table's column of paths lists (or holds);
* :class:`ImageArchiveSource` - the images in tar archives (WebDataset shards);
* :class:`LiveStreamsSource` - several live streams at once, their frames batched as they come;
* :class:`VideoTableSource` - the videos a table lists, frame after frame.

Frames and images are made the model's size stretched, cropped or padded
(:class:`Fit`, NOTE [ fitting ] in ``fitting``).

Errors name the file and what was wrong with it (:class:`SourceError`).

NOTE [ sources that fill slots ]: a video or an image folder makes its
batches a row at a time (a decoded frame, an image), which would then be
stacked into an array of the batch and copied again into page-locked memory
before the h2d - two host copies of every frame where one would do, each
at memory speed on one core (about half a millisecond a batch of 32 frames
at 224x224 here).  So these sources are
:class:`RowSource` s: ``jobs.run_job`` asks one for a :class:`SlotFiller` and
runs ``Pipeline.map_filled``, which hands it each pinned-in slot once its
last h2d is done; the rows are written straight there, and the copy engine
reads them from where they were written.  That needs one pipeline and slots
of a known size: from the model alone (``Pipeline.fills_slots``: every dim
beyond the batch dim fixed, as exported vision models have them), else from
the source's ``row_shape`` (a video knows its frame size before decoding;
images know theirs when resized to ``size``) where the model can take it.
Elsewhere - images of unknown size into free dims, several devices,
``fill_slots=False`` - the source is iterated and its batches staged as any
source's.  A row the slot cannot hold (another size, another dtype) fails
with both shapes named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..util.capabilities import last_kept_row
from ..util.lazy import lazy_names
from ._base import (
    AUTO_DECODE_THREADS,
    Chunk,
    RowSource,
    SlotFiller,
    SourceBatch,
    SourceError,
    chunk_rows,
    decode_threads_of,
    fewer_rows,
    sliced_chunk,
)
from ._opening import STDIN, STREAM_TIMEOUT_S, hw_api, hw_device_unusable, is_live, is_pipe, is_stream_url
from .decoding import ImageDecoding, VideoDecoding
from .files import (
    ARCHIVE_SUFFIXES,
    IMAGE_SUFFIXES,
    PARQUET_SUFFIXES,
    VIDEO_SUFFIXES,
    files_below,
    hidden,
    holds_files,
    image_files,
    parquet_files,
    paths_below,
    stored_files_below,
    video_files,
    writers_name,
    writers_own,
)
from .fitting import FIT_COLUMNS, FIT_MODES, Fit, Placement
from .table_filling import TableFiller
from .tables import CsvSource, JsonLinesSource, NpySource, ParquetDatasetSource, ParquetSource, rebatch

if TYPE_CHECKING:
    from .archives import ImageArchiveSource, archive_files, shard_of
    from .device_frames import device_decoding_unavailable
    from .device_video import DeviceVideoFill, device_fill_of
    from .images import ImageFolderSource, ImageTableSource
    from .live import BATCH_WAIT_S, LiveStreamsSource
    from .video_folders import VideoFolderSource, VideoTableSource, videos_at_once_of
    from .videos import VideoDecodingFailed, VideoEndedEarly, VideoSource, auto_convert_threads

#: the picture sources' names, imported on first use (PEP 562): a table's run never
#: needs PyAV's or Pillow's wrappers, nor their modules' start-up time
_LAZY = {
    **dict.fromkeys(("ImageArchiveSource", "archive_files", "shard_of"), ".archives"),
    **dict.fromkeys(("DeviceVideoFill", "device_fill_of"), ".device_video"),
    "device_decoding_unavailable": ".device_frames",
    **dict.fromkeys(("ImageFolderSource", "ImageTableSource"), ".images"),
    **dict.fromkeys(("BATCH_WAIT_S", "LiveStreamsSource"), ".live"),
    **dict.fromkeys(("VideoDecodingFailed", "VideoEndedEarly", "VideoSource", "auto_convert_threads"), ".videos"),
    **dict.fromkeys(("VideoFolderSource", "VideoTableSource", "videos_at_once_of"), ".video_folders"),
}


__getattr__ = lazy_names(__name__, _LAZY)

__all__ = [
    "auto_convert_threads",
    "decode_threads_of",
    "hw_api",
    "hw_device_unusable",
    "videos_at_once_of",
    "ARCHIVE_SUFFIXES",
    "BATCH_WAIT_S",
    "AUTO_DECODE_THREADS",
    "FIT_COLUMNS",
    "FIT_MODES",
    "IMAGE_SUFFIXES",
    "PARQUET_SUFFIXES",
    "STDIN",
    "STREAM_TIMEOUT_S",
    "VideoDecoding",
    "ImageDecoding",
    "VIDEO_SUFFIXES",
    "Chunk",
    "CsvSource",
    "JsonLinesSource",
    "DeviceVideoFill",
    "Fit",
    "ImageArchiveSource",
    "ImageFolderSource",
    "ImageTableSource",
    "LiveStreamsSource",
    "NpySource",
    "ParquetDatasetSource",
    "ParquetSource",
    "Placement",
    "RowSource",
    "SlotFiller",
    "TableFiller",
    "SourceBatch",
    "SourceError",
    "VideoDecodingFailed",
    "VideoEndedEarly",
    "VideoFolderSource",
    "VideoSource",
    "VideoTableSource",
    "archive_files",
    "chunk_rows",
    "device_decoding_unavailable",
    "device_fill_of",
    "fewer_rows",
    "files_below",
    "hidden",
    "stored_files_below",
    "holds_files",
    "image_files",
    "is_live",
    "is_pipe",
    "is_stream_url",
    "last_kept_row",
    "parquet_files",
    "paths_below",
    "rebatch",
    "shard_of",
    "sliced_chunk",
    "video_files",
    "writers_name",
    "writers_own",
]

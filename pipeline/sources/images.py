"""Images decoded with Pillow, several at once: the images below a folder
(:class:`ImageFolderSource`) and those a table lists (:class:`ImageTableSource`)."""

from __future__ import annotations

import collections
import concurrent.futures
import copy
import io
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..session import TensorSpec
from ..util.capabilities import last_kept_row
from ._base import (
    Chunk,
    RowSource,
    SourceError,
    decode_threads_of,
    existing_path,
    fewer_rows,
    one_input,
)
from .decoding import IMAGE_CHOICES, ImageDecoding, chosen
from .files import IMAGE_SUFFIXES, image_files, parquet_files
from .fitting import Fit, Placement, check_fit, fit_columns
from .tables import ImageBytesTable, PathTable

#: the EXIF tag that says how a picture is to be turned to be upright
_ORIENTATION = 0x0112
#: each of its values but 1 (as stored), as the Pillow transpose that turns the picture
#: upright; from 5 on, the picture lies on its side (its width is its height)
_UPRIGHT = {
    2: "FLIP_LEFT_RIGHT",
    3: "ROTATE_180",
    4: "FLIP_TOP_BOTTOM",
    5: "TRANSPOSE",
    6: "ROTATE_270",
    7: "TRANSVERSE",
    8: "ROTATE_90",
}

#: an image decoded, and where it went in the model's size (None: not resized)
_Decoded = tuple[np.ndarray, Placement | None]


class ImageFiles(RowSource):
    """Images read from files with Pillow as uint8 ``[N, H, W, 3]``, resized to
    ``size``: what a folder of images (:class:`ImageFolderSource`) and a table
    of image paths (:class:`ImageTableSource`) share.  A subclass says which
    file each of its rows is (``_file``) and what the rows' metadata are
    (``_meta``); the rows given are a window ``[lo, hi)`` of them.

    Decoding a JPEG costs milliseconds, more than a small model takes for it,
    so files are decoded by ``decode_threads`` threads at once (Pillow releases
    the GIL while it decodes and resizes; None: two per CPU, at most
    ``AUTO_DECODE_THREADS``), the next batch while the current one is sent on,
    and delivered in order.  The threads end with the iteration, however it
    ends (exhausted, a failure, or the iterator closed).

    A file that cannot be decoded ends the iteration with a
    :class:`SourceError` naming it, unless ``skip_unreadable``: then it is left
    out (a batch with it is that much shorter), and ``skipped`` lists
    ``(path, reason)`` of every file left out, in order — one corrupt JPEG
    among millions need not end a night's scoring.

    ``jpeg_draft=True`` (with a ``size``) decodes a JPEG at 1/2, 1/4 or 1/8 of
    its size where that is still at least ``size`` (JPEG's DCT scaling, Pillow's
    ``draft``), then resizes: a 12-megapixel photo to 224x224 decodes about 4x
    faster, its pixels within a few levels of a full decode's (not the same:
    off by default, where outputs must match a preprocessing done otherwise).

    ``fit`` (with a ``size``) says how an image of another aspect ratio is made
    that size: ``"stretch"`` (the default), ``"crop"``/``"crop:F"`` or
    ``"pad"``/``"pad:V"``, each row then with ``fit_scale``, ``fit_x`` and
    ``fit_y`` (NOTE [ fitting ]).  Pillow resizes only the region a crop keeps.

    ``exif_orientation=True`` turns each image as its EXIF orientation tag says
    (a phone's portrait photo is stored sideways with a tag to turn it), before
    it is fitted; off by default, as Pillow's and torchvision's loaders leave it,
    so that scores match a model trained on images read that way.
    """

    #: what the source is, in messages
    kind = "image"
    #: the input as its messages name it: a folder, a table, or a prefix's URL
    path: Path | str

    def _setup(
        self,
        rows: int,
        batch_size: int,
        inputs: Sequence[TensorSpec],
        input_name: str | None,
        size: tuple[int, int] | None,
        decode_threads: int | None,
        skip_unreadable: bool,
        jpeg_draft: bool,
        fit: str | Fit | None,
        exif_orientation: bool,
    ) -> None:
        if jpeg_draft and size is None:
            raise SourceError(
                "jpeg_draft decodes a JPEG at a fraction of its size for a resize: give the size, size=(W, H) "
                "(--size WxH)"
            )
        self.jpeg_draft = jpeg_draft
        #: how an image is made ``size`` (NOTE [ fitting ])
        self.fit = check_fit(fit, size, f"{self.kind} {str(self.path)!r}")
        #: whether an image is turned as its EXIF orientation says
        self.exif_orientation = exif_orientation
        self.spec = one_input(inputs, input_name, f"an {self.kind} source")
        self.batch_size, self.size = batch_size, size
        self.row_shape = None if size is None else (size[1], size[0], 3)
        self.decode_threads = decode_threads_of(decode_threads)
        self.skip_unreadable = skip_unreadable
        #: (path, why) of the files left out by ``skip_unreadable``, in order
        self.skipped: list[tuple[str, str]] = []
        self._lo, self._hi = 0, rows  # the window of rows this source gives

    def _file(self, row: int) -> Path:
        """The file of row ``row`` (of all the rows, not of the window)."""
        raise NotImplementedError

    def _open(self, row: int) -> Any:
        """What Pillow reads row ``row``'s image from: its file, or its bytes (a table's)."""
        return self._file(row)

    def _name(self, row: int) -> str:
        """Row ``row``'s image in messages and in ``skipped``: its file's path."""
        return str(self._file(row))

    def _meta(self, rows: list[int]) -> dict[str, np.ndarray]:
        """The metadata of rows ``rows`` (of all the rows), in order."""
        raise NotImplementedError

    #: the metadata column that says which file a row is from: where a resumed run that
    #: skips unreadable files goes on (:meth:`position_after`)
    key_name = "path"

    def _keys(self) -> Iterable[str]:
        """What the ``key_name`` column holds for each row of the window, as text."""
        raise NotImplementedError

    def _key_names(self) -> tuple[str, ...]:
        """The columns of a row that together say which image it is: ``key_name``."""
        return (self.key_name,)

    def _key_of(self, row: Mapping[str, Any]) -> str:
        """An output row's key, as :meth:`_keys` writes keys."""
        return str(row[self.key_name])

    def position_after(self, sink: Any, start: int) -> int | None:
        """Where a resumed run goes on when unreadable files are skipped (its rows are then
        fewer than its files, so they cannot be counted): after the row whose key (its
        path, a table's id) the last row ``sink`` kept has; None where rows are files,
        and counting them will do (``jobs.resumed``)."""
        if not self.skip_unreadable:
            return None
        row = last_kept_row(sink)
        names = self._key_names()
        if row is None or any(name not in row for name in names):
            columns = f"{names[0]} column says" if len(names) == 1 else f"{' and '.join(names)} columns say"
            raise SourceError(
                "cannot resume: a run that skips unreadable images has fewer rows than files, and only a table's "
                f"{columns} which file comes next: write its output as .parquet, .csv or a folder"
            )
        key = self._key_of(row)
        matches = [number for number, each in enumerate(self._keys()) if each == key]
        if not matches:
            raise SourceError(
                f"cannot resume: the output's last row names {key!r} ({self.key_name}), which is not an image of "
                f"{str(self.path)!r} (the input is not the one the output was made from)"
            )
        if len(matches) > 1:
            raise SourceError(
                f"cannot resume: {len(matches)} rows of {str(self.path)!r} have {self.key_name} {key!r}, the output's "
                "last: the ids must be unique to resume a run that skips unreadable images"
            )
        return matches[0] + 1

    def __len__(self) -> int:
        return self._hi - self._lo

    def after(self, rows: int) -> ImageFiles:
        """These images without the first ``rows`` (never decoded)."""
        return self.between(rows, None)

    def between(self, start: int, stop: int | None) -> ImageFiles:
        """Rows ``start`` to ``stop - 1`` (``stop`` None: to the end), the others never
        decoded: windows are of files, also where unreadable ones are skipped and give
        no row (``jobs.window``)."""
        if start > len(self):
            raise fewer_rows(self.path, start)(len(self))
        later = copy.copy(self)
        later._lo = self._lo + start
        later._hi = self._hi if stop is None else min(self._hi, self._lo + stop)
        later.skipped = self.skipped  # one list of what was left out, whichever window left it
        return later

    def chunks(self) -> Iterator[Chunk]:
        starts = range(self._lo, self._hi, self.batch_size)
        if self.decode_threads == 1:
            for start in starts:
                rows = list(range(start, min(start + self.batch_size, self._hi)))
                chunk = self._chunk(rows, [self._load(row) for row in rows])
                if chunk is not None:
                    yield chunk
            return
        pool = concurrent.futures.ThreadPoolExecutor(self.decode_threads, thread_name_prefix="ortpipe-decode")
        try:
            decoding: collections.deque[concurrent.futures.Future[_Decoded | SourceError]] = collections.deque()
            submitted = self._lo
            for start in starts:
                # this batch and the next one in flight: bounded memory, threads kept busy
                ahead = min(self._hi, start + 2 * self.batch_size)
                for row in range(submitted, ahead):
                    decoding.append(pool.submit(self._load, row))
                submitted = ahead
                rows = list(range(start, min(start + self.batch_size, self._hi)))
                chunk = self._chunk(rows, [decoding.popleft().result() for _ in rows])
                if chunk is not None:
                    yield chunk
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _load(self, row: int) -> _Decoded | SourceError:
        """Row ``row``'s image decoded and where it went, or (to be raised or skipped in
        order) why it cannot be."""
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(self._open(row)) as image:
                orientation = image.getexif().get(_ORIENTATION, 1) if self.exif_orientation else 1
                sideways = orientation in (5, 6, 7, 8)
                width, height = image.size[::-1] if sideways else image.size
                placement = None if self.size is None else self.fit.placement(width, height, self.size)
                if self.jpeg_draft and placement is not None:
                    # a JPEG decoded at 1/2, 1/4 or 1/8 of its size, still as large as its resize
                    image.draft(None, placement.resized[::-1] if sideways else placement.resized)
                rgb = image.convert("RGB")
                if orientation in _UPRIGHT:
                    rgb = rgb.transpose(getattr(Image.Transpose, _UPRIGHT[orientation]))
                return np.asarray(self._fitted(rgb, placement)), placement
        except (UnidentifiedImageError, OSError, ValueError) as exc:  # ValueError: a truncated header
            return SourceError(f"{self._name(row)!r} cannot be read as an image: {exc}")
        except SourceError as exc:  # a table's row with no image in it
            return exc

    def _fitted(self, rgb: Any, placement: Placement | None) -> Any:
        """``rgb`` made ``size`` as ``fit`` says (NOTE [ fitting ]): a crop resizes only its region."""
        if placement is None:
            return rgb
        if self.fit.mode == "crop":
            return rgb.resize(placement.size, box=placement.source_box(*rgb.size))
        resized = rgb.resize(placement.resized)
        if self.fit.mode == "stretch":
            return resized
        from PIL import Image

        canvas = Image.new("RGB", placement.size, (self.fit.fill,) * 3)
        canvas.paste(resized, placement.offset)
        return canvas

    def _chunk(self, rows: list[int], loaded: list[_Decoded | SourceError]) -> Chunk | None:
        """The batch of the rows whose files decoded (None when none did and the failures are skipped)."""
        kept, images, placements = [], [], []
        for row, decoded in zip(rows, loaded, strict=True):
            if isinstance(decoded, SourceError):
                if not self.skip_unreadable:
                    raise decoded
                self.skipped.append((self._name(row), str(decoded)))
                continue
            kept.append(row)
            images.append(decoded[0])
            placements.append(decoded[1])
        if not images:
            return None
        shapes = {a.shape for a in images}
        if len(shapes) > 1:
            raise SourceError(f"images of {str(self.path)!r} differ in size {sorted(shapes)}: pass size=(W, H)")
        meta = self._meta(kept)
        if self.fit.moves:
            meta.update(fit_columns([p for p in placements if p is not None]))  # all placed: fit needs a size
        return images, meta


class ImageFolderSource(ImageFiles):
    """The images below a folder, at any depth (:func:`image_files`, in order of
    their paths): uint8 ``[N, H, W, 3]``, resized to ``size``, each row with its
    file's ``path``; decoding as :class:`ImageFiles` says."""

    kind = "image folder"

    def __init__(
        self,
        path: str | Path,
        batch_size: int,
        inputs: Sequence[TensorSpec],
        input_name: str | None = None,
        size: tuple[int, int] | None = None,
        decode_threads: int | None = None,
        skip_unreadable: bool = False,
        jpeg_draft: bool = False,
        fit: str | Fit | None = None,
        exif_orientation: bool = False,
        *,
        decoding: ImageDecoding | None = None,
    ):
        if decoding is not None:  # one value for every choice: it counts
            (
                size,
                decode_threads,
                skip_unreadable,
                jpeg_draft,
                fit,
                exif_orientation,
            ) = chosen(decoding, IMAGE_CHOICES, "ImageFolderSource")
        self.path = existing_path(path, "image folder")
        if not self.path.is_dir():
            raise SourceError(f"{str(self.path)!r} is not a folder")
        self._files = image_files(self.path)
        if not self._files:
            raise SourceError(f"no images ({', '.join(IMAGE_SUFFIXES)}) in {str(self.path)!r}, at any depth")
        self._setup(
            len(self._files),
            batch_size,
            inputs,
            input_name,
            size,
            decode_threads,
            skip_unreadable,
            jpeg_draft,
            fit,
            exif_orientation,
        )

    @property
    def files(self) -> list[Path]:
        """The files of the rows this source gives, in order."""
        return [Path(path) for path in self._files[self._lo : self._hi]]

    def _file(self, row: int) -> Path:
        return Path(self._files[row])

    def _meta(self, rows: list[int]) -> dict[str, np.ndarray]:
        return {"path": np.asarray([self._files[row] for row in rows])}

    def _keys(self) -> Iterable[str]:
        return self._files[self._lo : self._hi]


class ImageTableSource(ImageFiles):
    """The images a table lists (a manifest: a ``.parquet`` or ``.csv`` file whose
    ``column`` holds a path a row, relative to the table's folder or absolute), in
    the table's order: uint8 ``[N, H, W, 3]``, resized to ``size``, each row with
    the table's path as written and its id (the ``id_column``'s value, else
    ``row_id``: the table's own column of that name, or the row's number), so a
    result joins back to its row; decoding as :class:`ImageFiles` says.  Rows
    are the table's: windows, shards and resumes count them, and a resumed run
    that skips unreadable images goes on after the id its output ends with.

    NOTE [ images in a table ]: a Parquet ``column`` may hold the images
    themselves instead - encoded bytes, or Hugging Face datasets' ``Image``
    struct ``{bytes, path}`` - as a data set shipped as Parquet files does:
    then they are read from it a row group at a time
    (:class:`~pipeline.sources.tables.ImageBytesTable`) and each row carries
    its id only."""

    kind = "image table"

    def __init__(
        self,
        path: str | Path,
        column: str,
        batch_size: int,
        inputs: Sequence[TensorSpec],
        input_name: str | None = None,
        size: tuple[int, int] | None = None,
        decode_threads: int | None = None,
        skip_unreadable: bool = False,
        jpeg_draft: bool = False,
        id_column: str | None = None,
        fit: str | Fit | None = None,
        exif_orientation: bool = False,
        *,
        decoding: ImageDecoding | None = None,
    ):
        if decoding is not None:  # one value for every choice: it counts
            (
                size,
                decode_threads,
                skip_unreadable,
                jpeg_draft,
                fit,
                exif_orientation,
            ) = chosen(decoding, IMAGE_CHOICES, "ImageTableSource")
        self.path = existing_path(path, "input table file")
        self.column = column
        self._bytes: ImageBytesTable | None = None
        #: the Parquet files of a data set that holds its images (a folder), else None
        self.parts: list[Path] | None = parquet_files(self.path) if self.path.is_dir() else None
        #: each part's path below the folder, as its rows' ``file`` says
        self._part_names = [part.relative_to(self.path).as_posix() for part in self.parts or []]
        if self.parts is not None or (self.path.suffix.lower() != ".csv" and _holds_images(self.path, column)):
            self._bytes = ImageBytesTable(self.parts or [self.path], column, id_column)
            self.key_name, self._ids = self._bytes.id_name, self._bytes.ids
            rows = len(self._bytes)
        else:
            self._table = PathTable(self.path, column, id_column, "image")
            self.key_name, self._ids = self._table.id_name, self._table.ids
            rows = len(self._table)
        self._setup(
            rows,
            batch_size,
            inputs,
            input_name,
            size,
            decode_threads,
            skip_unreadable,
            jpeg_draft,
            fit,
            exif_orientation,
        )

    @property
    def holds_images(self) -> bool:
        """Whether the table holds the images themselves, not their paths (NOTE [ images in a table ])."""
        return self._bytes is not None

    def describe(self) -> str:
        """What a run says it reads: the images the table lists, or holds, and its column."""
        return f"{len(self)} images {'held' if self.holds_images else 'listed'} in column {self.column!r} of"

    def _file(self, row: int) -> Path:
        return self._table.file(row)

    def _open(self, row: int) -> Any:
        return self._file(row) if self._bytes is None else io.BytesIO(self._bytes.image(row))

    def _name(self, row: int) -> str:
        return str(self._file(row)) if self._bytes is None else self._bytes.name(row)

    def _meta(self, rows: list[int]) -> dict[str, np.ndarray]:
        if self._bytes is not None and self.parts is not None:  # a data set's: its file and its id there
            return {"file": np.asarray([self._part_name(row) for row in rows]), self.key_name: self._ids[rows]}
        if self._bytes is not None:  # the images themselves: the id says which row each is
            return {self.key_name: self._ids[rows]}
        return {
            self.column: self._table.names.take(rows).to_numpy(zero_copy_only=False).astype(str),
            self.key_name: self._ids[rows],
        }

    def _keys(self) -> Iterable[str]:
        if self.parts is not None:  # an id is a file's: the file says which
            return [f"{self._part_name(row)}\0{self._ids[row]}" for row in range(self._lo, self._hi)]
        return self._ids[self._lo : self._hi].astype(str)  # type: ignore[no-any-return]

    def _key_names(self) -> tuple[str, ...]:
        return (self.key_name,) if self.parts is None else ("file", self.key_name)

    def _key_of(self, row: Mapping[str, Any]) -> str:
        return str(row[self.key_name]) if self.parts is None else f"{row['file']}\0{row[self.key_name]}"

    def _part_name(self, row: int) -> str:
        """The data set's file of row ``row``, as its path below the folder."""
        assert self._bytes is not None
        return self._part_names[self._bytes.file_of(row)]


def _holds_images(path: Path, column: str) -> bool:
    """Whether a Parquet table's ``column`` holds images' bytes; a file that is not one says so later."""
    import pyarrow as pa

    try:
        return ImageBytesTable.holds_images(path, column)
    except (pa.ArrowInvalid, OSError):
        return False  # PathTable's own message names what is wrong

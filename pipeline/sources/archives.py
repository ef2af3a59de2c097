"""Images in tar archives: WebDataset's shards, as img2dataset writes them.

NOTE [ image archives ]: a data set of millions of images is often kept as
shards of a few thousand each, plain (uncompressed) ``.tar`` files whose
members are ``KEY.jpg`` beside ``KEY.json``/``KEY.txt``.  :class:`ImageArchiveSource`
reads a ``.tar`` file, or the ``.tar`` files below a folder in path order: it
indexes each archive's image members once (their headers only, each member's
data skipped by a seek), then decodes a row's image from its bytes, read at
its offset by whichever decode thread asks - so windows, shards and resumed
runs go straight to their first image, and nothing is unpacked to disk.  Each
row carries ``path`` (the archive's path and the member's name) and ``key``
(the member's name up to its first dot, WebDataset's key, which joins the
shard's other members and img2dataset's Parquet of metadata).  An archive that
cannot be read at all, or that ends in a broken header (a download cut
short), is an error naming it; with ``skip_unreadable`` the images indexed
before the break are kept and the archive listed in ``skipped``.

The index is made when the source is, from every archive's headers: 0.32 s a
shard of 10,000 members on the project machine (``tarfile`` parses each
header in Python).  A few hundred shards start in a minute; thousands are
better split by shard file across processes than indexed by each.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._session import TensorSpec
from ._base import SourceError, _existing
from .files import IMAGE_SUFFIXES, files_below, hidden
from .fitting import Fit
from .images import _ImageFiles

#: what an archive of images is named
ARCHIVE_SUFFIXES = (".tar",)


def archive_files(folder: Path) -> list[Path]:
    """The ``.tar`` files below ``folder`` at any depth, in path order, hidden ones left out."""
    return files_below(folder, ARCHIVE_SUFFIXES, hidden)


class ArchiveIndex:
    """The image members of some archives, in order: each one's archive, data offset,
    size and name (NOTE [ image archives ])."""

    def __init__(self, archives: Sequence[Path], skip_unreadable: bool) -> None:
        self.archives = list(archives)
        #: (archive, why) of each archive left out, or cut where its headers broke
        self.unreadable: list[tuple[str, str]] = []
        where, offsets, sizes, names = [], [], [], []
        for number, archive in enumerate(self.archives):
            try:
                for offset, size, name in _image_members(archive):
                    where.append(number)
                    offsets.append(offset)
                    sizes.append(size)
                    names.append(name)
            except (tarfile.TarError, OSError) as exc:
                if not skip_unreadable:
                    raise SourceError(f"{str(archive)!r} cannot be read as a tar archive: {exc}") from exc
                self.unreadable.append((str(archive), f"cannot be read as a tar archive past its images before: {exc}"))
        self._archive = np.asarray(where, np.int64)
        self._offset = np.asarray(offsets, np.int64)
        self._size = np.asarray(sizes, np.int64)
        #: each image's member name, in order
        self.names = names

    def __len__(self) -> int:
        return len(self.names)

    def path(self, row: int) -> str:
        """Row ``row`` as ``archive/member``."""
        return f"{self.archives[self._archive[row]]}/{self.names[row]}"

    def key(self, row: int) -> str:
        """WebDataset's key of row ``row``: its member's name up to the first dot of its base name."""
        folder, _, base = self.names[row].rpartition("/")
        stem = base.split(".", 1)[0]
        return f"{folder}/{stem}" if folder else stem

    def data(self, row: int) -> bytes:
        """Row ``row``'s member's bytes, read at their offset (any thread may ask)."""
        size = int(self._size[row])
        with self.archives[self._archive[row]].open("rb") as file:
            data = os.pread(file.fileno(), size, int(self._offset[row]))
        if len(data) < size:
            raise SourceError(f"{self.path(row)!r} is cut short: {len(data)} of its {size} bytes are in the archive")
        return data


#: how much of what follows an archive's last member is read to see that it is its end
_TAIL_CHECKED = 1 << 20


def _image_members(archive: Path) -> Iterable[tuple[int, int, str]]:
    """(data offset, size, name) of each image member of a plain tar archive, in order."""
    with tarfile.open(archive, "r:") as tar:  # plain tar only: a compressed one has no offsets to read at
        for member in tar:
            base = member.name.rpartition("/")[2]
            if member.isfile() and not hidden(base) and base.lower().endswith(IMAGE_SUFFIXES):
                yield member.offset_data, member.size, member.name
        end = tar.offset  # where the header after the last member begins
    # tarfile ends quietly at a header cut in two; an archive's own end is zeros
    with archive.open("rb") as file:
        file.seek(end)
        if file.read(_TAIL_CHECKED).strip(b"\0"):
            raise tarfile.ReadError(f"after its last whole member, at byte {end}, comes a broken header (cut short?)")


class ImageArchiveSource(_ImageFiles):
    """The images in a ``.tar`` archive, or in the ``.tar`` files below a folder
    (WebDataset shards; NOTE [ image archives ]), in order: uint8 ``[N, H, W, 3]``,
    resized to ``size``, each row with its ``path`` (``archive/member``) and
    ``key``; decoding as :class:`~pipeline.sources.images.ImageFolderSource`'s."""

    kind = "image archive"

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
    ):
        self.path = _existing(path, "image archive")
        archives = archive_files(self.path) if self.path.is_dir() else [self.path]
        if not archives:
            raise SourceError(f"no tar archives ({', '.join(ARCHIVE_SUFFIXES)}) in {str(self.path)!r}, at any depth")
        self._index = ArchiveIndex(archives, skip_unreadable)
        if not len(self._index):
            raise SourceError(f"no images ({', '.join(IMAGE_SUFFIXES)}) in the archives of {str(self.path)!r}")
        decoding = (size, decode_threads, skip_unreadable, jpeg_draft, fit, exif_orientation)
        self._setup(len(self._index), batch_size, inputs, input_name, *decoding)
        self.skipped.extend(self._index.unreadable)

    @property
    def archives(self) -> list[Path]:
        """The archives read, in order."""
        return self._index.archives

    def _open(self, row: int) -> Any:
        return io.BytesIO(self._index.data(row))

    def _name(self, row: int) -> str:
        return self._index.path(row)

    def _meta(self, rows: list[int]) -> dict[str, np.ndarray]:
        return {
            "path": np.asarray([self._index.path(row) for row in rows]),
            "key": np.asarray([self._index.key(row) for row in rows]),
        }

    def _keys(self) -> Iterable[str]:
        return [self._index.path(row) for row in range(self._lo, self._hi)]

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

The index is made when the source is, from every archive's headers: read by
:func:`_plain_members` where they are plain ustar, GNU or v7 ones, else by
``tarfile`` (PAX or GNU long names, links, a cut), several times slower
(docs/ortpipe-run.md and docs/results.md give the figures). That is minutes
for thousands of shards (LAION-400M's 41,000 would take an hour), which N
processes of a ``--shard K/N`` would each spend to count the rows they split:
so a folder of archives is sharded by its files instead (``shard=(K, N)``,
:func:`shard_of`): the K-th of N contiguous groups of its archives, near-equal
in count, each process indexing its own only. The shards' outputs together
hold every image once, as a split by rows would.

Reading the headers ourselves, not only through ``tarfile`` nor through the
``webdataset`` package (issue 36 asked; decided 2026-12-06): ``tarfile`` stays
for every header that is not plain (PAX, GNU long names, links, a cut), and
plain ones are read several times as fast without it (docs/results.md), which
is an hour for LAION-sized sets; ``webdataset`` streams samples in order and cannot
go straight to a row at its offset, which windows, shards and resumed runs need.
"""

from __future__ import annotations

import io
import os
import posixpath
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..session import TensorSpec
from ._base import SourceError, existing_path
from .decoding import IMAGE_CHOICES, ImageDecoding, chosen
from .files import ARCHIVE_SUFFIXES, IMAGE_SUFFIXES, files_below, hidden
from .fitting import Fit
from .images import ImageFiles

#: what an archive of images is named


def archive_files(folder: Path) -> list[Path]:
    """The ``.tar`` files below ``folder`` at any depth, in path order, hidden ones left out."""
    return files_below(folder, ARCHIVE_SUFFIXES, hidden)


def shard_of(archives: Sequence[Path], shard: tuple[int, int]) -> list[Path]:
    """The archives of shard K of N (``shard``): the K-th of N contiguous groups, their
    sizes differing by one archive at most (none where N exceeds the archives)."""
    k, n = shard
    if not (isinstance(k, int) and isinstance(n, int) and 0 <= k < n):
        raise SourceError(f"a shard is K/N with 0 <= K < N, got {k}/{n}")
    return list(archives[k * len(archives) // n : (k + 1) * len(archives) // n])


class ArchiveIndex:
    """The image members of some archives, in order: each one's archive, data offset,
    size and name (NOTE [ image archives ])."""

    def __init__(self, archives: Sequence[Path], skip_unreadable: bool) -> None:
        self.archives = list(archives)
        #: (archive, why) of each archive left out, or cut where its headers broke
        self.unreadable: list[tuple[str, str]] = []
        #: (archive/member, why) of each image member left out: a link, a name outside the archive
        self.left_out: list[tuple[str, str]] = []
        where, offsets, sizes, names = [], [], [], []
        for number, archive in enumerate(self.archives):
            try:
                for offset, size, name in _image_members(archive, self.left_out):
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


def _image_members(archive: Path, left_out: list[tuple[str, str]] | None = None) -> Iterator[tuple[int, int, str]]:
    """(data offset, size, name) of each image member of a plain tar archive, in order:
    read by :func:`_plain_members` where it can, else by ``tarfile``.  A name is made plain
    (``./a.jpg`` is ``a.jpg``); an image member that is a link, or whose name is absolute or
    climbs out of the archive (``../x.jpg``, as tar's extraction refuses it), is left out and
    added to ``left_out`` with why."""
    left_out = [] if left_out is None else left_out
    members = _plain_members(archive)
    for offset, size, name in _tarfile_members(archive, left_out) if members is None else members:
        if not _is_image(name):
            continue
        plain = posixpath.normpath(name)
        if plain.startswith(("/", "../")) or plain == "..":
            left_out.append((f"{archive}/{name}", "its name is outside the archive"))
            continue
        yield offset, size, plain


def _is_image(name: str) -> bool:
    base = name.rpartition("/")[2]
    return not hidden(base) and base.lower().endswith(IMAGE_SUFFIXES)


def _tarfile_members(archive: Path, left_out: list[tuple[str, str]] | None = None) -> Iterator[tuple[int, int, str]]:
    """:func:`_image_members` by ``tarfile``: every format it reads, errors with its words; an
    image that is a link (symbolic or hard) added to ``left_out``: its bytes are another member's,
    or outside the archive."""
    with tarfile.open(archive, "r:") as tar:  # plain tar only: a compressed one has no offsets to read at
        for member in tar:
            if member.isfile() and _is_image(member.name):
                yield member.offset_data, member.size, member.name
            elif (member.issym() or member.islnk()) and _is_image(member.name) and left_out is not None:
                left_out.append((f"{archive}/{member.name}", f"a link to {member.linkname!r}"))
        end = tar.offset  # where the header after the last member begins
    if not _ends_there(archive, end):  # tarfile ends quietly at a header cut in two
        raise tarfile.ReadError(f"after its last whole member, at byte {end}, comes a broken header (cut short?)")


def _ends_there(archive: Path, end: int) -> bool:
    """Whether what follows byte ``end`` of ``archive`` is an archive's end: zeros, or nothing."""
    with archive.open("rb") as file:
        file.seek(end)
        return not file.read(_TAIL_CHECKED).strip(b"\0")


#: NOTE [ image archives ]: what a plain header is: a regular file or a folder, its size in octal
_PLAIN_TYPES = (b"0", b"\0", b"5")
_POSIX_MAGIC = b"ustar\x0000"


def _plain_members(archive: Path) -> list[tuple[int, int, str]] | None:
    """(data offset, size, name) of every regular file of an archive whose headers are all plain
    ustar, GNU or v7 ones (as img2dataset's and most shards' are), read without ``tarfile``,
    several times as fast (docs/results.md).  None for anything else - a
    PAX or GNU long name, a link, a size in base 256, a bad checksum, a cut - which
    :func:`_tarfile_members` then reads, and reports, as before."""
    members: list[tuple[int, int, str]] = []
    length = archive.stat().st_size
    with archive.open("rb") as file:
        descriptor, offset = file.fileno(), 0
        while offset + 512 <= length:
            header = os.pread(descriptor, 512, offset)
            if not header.strip(b"\0"):  # the archive's end
                return members if _ends_there(archive, offset) else None
            parsed = _plain_header(header)
            if parsed is None:
                return None
            kind, size, name = parsed
            if offset + 512 + size > length:  # cut inside its data
                return None
            if kind != b"5":
                members.append((offset + 512, size, name))
            offset += 512 + -(-size // 512) * 512
    return members if offset == length else None


def _plain_header(header: bytes) -> tuple[bytes, int, str] | None:
    """(type, size, name) of a plain tar header (:func:`_plain_members`), None if it is not one."""
    try:
        checksum = int(header[148:156].split(b"\0", 1)[0].strip() or b"0", 8)
        size = int(header[124:136].split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError:  # not octal: a size in base 256, or not a header
        return None
    kind = header[156:157]
    if kind not in _PLAIN_TYPES or checksum != sum(header[:148]) + 8 * 32 + sum(header[156:]):
        return None
    name = header[:100].split(b"\0", 1)[0]
    prefix = header[345:500].split(b"\0", 1)[0] if header[257:265] == _POSIX_MAGIC else b""
    if prefix:
        name = prefix + b"/" + name
    return kind, size, name.decode("utf-8", "surrogateescape")


class ImageArchiveSource(ImageFiles):
    """The images in a ``.tar`` archive, or in the ``.tar`` files below a folder
    (WebDataset shards; NOTE [ image archives ]), in order: uint8 ``[N, H, W, 3]``,
    resized to ``size``, each row with its ``path`` (``archive/member``) and
    ``key``; decoding as :class:`~pipeline.sources.images.ImageFolderSource`'s.
    ``shard=(K, N)``: only the archives of the K-th of N groups of the files
    (:func:`shard_of`), the others never opened."""

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
        shard: tuple[int, int] | None = None,
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
            ) = chosen(decoding, IMAGE_CHOICES, "ImageArchiveSource")
        self.path = existing_path(path, "image archive")
        archives = archive_files(self.path) if self.path.is_dir() else [self.path]
        if not archives:
            raise SourceError(f"no tar archives ({', '.join(ARCHIVE_SUFFIXES)}) in {str(self.path)!r}, at any depth")
        #: (K, N) where only the archives of shard K of N are read (:func:`shard_of`), else None
        self.shard = shard
        #: how many archives the path holds, of which ``archives`` are read
        self.archives_found = len(archives)
        self._index = ArchiveIndex(archives if shard is None else shard_of(archives, shard), skip_unreadable)
        if not len(self._index) and (shard is None or self._index.archives):  # an empty shard is no error
            raise SourceError(f"no images ({', '.join(IMAGE_SUFFIXES)}) in the archives of {str(self.path)!r}")
        choices = (size, decode_threads, skip_unreadable, jpeg_draft, fit, exif_orientation)
        self._setup(len(self._index), batch_size, inputs, input_name, *choices)
        self.skipped.extend(self._index.unreadable)

    def describe(self) -> str:
        """What a run says it reads: the archives' images, and which shard of them."""
        if self.shard is not None:
            k, n = self.shard
            return f"images in {len(self.archives)} of the {self.archives_found} tar archive(s), shard {k}/{n}, of"
        return f"images in {len(self.archives)} tar archive(s)"

    def notes(self) -> list[str]:
        """The image members left out - links, names outside the archive - said once, with the first few."""
        left_out = self._index.left_out
        if not left_out:
            return []
        shown = "; ".join(f"{name!r}: {why}" for name, why in left_out[:3]) + ("; ..." if len(left_out) > 3 else "")
        return [
            f"left out {len(left_out):,} image member(s) of the tar archive(s) that are links or named outside the "
            f"archive, which ortpipe does not read ({shown})"
        ]

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

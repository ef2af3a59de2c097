"""Images in object storage: the image objects under a prefix (``s3://bucket/photos/``), read as
a local folder of images is (:class:`~pipeline.sources.images.ImageFolderSource`).

The objects are listed once, at any depth, in order of their keys (hidden ones left out); each
is fetched whole by the decoding threads (pyarrow's reads leave the GIL, so the fetches of a
batch overlap one another and the run) and decoded by Pillow from its bytes.  Each row's
``path`` is its object's URL, which a resumed run holds the output's last row against.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..session import TensorSpec
from ..util.errors import SourceError
from ..util.storage import StoredPath, said
from .decoding import IMAGE_CHOICES, ImageDecoding, chosen
from .files import IMAGE_SUFFIXES, stored_files_below
from .images import ImageFiles


class StoredImageFolderSource(ImageFiles):
    """The images under a prefix of an object store (see the module): uint8 ``[N, H, W, 3]``,
    resized to ``size``, each row with its object's URL as ``path``; decoding as
    :class:`~pipeline.sources.images.ImageFiles` says."""

    kind = "image prefix"

    def __init__(
        self,
        url: str,
        batch_size: int,
        inputs: Sequence[TensorSpec],
        input_name: str | None = None,
        *,
        decoding: ImageDecoding | None = None,
    ) -> None:
        size, threads, skip, draft, fit, exif = chosen(decoding or ImageDecoding(), IMAGE_CHOICES, self.kind)
        self.root = StoredPath.of(url)
        self.path = url  # as the messages name the input
        self._files = stored_files_below(self.root, IMAGE_SUFFIXES)  # URLs
        if not self._files:
            raise SourceError(f"no images ({', '.join(IMAGE_SUFFIXES)}) under {url!r}, at any depth")
        self._setup(len(self._files), batch_size, inputs, input_name, size, threads, skip, draft, fit, exif)

    def _url(self, row: int) -> str:
        return self._files[row]

    def _file(self, row: int) -> Path:
        return Path(self._files[row].split("://", 1)[1])

    def _open(self, row: int) -> Any:
        try:
            with self.root.fs.open_input_stream(self._files[row].split("://", 1)[1]) as stream:
                return io.BytesIO(stream.read())
        except Exception as exc:
            raise OSError(said(self._url(row), exc)) from exc

    def _name(self, row: int) -> str:
        return self._url(row)

    def _meta(self, rows: list[int]) -> dict[str, np.ndarray]:
        return {"path": np.asarray([self._url(row) for row in rows])}

    def _keys(self) -> Iterable[str]:
        return [self._url(row) for row in range(self._lo, self._hi)]

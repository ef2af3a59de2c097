"""Decoding choices as values: every image source takes an ImageDecoding, every video
source a VideoDecoding (open_source builds each once); the keyword arguments the sources
took before still work, and a choice a source has no use for is refused."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from pipeline import TensorSpec
from pipeline.sources import (
    ImageDecoding,
    ImageFolderSource,
    SourceError,
    VideoDecoding,
    VideoFolderSource,
    VideoSource,
)

SPEC = TensorSpec("x", np.dtype(np.uint8), ("N", 8, 8, 3))


def _batches(source) -> list[tuple[list[str], np.ndarray]]:
    return [(list(map(str, batch.meta["path"])), batch.inputs["x"]) for batch in source]


def test_an_image_decoding_gives_what_the_keyword_arguments_give(tmp_path):
    rng = np.random.default_rng(0)
    for index in range(5):
        Image.fromarray(rng.integers(0, 256, (12, 16, 3), np.uint8)).save(tmp_path / f"{index}.png")
    by_keywords = ImageFolderSource(tmp_path, 2, [SPEC], size=(8, 8), fit="crop", decode_threads=1)
    by_value = ImageFolderSource(tmp_path, 2, [SPEC], decoding=ImageDecoding(size=(8, 8), fit="crop", decode_threads=1))
    for (paths, pictures), (paths_too, pictures_too) in zip(_batches(by_keywords), _batches(by_value), strict=True):
        assert paths == paths_too
        np.testing.assert_array_equal(pictures, pictures_too)


def test_a_choice_a_source_has_no_use_for_is_refused(tmp_path):
    with pytest.raises(
        SourceError, match="VideoSource has no use for skip_unreadable, videos_at_once of VideoDecoding"
    ):
        VideoSource(tmp_path / "clip.mp4", 4, [SPEC], decoding=VideoDecoding(skip_unreadable=True, videos_at_once=2))
    with pytest.raises(SourceError, match="VideoFolderSource has no use for reconnect"):
        VideoFolderSource(tmp_path, 4, [SPEC], decoding=VideoDecoding(reconnect=3))
    assert VideoDecoding() == VideoDecoding(options={})  # values: equal when their choices are

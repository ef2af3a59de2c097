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


def test_keyword_arguments_of_the_video_sources_are_deprecated_in_one_place(tmp_path):
    """Issue 36, item 5: ``decoding=`` is how a video source is told; the keywords still work,
    with a DeprecationWarning that names the value to pass instead, and beside ``decoding=``
    they are refused."""
    import warnings

    pytest.importorskip("av")
    from tests.helpers import encode_video

    clip = encode_video(tmp_path / "clip.mp4", "libx264", {"g": "4"}, frames=12, size=16)
    (tmp_path / "folder").mkdir()
    encode_video(tmp_path / "folder" / "a.mp4", "libx264", {"g": "4"}, frames=6, size=16)
    with pytest.warns(DeprecationWarning, match=r"VideoSource\(size=\(8, 8\), every=2\) is deprecated: pass "):
        by_keywords = VideoSource(clip, 4, [SPEC], size=(8, 8), every=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the value: no warning
        by_value = VideoSource(clip, 4, [SPEC], decoding=VideoDecoding(size=(8, 8), every=2))
        by_default = VideoSource(clip, 4, [TensorSpec("x", SPEC.dtype, ("N", 16, 16, 3))])
    assert len(by_default) == 12
    for batch, same in zip(by_keywords, by_value, strict=True):
        np.testing.assert_array_equal(batch.inputs["x"], same.inputs["x"])
    with pytest.raises(SourceError, match=r"VideoSource: give decoding= or the keyword arguments \(every=3\)"):
        VideoSource(clip, 4, [SPEC], every=3, decoding=VideoDecoding(size=(8, 8)))
    with pytest.warns(DeprecationWarning, match=r"VideoFolderSource\(size=\(8, 8\)\) is deprecated"):
        VideoFolderSource(tmp_path / "folder", 4, [SPEC], size=(8, 8))

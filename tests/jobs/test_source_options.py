"""``open_source`` takes its choices as one value (``SourceOptions``) or as keywords, alike."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import Pipeline, models
from pipeline.jobs import SourceOptions, open_source
from pipeline.sources import SourceError


def test_options_as_a_value_or_as_keywords_open_the_same_source(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((10, 4), np.float32))
    with Pipeline(models.identity(features=4), device="cpu") as pipe:
        by_value = open_source(tmp_path / "x.npy", pipe, 4, SourceOptions(input_name="x"))
        by_keyword = open_source(tmp_path / "x.npy", pipe, 4, input_name="x")
        assert [b.meta["row_id"].tolist() for b in by_value] == [b.meta["row_id"].tolist() for b in by_keyword]
        with pytest.raises(TypeError, match="either options or keywords, not both"):
            open_source(tmp_path / "x.npy", pipe, 4, SourceOptions(), every=2)
        with pytest.raises(TypeError, match="frames_per_second"):
            open_source(tmp_path / "x.npy", pipe, 4, frames_per_second=2)
        with pytest.raises(SourceError, match="taking every N-th frame is for videos; .* is a npy source"):
            open_source(tmp_path / "x.npy", pipe, 4, SourceOptions(every=2))


def test_the_decoding_choices_are_made_once_as_the_sources_values():
    options = SourceOptions(size=(32, 24), every=3, jpeg_draft=True, stream_timeout_s=None)
    video, image = options.video_decoding(), options.image_decoding()
    assert (video.size, video.every) == ((32, 24), 3) and video.timeout_s > 0
    assert (image.size, image.jpeg_draft) == ((32, 24), True)

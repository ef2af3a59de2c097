"""Frames and images made the model's size stretched, cropped or padded (NOTE [
fitting ]): the geometry, Pillow's images and PyAV's frames placed alike, the rows
saying where each picture went, and ``ortpipe run --fit``."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import Pipeline, models
from pipeline.cli import main
from pipeline.jobs import run_job
from pipeline.sinks import CallbackSink
from pipeline.sources import Fit, ImageFolderSource, SourceError, VideoSource

from ..helpers import encode_video, frames_model

Image = pytest.importorskip(
    "PIL.Image", reason="image sources need Pillow: pip install '.[images]' in a checkout of ortpipe"
)


@pytest.mark.parametrize(
    ("text", "fit"),
    [
        ("stretch", Fit()),
        ("crop", Fit("crop")),
        ("crop:0.875", Fit("crop", fraction=0.875)),
        ("pad", Fit("pad")),
        (" pad:114 ", Fit("pad", fill=114)),
    ],
)
def test_fit_reads_its_text_and_writes_it_back(text, fit):
    assert Fit.parse(text) == fit
    assert Fit.parse(str(fit)) == fit
    assert Fit.parse(fit) is fit and Fit.parse(None) == Fit()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("squash", "fit is one of stretch, crop, pad, got 'squash'"),
        ("crop:0", r"a crop keeps a fraction in \(0, 1\]"),
        ("crop:1.5", r"a crop keeps a fraction in \(0, 1\]"),
        ("crop:most", "fit 'crop:most': could not convert"),
        ("pad:256", "a pad's border is a pixel value 0-255, got 256"),
        ("pad:gray", "fit 'pad:gray': invalid literal"),
        ("stretch:1", "only crop:FRACTION and pad:VALUE take a value"),
    ],
)
def test_a_bad_fit_says_what_it_takes(text, words):
    with pytest.raises(ValueError, match=words):
        Fit.parse(text)


def test_crop_and_pad_of_a_landscape_picture_into_a_square():
    # crop:0.875 to 224: torchvision's Resize(256) (341x256) and CenterCrop(224) (58, 16 cut)
    imagenet = Fit("crop", fraction=0.875).placement(640, 480, (224, 224))
    assert (imagenet.resized, imagenet.offset) == ((341, 256), (-58, -16))
    crop = Fit("crop").placement(640, 480, (224, 224))
    assert (crop.resized, crop.offset, crop.scale) == ((299, 224), (-37, 0), 224 / 480)
    pad = Fit("pad", fill=114).placement(640, 480, (224, 224))
    assert (pad.resized, pad.offset, pad.scale, pad.fill) == ((224, 168), (0, 28), 0.35, 114)


@pytest.mark.parametrize("mode", ["crop", "pad"])
def test_a_placement_maps_the_pictures_corners_within_half_a_pixel(mode):
    rng = np.random.default_rng(0)
    for _ in range(500):
        width, height, target_w, target_h = (int(v) for v in rng.integers(1, 2000, 4))
        p = Fit(mode).placement(width, height, (target_w, target_h))
        x, y = p.offset
        if mode == "crop":  # covers the target, centred
            assert p.resized[0] >= target_w and p.resized[1] >= target_h
            assert x <= 0 and y <= 0 and -x + target_w <= p.resized[0] and -y + target_h <= p.resized[1]
            assert abs((p.resized[0] - target_w) + 2 * x) <= 1 and abs((p.resized[1] - target_h) + 2 * y) <= 1
        else:  # within the target, centred; one side fills it
            assert 1 <= p.resized[0] <= target_w and 1 <= p.resized[1] <= target_h
            assert p.resized[0] == target_w or p.resized[1] == target_h
            assert x >= 0 and y >= 0 and abs((target_w - p.resized[0]) - 2 * x) <= 1
        # the original's far corner, mapped with the rows' fit_scale/fit_x/fit_y, is the resized picture's
        assert abs(width * p.scale - p.resized[0]) <= 0.5 + 1e-9 or p.resized[0] in (1, target_w)
        assert abs(height * p.scale - p.resized[1]) <= 0.5 + 1e-9 or p.resized[1] in (1, target_h)


@pytest.fixture(scope="module")
def inputs():
    with Pipeline(models.convnet(), device="cpu") as pipe:
        return pipe.source_inputs


@pytest.fixture
def landscape(tmp_path):
    """A 60x30 PNG whose pixels say where they are (red: x, green: y), and a 30x60 one."""
    y, x = np.mgrid[0:30, 0:60]
    pixels = np.stack([x * 4, y * 8, np.full_like(x, 200)], -1).astype(np.uint8)
    Image.fromarray(pixels).save(tmp_path / "a_wide.png")
    Image.fromarray(pixels.transpose(1, 0, 2).copy()).save(tmp_path / "b_tall.png")
    return tmp_path, pixels


def _one_batch(source):
    (batch,) = list(source)
    return batch.inputs["frames"], batch.meta


def test_images_cropped_padded_or_stretched_with_where_each_went(landscape, inputs):
    folder, pixels = landscape
    cropped, meta = _one_batch(ImageFolderSource(folder, 4, inputs, size=(30, 30), fit="crop"))
    np.testing.assert_array_equal(cropped[0], pixels[:, 15:45])  # no resize: the middle, exactly
    np.testing.assert_array_equal(cropped[1], pixels.transpose(1, 0, 2)[15:45])
    assert meta["fit_scale"].tolist() == [1.0, 1.0]
    assert meta["fit_x"].tolist() == [-15, 0] and meta["fit_y"].tolist() == [0, -15]

    padded, meta = _one_batch(ImageFolderSource(folder, 4, inputs, size=(60, 60), fit="pad:114"))
    assert (padded[0, :15] == 114).all() and (padded[0, 45:] == 114).all()
    np.testing.assert_array_equal(padded[0, 15:45], pixels)  # as large as it was: unchanged in the middle
    assert (padded[1, :, :15] == 114).all() and (padded[1, :, 45:] == 114).all()
    assert meta["fit_x"].tolist() == [0, 15] and meta["fit_y"].tolist() == [15, 0]

    halved, _ = _one_batch(ImageFolderSource(folder, 4, inputs, size=(30, 30), fit="pad"))
    reference = np.asarray(Image.open(folder / "a_wide.png").convert("RGB").resize((30, 15)))
    np.testing.assert_array_equal(halved[0, 7:22], reference)  # Pillow's resize, on a border of 0
    assert not halved[0, :7].any() and not halved[0, 22:].any()

    stretched, meta = _one_batch(ImageFolderSource(folder, 4, inputs, size=(30, 30)))
    assert stretched.shape == (2, 30, 30, 3) and set(meta) == {"path"}  # as before: no fit columns


def test_a_crop_resizes_only_its_region_as_resizing_the_whole_then_cutting_does(tmp_path, inputs):
    rng = np.random.default_rng(3)
    smooth = Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)).resize((640, 480), Image.BILINEAR)
    smooth.save(tmp_path / "photo.png")
    cropped, meta = _one_batch(ImageFolderSource(tmp_path, 1, inputs, size=(224, 224), fit="crop:0.875"))
    whole = np.asarray(smooth.resize((341, 256))).astype(np.int16)[16:240, 58:282]
    assert np.abs(cropped[0].astype(np.int16) - whole).max() <= 2  # the same picture, up to the filter's edges
    assert (meta["fit_x"][0], meta["fit_y"][0]) == (-58, -16)


def test_jpeg_draft_of_a_crop_decodes_no_smaller_than_the_covering_resize(tmp_path, inputs):
    y, x = np.mgrid[0:1200, 0:1600]
    photo = np.stack([x * 255 / 1600, y * 255 / 1200, (x + y) * 255 / 2800], -1).astype(np.uint8)
    Image.fromarray(photo).save(tmp_path / "a.jpg", quality=95)
    full, _ = _one_batch(ImageFolderSource(tmp_path, 1, inputs, size=(100, 100), fit="crop"))
    draft, _ = _one_batch(ImageFolderSource(tmp_path, 1, inputs, size=(100, 100), fit="crop", jpeg_draft=True))
    assert np.abs(full.astype(np.int16) - draft).max() <= 4  # decoded at 1/8 (200x150), covering 133x100


def test_a_fit_that_crops_or_pads_needs_a_size(landscape, inputs):
    with pytest.raises(SourceError, match=r"fit 'pad' makes pictures a size: give it, size=\(W, H\)"):
        ImageFolderSource(landscape[0], 4, inputs, fit="pad")
    assert ImageFolderSource(landscape[0], 4, inputs, fit="stretch").fit == Fit()


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    pytest.importorskip("av", reason="video sources need PyAV: pip install '.[video]' in a checkout of ortpipe")
    return encode_video(tmp_path_factory.mktemp("fit") / "square.mp4", "libx264", {"g": "5"}, frames=6, size=32)


def _frames(source):
    batches = list(source)
    return np.concatenate([b.inputs["frames"] for b in batches]), {
        name: np.concatenate([b.meta[name] for b in batches]) for name in batches[0].meta
    }


def test_video_frames_cropped_and_padded_as_images_are(video, inputs):
    whole, _ = _frames(VideoSource(video, 4, inputs, size=(32, 32)))
    cropped, meta = _frames(VideoSource(video, 4, inputs, size=(32, 16), fit="crop"))
    np.testing.assert_array_equal(cropped, whole[:, 8:24])  # the middle rows of every frame
    assert meta["frame_index"].tolist() == list(range(6))
    assert set(meta["fit_x"].tolist()) == {0} and set(meta["fit_y"].tolist()) == {-8}
    halved, _ = _frames(VideoSource(video, 4, inputs, size=(16, 16)))
    padded, meta = _frames(VideoSource(video, 4, inputs, size=(32, 16), fit="pad:7"))
    np.testing.assert_array_equal(padded[:, :, 8:24], halved)
    assert (padded[:, :, :8] == 7).all() and (padded[:, :, 24:] == 7).all()
    assert set(meta["fit_scale"].tolist()) == {0.5} and set(meta["fit_x"].tolist()) == {8}


def test_a_job_writes_cropped_frames_into_the_slots_and_their_places_beside_the_outputs(video):
    with Pipeline(frames_model(16, 32), device="cpu", depth=2) as pipe:
        source = VideoSource(video, 4, pipe.source_inputs, size=(32, 16), fit="crop")
        written = []
        summary = run_job(pipe, source, CallbackSink(lambda index, outs, meta: written.append((outs, meta))))
        assert summary.filled  # straight into the pinned slots, a cropped view at a time
        whole, _ = _frames(VideoSource(video, 4, pipe.source_inputs, size=(32, 32)))
    np.testing.assert_array_equal(np.concatenate([outs["seen"] for outs, _ in written]), whole[:, 8:24])
    assert np.concatenate([meta["fit_y"] for _, meta in written]).tolist() == [-8] * 6


def test_ortpipe_run_fit_writes_where_each_picture_went_and_is_refused_where_there_are_none(
    landscape, tmp_path, capsys
):
    import pyarrow.parquet as pq

    folder, _ = landscape
    output = tmp_path / "out.parquet"
    argv = ["run", "convnet", "--input", str(folder), "--size", "40x40", "--no-progress"]
    assert main([*argv, "--fit", "pad:114", "--output", str(output)]) == 0
    table = pq.read_table(output)
    assert table["fit_x"].to_pylist() == [0, 10] and table["fit_y"].to_pylist() == [10, 0]
    assert table["fit_scale"].to_pylist() == pytest.approx([2 / 3, 2 / 3])
    np.save(tmp_path / "x.npy", np.zeros((4, 64), np.float32))
    npy = ["run", "mlp", "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy"), "--no-progress"]
    assert main([*npy, "--fit", "crop"]) == 1
    assert "cropping or padding to a size is for video frames and images" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*npy, "--fit", "crop:2"])
    assert r"a crop keeps a fraction in (0, 1]" in capsys.readouterr().err


def test_a_folder_of_videos_of_two_sizes_and_an_image_table_are_fitted_video_by_video(tmp_path, video, inputs):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.sources import ImageTableSource, VideoFolderSource

    folder = tmp_path / "videos"
    folder.mkdir()
    (folder / "a.mp4").write_bytes(video.read_bytes())
    encode_video(folder / "b.mp4", "libx264", {"g": "5"}, frames=3, size=64)
    frames, meta = _frames(VideoFolderSource(folder, 4, inputs, size=(32, 16), fit="crop"))
    assert frames.shape == (9, 16, 32, 3)
    assert meta["fit_scale"].tolist() == [1.0] * 6 + [0.5] * 3 and set(meta["fit_y"].tolist()) == {-8}
    for index, name in enumerate(["a_wide.png", "b_tall.png"]):
        Image.fromarray(np.full((10 + 20 * index, 30 - 20 * index, 3), 50, np.uint8)).save(tmp_path / name)
    pq.write_table(pa.table({"file": ["b_tall.png", "a_wide.png"]}), tmp_path / "list.parquet")
    images, meta = _one_batch(ImageTableSource(tmp_path / "list.parquet", "file", 4, inputs, size=(30, 30), fit="pad"))
    assert meta["file"].tolist() == ["b_tall.png", "a_wide.png"]  # the table's order
    assert meta["fit_x"].tolist() == [10, 0] and meta["fit_y"].tolist() == [0, 10]
    assert (images[0, :, 10:20] == 50).all() and not images[0, :, :10].any()

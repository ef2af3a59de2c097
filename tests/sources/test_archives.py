"""Images in tar archives, WebDataset's shards (NOTE [ image archives ]): their image
members in order, read at their offsets by the decode threads, windows across
archives, archives cut short, and ``ortpipe run`` over a folder of shards."""

from __future__ import annotations

import gzip
import io
import tarfile

import numpy as np
import pytest

from pipeline import Pipeline, models
from pipeline.cli import main
from pipeline.jobs import open_source, source_kind
from pipeline.sources import ImageArchiveSource, SourceError, shard_of

Image = pytest.importorskip(
    "PIL.Image", reason="image sources need Pillow: pip install '.[images]' in a checkout of ortpipe"
)


def _png(seed: int, height: int = 12) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, 16, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _tar(path, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def shards(tmp_path):
    """Two shards of WebDataset samples (KEY.png beside KEY.json), one with a folder in its
    keys and a macOS resource fork; img2dataset's Parquet beside them."""
    folder = tmp_path / "shards"
    folder.mkdir()
    first = [(f"{i:04d}.png", _png(i)) for i in range(5)]
    first = [member for image in first for member in (image, (image[0].replace(".png", ".json"), b"{}"))]
    second = [("day2/0005.png", _png(5)), ("day2/._0005.png", b"resource fork"), ("day2/0006.png", _png(6))]
    _tar(folder / "00000.tar", first)
    _tar(folder / "00001.tar", second)
    (folder / "00000.parquet").write_bytes(b"img2dataset's metadata: not read")
    return folder


@pytest.fixture(scope="module")
def inputs():
    with Pipeline(models.convnet(), device="cpu") as pipe:
        return pipe.source_inputs


def _rows(source) -> tuple[np.ndarray, list[str], list[str]]:
    batches = list(source)
    frames = np.concatenate([b.inputs["frames"] for b in batches])
    return frames, [p for b in batches for p in b.meta["path"]], [k for b in batches for k in b.meta["key"]]


@pytest.mark.parametrize("threads", [1, 3])
def test_the_image_members_of_every_archive_in_order_with_their_keys(shards, inputs, threads):
    source = ImageArchiveSource(shards, 3, inputs, size=(16, 12), decode_threads=threads)
    assert source_kind(shards) == "images" and source.archives == [shards / "00000.tar", shards / "00001.tar"]
    frames, paths, keys = _rows(source)
    assert keys == ["0000", "0001", "0002", "0003", "0004", "day2/0005", "day2/0006"]
    assert paths[0] == f"{shards / '00000.tar'}/0000.png" and paths[-1] == f"{shards / '00001.tar'}/day2/0006.png"
    want = [np.asarray(Image.open(io.BytesIO(_png(seed)))) for seed in range(7)]
    np.testing.assert_array_equal(frames, np.stack(want))
    window_frames, _, window_keys = _rows(source.between(3, 6))  # across the two archives
    assert window_keys == ["0003", "0004", "day2/0005"]
    np.testing.assert_array_equal(window_frames, frames[3:6])


def test_an_archive_cut_short_or_compressed_is_named(shards, inputs):
    """A download cut off inside a member's data or inside a header: without
    skip_unreadable the archive is named; with it the images before the break are
    kept, one whose bytes are cut is left out as any unreadable image, and the
    archive is listed."""
    whole = (shards / "00000.tar").read_bytes()
    with tarfile.open(shards / "00000.tar") as tar:
        members = {member.name: member for member in tar.getmembers()}
    for cut, unreadable_rows in [
        (members["0002.png"].offset_data + 10, [f"{shards / '00000.tar'}/0002.png"]),  # inside its bytes
        (members["0002.json"].offset + 100, []),  # inside a header: 0002.png is whole
    ]:
        (shards / "00000.tar").write_bytes(whole[:cut])
        with pytest.raises(SourceError, match=r"00000\.tar' cannot be read as a tar archive"):
            ImageArchiveSource(shards, 8, inputs)
        skipping = ImageArchiveSource(shards, 8, inputs, size=(16, 12), skip_unreadable=True)
        _, _, keys = _rows(skipping)
        assert keys == ["0000", "0001", *([] if unreadable_rows else ["0002"]), "day2/0005", "day2/0006"]
        assert [name for name, _ in skipping.skipped] == [str(shards / "00000.tar"), *unreadable_rows]
        if unreadable_rows:
            assert "is cut short" in skipping.skipped[1][1]
    (shards / "00000.tar").write_bytes(gzip.compress(whole))  # a .tar.gz named .tar: no offsets to read at
    with pytest.raises(SourceError, match="cannot be read as a tar archive"):
        ImageArchiveSource(shards / "00000.tar", 8, inputs)


def test_loose_images_come_before_archives_and_an_archive_file_is_read_alone(shards, inputs):
    with Pipeline(models.convnet(), device="cpu") as pipe:
        assert isinstance(open_source(shards / "00001.tar", pipe, 4, size=(16, 12)), ImageArchiveSource)
        Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(shards / "loose.png")
        assert not isinstance(open_source(shards, pipe, 4, size=(16, 12)), ImageArchiveSource)


def test_ortpipe_run_over_shards_resumes_by_path_past_an_image_left_out(shards, tmp_path, capsys):
    import pyarrow.parquet as pq

    _tar(shards / "00002.tar", [("0007.png", b"not a png"), ("0008.png", _png(8))])
    output = tmp_path / "scores.parquet"
    argv = ["run", "convnet", "--input", str(shards), "--size", "16x12", "--batch-size", "2", "--no-progress"]
    argv += ["--skip-unreadable", "--output", str(output)]
    assert main([*argv, "--limit", "6"]) == 0
    assert "images in 3 tar archive(s)" in capsys.readouterr().out
    assert main([*argv, "--resume"]) == 0
    assert "00002.tar/0007.png' cannot be read as an image" in capsys.readouterr().err
    keys = pq.read_table(output)["key"].to_pylist()
    assert keys == ["0000", "0001", "0002", "0003", "0004", "day2/0005", "day2/0006", "0008"]


@pytest.mark.parametrize(
    "form", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT], ids=["ustar", "gnu", "pax"]
)
def test_plain_headers_are_read_as_tarfile_reads_them_and_anything_else_by_tarfile(tmp_path, form):
    """The reader of plain headers (NOTE [ image archives ]) gives what tarfile gives:
    for short names, folders and a ustar name split into prefix and name, itself; for a
    long name, a link or a cut, it declines and tarfile reads the archive."""
    from pipeline.sources.archives import _image_members, _plain_members, _tarfile_members

    long_folder = "a" * 90 + "/" + "b" * 60  # 151 characters: a ustar prefix, a GNU or PAX long name
    path = tmp_path / "shard.tar"
    with tarfile.open(path, "w", format=form) as tar:
        folder = tarfile.TarInfo("day1")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for name in ("day1/0001.jpg", "day1/0001.json", "0002.png", "._0003.jpg"):
            info = tarfile.TarInfo(name)
            info.size = 700 + len(name)
            tar.addfile(info, io.BytesIO(bytes(info.size)))
    assert _plain_members(path) is not None  # every header plain
    assert (
        list(_image_members(path))
        == list(_tarfile_members(path))
        == [
            (1024, 713, "day1/0001.jpg"),
            (4096, 708, "0002.png"),
        ]
    )
    prefixed = tmp_path / "prefixed.tar"
    with tarfile.open(prefixed, "w", format=form) as tar:
        info = tarfile.TarInfo(f"{long_folder}/0005.jpg")
        info.size = 10
        tar.addfile(info, io.BytesIO(bytes(10)))
    plain = _plain_members(prefixed)
    assert (plain is not None) == (form == tarfile.USTAR_FORMAT)  # ustar splits the name; GNU and PAX extend it
    assert list(_image_members(prefixed)) == list(_tarfile_members(prefixed))
    assert [name for _, _, name in _image_members(prefixed)] == [f"{long_folder}/0005.jpg"]
    with tarfile.open(path, "a", format=form) as tar:
        info = tarfile.TarInfo(f"{long_folder}/0004.jpg")
        info.size = 10
        tar.addfile(info, io.BytesIO(bytes(10)))
        link = tarfile.TarInfo("latest.jpg")
        link.type, link.linkname = tarfile.SYMTYPE, "0002.png"
        tar.addfile(link)
    assert _plain_members(path) is None  # a link (and, but in ustar, a long name): tarfile's to read
    names = [name for _, _, name in _image_members(path)]
    assert names == ["day1/0001.jpg", "0002.png", f"{long_folder}/0004.jpg"]
    assert list(_image_members(path)) == list(_tarfile_members(path))


def test_a_shard_of_archives_is_a_contiguous_group_of_the_files():
    files = [f"{i:05d}.tar" for i in range(5)]
    groups = [shard_of(files, (k, 3)) for k in range(3)]
    assert groups == [files[:1], files[1:3], files[3:]]  # together every file once, in order
    assert [len(shard_of(files, (k, 8))) for k in range(8)] == [0, 1, 0, 1, 1, 0, 1, 1]  # N past the files
    for bad in ((2, 2), (-1, 2), (0, 0)):
        with pytest.raises(SourceError, match="a shard is K/N with 0 <= K < N"):
            shard_of(files, bad)


def test_a_shard_reads_its_own_archives_and_never_opens_the_others(shards, inputs):
    """N processes of a --shard each index only their own files (NOTE [ image archives ])."""
    _tar(shards / "00002.tar", [("0007.png", _png(7)), ("0008.png", _png(8))])
    _, whole, _ = _rows(ImageArchiveSource(shards, 4, inputs, size=(16, 12)))
    parts = [ImageArchiveSource(shards, 4, inputs, size=(16, 12), shard=(k, 2)) for k in range(2)]
    assert [p.archives for p in parts] == [[shards / "00000.tar"], [shards / "00001.tar", shards / "00002.tar"]]
    assert [p.archives_found for p in parts] == [3, 3]
    assert _rows(parts[0])[1] + _rows(parts[1])[1] == whole
    (shards / "00001.tar").write_bytes(b"not a tar archive at all" * 40)  # shard 1's: shard 0 never reads it
    assert len(ImageArchiveSource(shards, 4, inputs, size=(16, 12), shard=(0, 2))) == 5
    with pytest.raises(SourceError, match="00001.tar' cannot be read as a tar archive"):
        ImageArchiveSource(shards, 4, inputs, size=(16, 12), shard=(1, 2))


def test_ortpipe_run_shards_a_folder_of_archives_by_file(shards, tmp_path, capsys):
    import pyarrow.parquet as pq

    _tar(shards / "00002.tar", [("0007.png", _png(7)), ("0008.png", _png(8))])
    argv = ["run", "convnet", "--input", str(shards), "--size", "16x12", "--batch-size", "2", "--no-progress"]
    assert main([*argv, "--output", str(tmp_path / "all.parquet")]) == 0
    keys = []
    for k in range(2):
        output = tmp_path / f"shard{k}.parquet"
        assert main([*argv, "--shard", f"{k}/2", "--output", str(output), "--limit", "1"]) == 0
        assert main([*argv, "--shard", f"{k}/2", "--output", str(output), "--resume"]) == 0  # resumed in its shard
        keys += pq.read_table(output)["key"].to_pylist()
    out = capsys.readouterr().out
    assert "images in 1 of the 3 tar archive(s), shard 0/2, of" in out
    assert "images in 2 of the 3 tar archive(s), shard 1/2, of" in out
    assert keys == pq.read_table(tmp_path / "all.parquet")["key"].to_pylist()
    assert main([*argv, "--shard", "0/4", "--output", str(tmp_path / "none.parquet")]) == 0  # 3 files, 4 shards
    assert "no rows to run: shard 0/4 of the 3 tar archive(s) of" in capsys.readouterr().err
    assert not (tmp_path / "none.parquet").exists()
    one = ["--input", str(shards / "00000.tar"), "--output"]  # one archive: split by its rows
    assert main([*argv[:2], *one, str(tmp_path / "rows.parquet"), *argv[4:], "--shard", "1/2"]) == 0
    assert pq.read_table(tmp_path / "rows.parquet")["key"].to_pylist() == ["0002", "0003", "0004"]


@pytest.mark.parametrize("plain_headers", [True, False], ids=["plain", "tarfile"])
def test_links_and_names_outside_the_archive_have_no_row_and_are_counted(tmp_path, inputs, capsys, plain_headers):
    """Issue 34, item 8: an image member that is a link, or named outside the archive, is left out
    and said; a name is made plain (``./a.png`` is ``a.png``)."""
    archive = tmp_path / "a.tar"
    members = [("./a.png", _png(1)), ("../../evil.png", _png(2)), ("b/../../c.png", _png(3)), ("d.png", _png(4))]
    with tarfile.open(archive, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if not plain_headers:  # a link's header is not a plain one: tarfile reads the archive
            for kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                link = tarfile.TarInfo(f"link{kind.decode()}.png")
                link.type, link.linkname = kind, "d.png"
                tar.addfile(link)
    source = ImageArchiveSource(archive, 8, inputs, size=(16, 16))
    _, paths, keys = _rows(source)
    assert paths == [f"{archive}/a.png", f"{archive}/d.png"] and keys == ["a", "d"]
    (note,) = source.notes()
    left = 4 if not plain_headers else 2
    assert f"left out {left} image member(s)" in note and "'../../evil.png'" not in note  # named with the archive
    assert f"{archive}/../../evil.png': its name is outside the archive" in note
    output = tmp_path / "o.parquet"
    argv = ["run", "convnet", "--input", str(archive), "--output", str(output), "--size", "16x16", "--no-progress"]
    assert main(argv) == 0
    assert capsys.readouterr().err.count(f"note: left out {left} image member(s)") == 1

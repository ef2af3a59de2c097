"""Tag the images of a data set kept as WebDataset shards, and the same images as
Hugging Face keeps them, in Parquet files that hold the images themselves.

    python examples/image_shards.py [OUTDIR]

Makes ``shards/00000.tar`` and ``shards/00001.tar`` (``KEY.jpg`` beside
``KEY.json``, as img2dataset writes them) and ``hf/train-0000N-of-00002.parquet``
(an ``image`` column of ``{bytes, path}`` structs), and a tiny ONNX classifier
(the mean of each colour channel is its logit).  Each image is read where it
lies - at its offset in its archive, from its row group - centre-cropped to
the model's 64x64, and only the best class and its probability come back from
the device, written with the class's name.  From the shell:

    ortpipe run classifier.onnx --input shards/ --fit crop --top-k 1 --softmax --labels colours.txt \\
        --output tags.parquet
    ortpipe run classifier.onnx --input hf/ --image-column image --fit crop --top-k 1 --softmax \\
        --labels colours.txt --output hf_tags.parquet
"""

from __future__ import annotations

import io
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pyarrow as pa
import pyarrow.parquet as pq
from onnx import TensorProto, helper
from PIL import Image

from pipeline import Pipeline, Preprocess, models
from pipeline.heads import with_top_k
from pipeline.jobs import run_job
from pipeline.sinks import LabelledSink, ParquetSink
from pipeline.sources import ImageArchiveSource, ImageTableSource

COLOURS = ("red", "green", "blue")
PER_SHARD = 6


def mean_colour_classifier(path: Path) -> Path:
    """float32 NCHW 64x64 frames in, one logit a channel out: the channel's mean."""
    frames = helper.make_tensor_value_info("frames", TensorProto.FLOAT, ["N", 3, 64, 64])
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])
    mean = helper.make_node("ReduceMean", ["frames"], ["logits"], axes=[2, 3], keepdims=0)
    graph = helper.make_graph([mean], "mean_colour", [frames], [logits])
    # onnx writes IR 14 by default, which onnxruntime 1.31 refuses (NOTE [ IR version ] in pipeline.models)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=models.IR_VERSION), path)
    return path


def photo(index: int) -> tuple[str, bytes]:
    """A 120x90 JPEG mostly of colour ``index % 3``, and that colour's name."""
    pixels = np.random.default_rng(index).normal(90, 30, (90, 120, 3))
    pixels[..., index % 3] += 90
    buffer = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buffer, format="JPEG", quality=90)
    return COLOURS[index % 3], buffer.getvalue()


def make_data(folder: Path) -> tuple[Path, Path, dict[str, str]]:
    """Two tar shards and two Parquet files of the same images; each key's colour."""
    (folder / "shards").mkdir(parents=True, exist_ok=True)
    (folder / "hf").mkdir(parents=True, exist_ok=True)
    truth = {}
    for shard in range(2):
        rows = []
        with tarfile.open(folder / "shards" / f"{shard:05d}.tar", "w") as tar:
            for index in range(shard * PER_SHARD, (shard + 1) * PER_SHARD):
                colour, jpeg = photo(index)
                key = f"{index:09d}"
                truth[key] = colour
                for name, data in ((f"{key}.jpg", jpeg), (f"{key}.json", b'{"source": "example"}')):
                    member = tarfile.TarInfo(name)
                    member.size = len(data)
                    tar.addfile(member, io.BytesIO(data))
                rows.append({"bytes": jpeg, "path": f"{key}.jpg"})
        image = pa.array(rows, pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
        pq.write_table(pa.table({"image": image}), folder / "hf" / f"train-{shard:05d}-of-00002.parquet")
    return folder / "shards", folder / "hf", truth


def main(outdir: str | None = None) -> Path:
    folder = Path(outdir or tempfile.mkdtemp(prefix="ortpipe-shards-"))
    shards, hf, truth = make_data(folder)
    best = with_top_k(mean_colour_classifier(folder / "classifier.onnx"), "logits", 1, softmax=True)
    frames = Preprocess(scale=1 / 255, layout="nhwc")  # uint8 HWC in, float NCHW on the device
    outputs = []
    with Pipeline(best, device="auto", depth=3, preprocess=frames) as pipe:
        for name, source in (
            ("tags", ImageArchiveSource(shards, 4, pipe.source_inputs, size=(64, 64), fit="crop")),
            ("hf_tags", ImageTableSource(hf, "image", 4, pipe.source_inputs, size=(64, 64), fit="crop")),
        ):
            output = folder / f"{name}.parquet"
            print(run_job(pipe, source, LabelledSink(ParquetSink(output), "logits_top1_index", COLOURS)))
            outputs.append(output)
    shard_tags = pq.read_table(outputs[0])
    tags = shard_tags["logits_top1_label"].to_pylist()
    right = sum(truth[key] == tag for key, tag in zip(shard_tags["key"].to_pylist(), tags, strict=True))
    hf_tags = pq.read_table(outputs[1])
    same = hf_tags["logits_top1_label"].to_pylist() == tags
    print(f"wrote {outputs[0]}: {shard_tags.num_rows} images of 2 shards, {right} tagged right")
    print(f"wrote {outputs[1]}: the same images from {hf.name}/, the same tags: {same}")
    return outputs[0]


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)

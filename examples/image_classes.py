"""Evaluate a classifier on a folder of photos sorted into one folder a class, as ImageNet's.

    python examples/image_classes.py [OUTDIR]

Makes ``photos/red/``, ``photos/green/`` and ``photos/blue/``, each with
large JPEGs mostly of its colour (and ``__MACOSX/`` junk beside them, as a
zip made on a Mac holds, which is left out), and a tiny ONNX classifier: the
mean of each colour channel is its logit.  The folder is read at any depth,
each JPEG decoded at a fraction of its size (``jpeg_draft``: 1/8 here, still
more than the 64x64 the model takes), and every row's ``path`` names its
class folder, so the accuracy is a group-by away.  Each photo is read as
ImageNet's evaluation reads one: resized keeping its shape, and the middle
kept (``fit="crop:0.875"``, torchvision's Resize then CenterCrop).  Only the
best class of a row and its probability come back from the device (TopK
after a Softmax appended to the graph: ``with_top_k``), written with the
class's name (``LabelledSink``).  The same from the shell:

    ortpipe run classifier.onnx --input photos/ --size 64x64 --fit crop:0.875 --jpeg-draft \
        --top-k 1 --softmax --labels classes.txt --output scores.parquet
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pyarrow.parquet as pq
from onnx import TensorProto, helper
from PIL import Image

from pipeline import Pipeline, Preprocess, models
from pipeline.heads import with_top_k
from pipeline.jobs import run_job
from pipeline.sinks import LabelledSink, ParquetSink
from pipeline.sources import ImageFolderSource

CLASSES = ("red", "green", "blue")
PER_CLASS = 6


def mean_colour_classifier(path: Path) -> Path:
    """float32 NCHW frames in, one logit a channel out: the channel's mean."""
    frames = helper.make_tensor_value_info("frames", TensorProto.FLOAT, ["N", 3, 64, 64])
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])
    mean = helper.make_node("ReduceMean", ["frames"], ["logits"], axes=[2, 3], keepdims=0)
    graph = helper.make_graph([mean], "mean_colour", [frames], [logits])
    # onnx writes IR 14 by default, which onnxruntime 1.31 refuses (NOTE [ IR version ] in pipeline.models)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=models.IR_VERSION)
    onnx.save(model, path)
    return path


def make_photos(folder: Path) -> None:
    rng = np.random.default_rng(0)
    for channel, name in enumerate(CLASSES):
        (folder / name).mkdir(parents=True, exist_ok=True)
        for index in range(PER_CLASS):
            pixels = rng.normal(90, 40, (1200, 1600, 3))
            pixels[..., channel] += 80  # mostly of its class's colour
            Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(folder / name / f"{index}.jpg", quality=85)
    junk = folder / "__MACOSX" / "red"
    junk.mkdir(parents=True, exist_ok=True)
    (junk / "._0.jpg").write_bytes(b"a resource fork, not a JPEG")


def main(outdir: str | None = None) -> Path:
    folder = Path(outdir or tempfile.mkdtemp(prefix="ortpipe-classes-"))
    photos = folder / "photos"
    make_photos(photos)
    model = mean_colour_classifier(folder / "classifier.onnx")
    output = folder / "scores.parquet"
    frames = Preprocess(scale=1 / 255, layout="nhwc")  # uint8 HWC in, float NCHW on the device
    best = with_top_k(model, "logits", 1, softmax=True)  # logits_top1 (a probability), logits_top1_index
    with Pipeline(best, device="auto", depth=3, preprocess=frames) as pipe:
        source = ImageFolderSource(photos, 8, pipe.source_inputs, size=(64, 64), jpeg_draft=True, fit="crop:0.875")
        print(run_job(pipe, source, LabelledSink(ParquetSink(output), "logits_top1_index", CLASSES)))
    table = pq.read_table(output)
    truth = [Path(path).parent.name for path in table["path"].to_pylist()]
    predicted = table["logits_top1_label"].to_pylist()  # one value a row: a plain column
    right = sum(t == p for t, p in zip(truth, predicted, strict=True))
    print(f"wrote {output}: {table.num_rows} photos of {len(set(truth))} classes, top-1 {right / len(truth):.0%}")
    return output


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)

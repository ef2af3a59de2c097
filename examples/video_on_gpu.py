"""Video on the GPU end to end: frames decoded where the decoder leaves them and converted
there, one kernel a frame, straight into the model's input slot.

    python examples/video_on_gpu.py [OUTDIR]

On a GPU with NVDEC, PyAV's hardware frames are taken through DLPack and never downloaded
(``hwaccel="cuda"``, as ``ortpipe run VIDEO --hwaccel cuda`` does by default).  Elsewhere the
host device runs the same path on its model of a GPU decoder - the CPU decoder's NV12 planes
in a pool of "device" surfaces - so the example runs anywhere and says which way it went.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

from pipeline import HostDevice, Pipeline, Preprocess, models, resolve_device
from pipeline.devices import cuda_unavailable_reason
from pipeline.jobs import run_job
from pipeline.sinks import ParquetSink
from pipeline.sources import VideoDecoding, VideoSource, device_decoding_unavailable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from video_frames import make_video  # the pattern clip of the single-video example


def main(outdir: str | None = None) -> Path:
    folder = Path(outdir or tempfile.mkdtemp(prefix="ortpipe-video-gpu-"))
    video = make_video(folder / "pattern.mp4")
    output = folder / "frames.parquet"
    gpu = cuda_unavailable_reason(0) is None
    device = resolve_device("cuda") if gpu else HostDevice(link_gbps=12.0)
    hwaccel = "cuda:0" if gpu else None
    why_not = device_decoding_unavailable(device, hwaccel or "cuda")
    print(f"{device.name}: frames converted on the device: {why_not or 'yes'}")
    preprocess = Preprocess(scale=1 / 255, layout="nhwc")  # uint8 frames in, the model's floats made there
    with Pipeline(models.convnet(), device=device, depth=3, preprocess=preprocess) as pipe:
        source = VideoSource(video, 16, pipe.source_inputs, decoding=VideoDecoding(hwaccel=hwaccel))
        summary = run_job(pipe, source, ParquetSink(output), decode_on_device=True)
    table = pq.read_table(output)
    print(f"{video.name}: {summary}")
    print(f"wrote {output}: {table.num_rows} rows, columns {table.column_names}")
    return output


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)

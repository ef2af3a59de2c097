"""Secrets said nowhere (NOTE [ secrets said nowhere ], issue 56): a job whose input URL carries a
password and a signature, and whose FFmpeg options carry a header, writes neither to any line it
prints nor to any file it leaves - output, job record, --stats, --trace."""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest

from pipeline.util.redact import redacted, redacted_options

from ..helpers import encode_video
from ..streaming import Quiet, serving

av = pytest.importorskip("av", reason="needs PyAV: pip install 'ortpipe[video]'")

SECRETS = ("S3cretPass", "T0kenSecret", "HeaderSecret", "AmzSignatureSecret")


def _said_nowhere(texts: list[str], folder) -> None:
    for secret in SECRETS:
        for text in texts:
            assert secret not in text, text
        for path in folder.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path


def test_a_served_video_with_a_token_in_its_url_runs_and_says_the_token_nowhere(tmp_path):
    (tmp_path / "served").mkdir()
    clip = encode_video(tmp_path / "served" / "clip.mp4", "mpeg4", {}, frames=24, size=32)
    out = tmp_path / "out"
    out.mkdir()
    handler = functools.partial(Quiet, directory=str(clip.parent))
    with serving(handler) as base:  # type: ignore[arg-type]
        url = f"{base}/clip.mp4?token=T0kenSecret&X-Amz-Signature=AmzSignatureSecret"
        command = [sys.executable, "-m", "pipeline.cli", "run", "convnet", "--input", url, "--output",
                   str(out / "frames.parquet"), "--batch-size", "8", "--stats", str(out / "stats.json"),
                   "--trace", str(out / "trace.json"), "--video-option", "headers=X-Key: HeaderSecret",
                   "--no-progress"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (out / "frames.parquet").exists() and (out / ".frames.parquet.ortpipe-job.json").exists()
    assert "token=***" in done.stdout + done.stderr
    _said_nowhere([done.stdout, done.stderr], out)


def test_a_camera_url_with_a_password_is_refused_saying_no_password(tmp_path):
    url = "rtsp://admin:S3cretPass@127.0.0.1:9/stream1?token=T0kenSecret"
    command = [sys.executable, "-m", "pipeline.cli", "run", "convnet", "--input", url, "--output",
               str(tmp_path / "o.parquet"), "--stream-timeout", "2", "--no-progress"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "rtsp://***@127.0.0.1:9/stream1?token=***" in done.stderr
    _said_nowhere([done.stdout, done.stderr], tmp_path)


def test_redacted_urls_and_options():
    assert redacted("see 'https://u:p@h/x?a=1&sig=S&X-Amz-Credential=C' and /a/b") == (
        "see 'https://***@h/x?a=1&sig=***&X-Amz-Credential=***' and /a/b"
    )
    assert redacted("s3://bucket/key.parquet") == "s3://bucket/key.parquet"
    assert redacted_options({"headers": "Authorization: x", "rtsp_transport": "tcp"}) == {
        "headers": "***",
        "rtsp_transport": "tcp",
    }

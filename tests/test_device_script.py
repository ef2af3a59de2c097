"""``benchmarks/device.sh``: the wheels bundled and split into parts here
come back whole there, whatever order the parts arrive in, and a missing or
damaged part is named before anything is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "device.sh"

pytestmark = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("bash", "split", "sha256sum", "tar", "xz")),
    reason="needs bash and coreutils",
)


def _script(*args: str, whl: Path, store: Path, site: Path | None = None) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "WHL_DIR": str(whl),
        "STORE": str(store),
        "SITE": str(site or store / "site"),
        "PART_SIZE": "100K",
    }
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def _carry(whl: Path, there: Path, index: str) -> Path:
    """What one call over there sees: a copy of the repo's .whl with one part in it."""
    shutil.rmtree(there, ignore_errors=True)
    shutil.copytree(whl / index, there / index)
    return there


@pytest.fixture
def wheel(tmp_path) -> Path:
    path = tmp_path / "onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_27_x86_64.whl"
    path.write_bytes(os.urandom(250 * 1024))  # three parts of 100 KiB
    return path


def test_parts_sent_one_per_call_in_any_order_assemble_to_the_wheel(tmp_path, wheel):
    whl, store, there = tmp_path / "whl", tmp_path / "store", tmp_path / "there"
    split = _script("split", str(wheel), whl=whl, store=store)
    assert split.returncode == 0, split.stderr
    assert "3 parts" in split.stdout
    for index in ("02", "00", "02", "01"):  # out of order, one sent twice
        sent = _script("append", whl=_carry(whl, there, index), store=store)
        assert sent.returncode == 0, sent.stderr
        assert f"stored part {index} of 3" in sent.stdout
    assembled = _script("assemble", whl=there, store=store)
    assert assembled.returncode == 0, assembled.stderr
    assert Path(assembled.stdout.strip()).read_bytes() == wheel.read_bytes()


def test_a_missing_part_is_named(tmp_path, wheel):
    whl, store, there = tmp_path / "whl", tmp_path / "store", tmp_path / "there"
    assert _script("split", str(wheel), whl=whl, store=store).returncode == 0
    for index in ("00", "02"):
        assert _script("append", whl=_carry(whl, there, index), store=store).returncode == 0
    result = _script("assemble", whl=there, store=store)
    assert result.returncode != 0
    assert "parts missing" in result.stderr and "01 (of 3)" in result.stderr


def test_a_damaged_part_fails_the_checksum(tmp_path, wheel):
    whl, store, there = tmp_path / "whl", tmp_path / "store", tmp_path / "there"
    assert _script("split", str(wheel), whl=whl, store=store).returncode == 0
    for index in ("00", "01", "02"):
        assert _script("append", whl=_carry(whl, there, index), store=store).returncode == 0
    (store / "01.part").write_bytes(b"not the bytes that were sent")
    result = _script("assemble", whl=there, store=store)
    assert result.returncode != 0 and "does not match its sha256" in result.stderr


def test_check_with_nothing_stored_says_so(tmp_path):
    result = _script("check", whl=tmp_path / "whl", store=tmp_path / "store")
    assert result.returncode != 0
    assert "no part carried" in result.stdout and "run append first" in result.stderr


def test_wheels_bundled_split_and_installed_come_out_as_pip_lays_them(tmp_path):
    """The wheels unpacked into one tar.xz here, carried in parts, unpacked into the site there."""
    wheels = []
    for name, files in (
        (
            "onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_27_x86_64.whl",
            {"onnxruntime/capi/lib.so": os.urandom(300_000)},
        ),
        ("av-18.1.0-cp311-abi3-manylinux_2_28_x86_64.whl", {"av/__init__.py": b"x = 1\n", "av.libs/ff.so": b"ff"}),
    ):
        wheels.append(tmp_path / name)
        with zipfile.ZipFile(wheels[-1], "w") as archive:
            for inner, data in files.items():
                archive.writestr(inner, data)
    whl, store, there, site = tmp_path / "whl", tmp_path / "store", tmp_path / "there", tmp_path / "site"
    bundle = tmp_path / "bundle.tar.xz"
    assert _script("bundle", str(bundle), *map(str, wheels), whl=whl, store=store).returncode == 0
    split = _script("split", str(bundle), whl=whl, store=store)
    assert split.returncode == 0, split.stderr
    parts = sorted(path.name for path in whl.iterdir())
    assert len(parts) >= 2, split.stdout  # random bytes do not compress: 300 KB is three parts of 100 KiB
    for index in parts:
        assert _script("append", whl=_carry(whl, there, index), store=store).returncode == 0
    installed = _script("install", whl=there, store=store, site=site)
    assert installed.returncode == 0, installed.stderr
    with zipfile.ZipFile(wheels[0]) as archive:
        assert (site / "onnxruntime/capi/lib.so").read_bytes() == archive.read("onnxruntime/capi/lib.so")
    assert (site / "av/__init__.py").read_text() == "x = 1\n" and (site / "av.libs/ff.so").read_bytes() == b"ff"

"""``benchmarks/device.sh``: the wheel split into parts here comes back whole
there, whatever order the parts arrive in, and a missing or damaged part
is named before anything is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "device.sh"

pytestmark = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("bash", "split", "sha256sum")), reason="needs bash and coreutils"
)


def _script(*args: str, whl: Path, store: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "WHL_DIR": str(whl), "STORE": str(store), "PART_SIZE": "100K"}
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


def test_an_extra_wheel_carried_whole_is_stored_beside_the_parts(tmp_path, wheel):
    """PyAV's wheel fits in one call: carried as .whl/extra, stored for check to install."""
    whl, store, there = tmp_path / "whl", tmp_path / "store", tmp_path / "there"
    assert _script("split", str(wheel), whl=whl, store=store).returncode == 0
    extra = there / "extra"
    extra.mkdir(parents=True)
    (extra / "av-18.1.0-cp311-abi3-manylinux_2_28_x86_64.whl").write_bytes(b"a wheel")
    sent = _script("append", whl=there, store=store)
    assert sent.returncode == 0, sent.stderr
    assert "stored extra wheel av-18.1.0-cp311-abi3-manylinux_2_28_x86_64.whl" in sent.stdout
    assert (store / "extra" / "av-18.1.0-cp311-abi3-manylinux_2_28_x86_64.whl").read_bytes() == b"a wheel"

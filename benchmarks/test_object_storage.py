"""Issue 40's figure: 1,000,000 rows scored from object storage into object storage against the
same job local to local, on the same machine, as whole ``ortpipe run`` commands taking turns.

The store is a SeaweedFS S3 server on 127.0.0.1 (``tests/object_store.py``): no network
between them, so what the ratio shows is the cost of going through S3's API (requests,
multipart uploads, the server's own work on the same CPUs), not a network's.  Each run's
``--stats`` says where its time went (the source's reads, the take's writes).

And how much of a store's latency the run hides: the same s3->s3 job through a proxy
(``tests/store_proxy.py``) that holds every read of the input and every upload of a piece of
the output for ``HOLD_S``, against the job through the proxy with no hold, alternated.  A job
that waited on each held request would take their count times ``HOLD_S`` longer; what it
takes longer over that is the share of the latency the run did not hide (pyarrow reads the
row groups ahead; the output's pieces go up in the background as a part fills, its last
piece and the upload's completion at the part's close).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from test_host_share import FEATURES, logistic_regression  # benchmarks/ is on the path (rootdir conftest)

ROOT = Path(__file__).resolve().parents[1]
ROWS = 1_000_000
ROUNDS = 3


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    sys.path.insert(0, str(ROOT))
    from tests.object_store import object_store

    with object_store(tmp_path_factory.mktemp("store")) as server:
        server.bucket("bench")
        yield server


@pytest.fixture(scope="module")
def inputs(store, tmp_path_factory):
    """The input, local and in the store, in row groups of 65,536 rows, and the model."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path_factory.mktemp("inputs")
    x = np.random.default_rng(2).standard_normal((ROWS, FEATURES)).astype(np.float32)
    table = pa.table({"id": np.arange(ROWS), **{f"f{i}": x[:, i] for i in range(FEATURES)}})
    pq.write_table(table, folder / "x.parquet", row_group_size=65_536)
    pq.write_table(table, "bench/x.parquet", filesystem=store.filesystem(), row_group_size=65_536)
    model = folder / "logreg.onnx"
    onnx.save(logistic_regression(), model)
    return folder / "x.parquet", model


def _command(model: Path, source: str, output: str, stats: Path) -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", "run", str(model), "--input", source, "--output", output,
            "--overwrite", "--no-progress", "--stats", str(stats)]  # fmt: skip


def test_s3_to_s3_against_local_to_local(benchmark, store, inputs, tmp_path):
    import pyarrow.parquet as pq

    local_input, model = inputs
    env = {**os.environ, **store.environment, "PYTHONPATH": str(ROOT)}
    runs = {
        "local": _command(model, str(local_input), str(tmp_path / "out"), tmp_path / "local.json"),
        "s3": _command(model, "s3://bench/x.parquet", "s3://bench/out/", tmp_path / "s3.json"),
    }
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    stages: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
    for command in runs.values():  # warmed up: the page cache, the server's first volume
        subprocess.run(command, check=True, capture_output=True, env=env)
    for _ in range(ROUNDS):
        for name, command in runs.items():
            start = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True, env=env)
            seconds[name].append(time.perf_counter() - start)
            stats = json.loads(Path(command[command.index("--stats") + 1]).read_text())
            stages[name].append({stage: ms * stats["batches"] / 1e3 for stage, ms in stats["stage_ms"].items() if ms})
    assert pq.read_table("bench/out", filesystem=store.filesystem()).num_rows == ROWS
    ratios = sorted(s3 / local for s3, local in zip(seconds["s3"], seconds["local"], strict=True))
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    benchmark.extra_info.update(
        s3_over_local_median=statistics.median(ratios),
        s3_over_local_range=[ratios[0], ratios[-1]],
        seconds=seconds,
        stage_seconds={name: stages[name][-1] for name in runs},
    )
    print(f"\ns3->s3 / local->local: {statistics.median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f}); {seconds}")
    for name in runs:
        print(f"{name}: seconds in each stage (last round): {stages[name][-1]}")


#: seconds the proxy holds each read of the input and each upload of a piece of the output
HOLD_S = 0.05


def test_the_latency_of_the_store_hidden_by_the_run(benchmark, store, inputs, tmp_path):
    from tests.store_proxy import store_proxy

    _, model = inputs

    def held(method: str, path: str) -> bool:
        return (method == "GET" and "/bench/x.parquet" in path) or (method == "PUT" and "partNumber=" in path)

    seconds: dict[str, list[float]] = {"no hold": [], "held": []}
    count: list[int] = []
    with store_proxy(store.endpoint, delay_s=HOLD_S, slow=held) as proxy:
        env = {**os.environ, **store.environment, "AWS_ENDPOINT_URL": proxy.endpoint, "PYTHONPATH": str(ROOT)}
        command = _command(model, "s3://bench/x.parquet", "s3://bench/held/", tmp_path / "held.json")
        subprocess.run(command, check=True, capture_output=True, env=env)  # warmed up
        for _ in range(ROUNDS):
            for name in seconds:
                proxy.delay_s = HOLD_S if name == "held" else 0.0
                before = len(proxy.requests)
                start = time.perf_counter()
                subprocess.run(command, check=True, capture_output=True, env=env)
                seconds[name].append(time.perf_counter() - start)
                if name == "held":
                    count.append(sum(held(r.method, r.path) for r in proxy.requests[before:]))
    extra = statistics.median(seconds["held"]) - statistics.median(seconds["no hold"])
    serial = statistics.median(count) * HOLD_S
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    benchmark.extra_info.update(seconds=seconds, held_requests=count, extra_s=extra, serial_s=serial)
    print(
        f"\n{statistics.median(count):.0f} requests held {HOLD_S * 1e3:.0f} ms each "
        f"({serial:.2f} s if waited on in turn): "
        f"the job took {extra:.2f} s longer ({extra / serial:.0%} of it); {seconds}"
    )


#: seconds the proxy holds every request in the small-parts job (a store's round trip)
ROUND_TRIP_S = 0.03


def test_small_objects_in_one_request_against_pyarrows_default(benchmark, store, inputs, tmp_path, monkeypatch):
    """NOTE [ one request for a small object ]: a job whose parts are smaller than a piece
    (200,000 rows in parts of 20,000, then ``_SUCCESS`` and the job's record) into a store
    that holds every request ``ROUND_TRIP_S``, with ortpipe's output streams (opened without a
    request) against pyarrow's default (a multipart upload started at each open), in turns,
    in this process: the requests each sends and the job's seconds."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    from pipeline.cli import main
    from tests.store_proxy import store_proxy

    local_input, model = inputs
    small = tmp_path / "small.parquet"
    pq.write_table(pq.read_table(local_input).slice(0, 200_000), small)
    made = pafs.S3FileSystem

    def opened_at_once(**options: object) -> pafs.S3FileSystem:  # pyarrow's default
        return made(**{**options, "allow_delayed_open": False})

    for name, value in store.environment.items():
        monkeypatch.setenv(name, value)
    seconds: dict[str, list[float]] = {"ortpipe": [], "pyarrow default": []}
    requests: dict[str, int] = {}
    with store_proxy(store.endpoint, delay_s=ROUND_TRIP_S, slow=lambda method, path: True) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        for _ in range(ROUNDS):
            for name in seconds:
                monkeypatch.setattr(pafs, "S3FileSystem", made if name == "ortpipe" else opened_at_once)
                before = len(proxy.requests)
                argv = ["run", str(model), "--input", str(small), "--output", f"s3://bench/small-{name[0]}/",
                        "--overwrite", "--no-progress", "--part-rows", "20000"]  # fmt: skip
                start = time.perf_counter()
                assert main(argv) == 0
                seconds[name].append(time.perf_counter() - start)
                requests[name] = len(proxy.requests) - before
    ratios = sorted(a / b for a, b in zip(seconds["pyarrow default"], seconds["ortpipe"], strict=True))
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    benchmark.extra_info.update(seconds=seconds, requests=requests, ratio_median=statistics.median(ratios))
    print(
        f"\nrequests: {requests}; pyarrow's default / ortpipe's: {statistics.median(ratios):.2f}x "
        f"({ratios[0]:.2f}-{ratios[-1]:.2f}); {seconds}"
    )

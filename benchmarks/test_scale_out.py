"""Scale-out: ortpipe on Ray Data against Ray Data's documented pattern, and
``ortpipe run --ray`` against ``ortpipe run``.

* ``map_batches`` with :class:`pipeline.ray.Predictor` on one actor, against the
  pattern of Ray Data's batch-inference guide (a callable class that makes an
  ORT session in ``__init__`` and calls ``session.run`` on each batch) on the
  same actor pool and batch size, over a 1,000,000-row, 20-column float32
  Parquet file and a cheap linear model.  Goal: >= 1.0x.
* ``ortpipe run --ray`` against ``ortpipe run`` on the same file, both as whole
  commands: the ratio with Ray's start-up (a local cluster started for the run),
  and the job alone on a cluster already up (Ray's own figure of the run).

Contenders alternate (A B A B ...), their ratios and spread in ``extra_info``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

from test_host_share import FEATURES, ROWS, _alternated, _report, logistic_regression  # noqa: E402 - beside this file

BATCH = 65536
ROUNDS = 3


class SessionRunBatch:
    """Ray Data's documented pattern: a session made once per actor, ``session.run`` a batch."""

    def __init__(self, model: str) -> None:
        import onnxruntime as ort

        self.session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = np.stack([batch[f"f{i}"] for i in range(FEATURES)], axis=1)
        (prob,) = self.session.run(None, {"x": x})
        return {"prob": prob}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path_factory.mktemp("scale_out")
    x = np.random.default_rng(3).standard_normal((ROWS, FEATURES)).astype(np.float32)
    columns = {f"f{i}": x[:, i] for i in range(FEATURES)}
    pq.write_table(pa.table(columns), folder / "features.parquet", row_group_size=BATCH)
    onnx.save(logistic_regression(), folder / "logreg.onnx")
    return folder


@pytest.fixture(scope="module")
def cluster():
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


def _job(data, udf, kwargs: dict, batch_format: str) -> float:
    dataset = ray.data.read_parquet(str(data / "features.parquet"))
    start = time.perf_counter()
    scored = dataset.map_batches(
        udf,
        fn_constructor_args=(str(data / "logreg.onnx"),),
        fn_constructor_kwargs=kwargs,
        batch_size=BATCH,
        compute=ray.data.ActorPoolStrategy(size=1),
        num_cpus=1,
        batch_format=batch_format,
    )
    rows = sum(len(block) for block in ray.get(scored.to_arrow_refs()))
    assert rows == ROWS
    return time.perf_counter() - start


def test_predictor_against_rays_documented_pattern(benchmark, cluster, data):
    from pipeline.ray import Predictor

    def theirs() -> None:
        _job(data, SessionRunBatch, {}, "numpy")

    def ours() -> None:
        _job(data, Predictor, {"device": "cpu", "intra_op_threads": 1}, "pyarrow")

    ours()
    a, b = _alternated(theirs, ours, rounds=ROUNDS)
    benchmark.pedantic(ours, rounds=1, iterations=1)
    _report(benchmark, "ray_predictor", a, b)


def test_ortpipe_run_on_ray_against_a_local_run_on_a_cluster_already_up(benchmark, cluster, data, tmp_path):
    """Both in this process (no interpreter start-up), Ray's cluster already running."""
    from pipeline.cli import main

    run = ["run", str(data / "logreg.onnx"), "--input", str(data / "features.parquet"), "--no-progress"]
    run += ["--device", "cpu", "--overwrite"]

    def local() -> None:
        assert main([*run, "--output", str(tmp_path / "o.parquet")]) == 0

    def on_ray() -> None:
        assert main([*run, "--output", str(tmp_path / "ray_out"), "--ray"]) == 0

    on_ray()
    a, b = _alternated(local, on_ray, rounds=ROUNDS)
    benchmark.pedantic(on_ray, rounds=1, iterations=1)
    _report(benchmark, "ortpipe_run_ray_cluster_up", a, b)


def test_ortpipe_run_on_ray_against_a_local_run(benchmark, data, tmp_path):
    run = [sys.executable, "-m", "pipeline.cli", "run", str(data / "logreg.onnx"), "--input"]
    run += [str(data / "features.parquet"), "--no-progress", "--device", "cpu", "--overwrite"]

    def local() -> None:
        subprocess.run([*run, "--output", str(tmp_path / "o.parquet")], check=True, capture_output=True)

    def on_ray() -> None:
        subprocess.run([*run, "--output", str(tmp_path / "ray_out"), "--ray"], check=True, capture_output=True)

    on_ray()
    a, b = _alternated(local, on_ray, rounds=ROUNDS)
    benchmark.pedantic(on_ray, rounds=1, iterations=1)
    _report(benchmark, "ortpipe_run_ray_with_startup", a, b)
    print(
        f"  local {statistics.median(a):.2f} s, --ray {statistics.median(b):.2f} s (a local cluster started each time)"
    )

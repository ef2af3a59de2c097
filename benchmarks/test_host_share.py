"""The host's share: ortpipe against what a user would otherwise write, on the CPU.

* ``pipe.run(x, batch_size)`` on a cheap tabular model (a logistic regression
  over 20 float32 features, 1,000,000 rows) against a loop over
  ``session.run`` on the same slices, joined at the end (NOTE [ direct path ]).
  Goal: >= 1.0x at 4,096 rows a batch, >= 0.9x at 256.
* ``ortpipe run`` with default options over a 1,000,000-row, 20-column float32
  Parquet file into Parquet, against a pyarrow + ``session.run`` script doing
  the same job, both as whole commands (start-up included).  Goal: >= 1.0x.
* ``import pipeline``: goal <= 0.3 s.
* ``pipe.run(x)`` on the emulated link (the host device's model of a GPU) over a
  copy-bound identity, 128 MiB: inputs and outputs registered in place
  (NOTE [ registered windows ]) against both staged through pinned slots.  The
  link is the host device's; the host copies it saves are this machine's.

Each pair alternates (A B A B ...) over several rounds on this machine, and
reports the ratio of each round and their spread in ``extra_info``: a noisy
machine moves both contenders alike within a round.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pipeline import HostDevice, Pipeline, PipelineOptions, models
from pipeline._engine import HostRegistering
from pipeline.models import IR_VERSION, OPSET

ROWS = 1_000_000
FEATURES = 20
ROUNDS = 7

#: the script a user would write for the ortpipe run job
SCRIPT = """
import sys, numpy as np, pyarrow as pa, pyarrow.parquet as pq, onnxruntime as ort
sess = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
writer = None
for batch in pq.ParquetFile(sys.argv[2]).iter_batches(batch_size=65536):
    x = np.stack([column.to_numpy() for column in batch.columns], axis=1)
    (prob,) = sess.run(None, {"x": x})
    table = pa.table({"prob": prob[:, 0]})
    writer = writer or pq.ParquetWriter(sys.argv[3], table.schema)
    writer.write_table(table)
writer.close()
"""


def logistic_regression(features: int = FEATURES) -> onnx.ModelProto:
    """What skl2onnx makes of a LogisticRegression's probability, in plain ops."""
    rng = np.random.default_rng(0)
    weights = numpy_helper.from_array(rng.standard_normal((features, 1)).astype(np.float32), "w")
    bias = numpy_helper.from_array(np.zeros(1, np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["z0"]),
        helper.make_node("Add", ["z0", "b"], ["z"]),
        helper.make_node("Sigmoid", ["z"], ["prob"]),
    ]
    graph = helper.make_graph(
        nodes,
        "logreg",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", features])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 1])],
        [weights, bias],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def _alternated(first, second, rounds: int = ROUNDS) -> tuple[list[float], list[float]]:
    """Seconds of each round of ``first`` and ``second``, run in turn (A B A B ...)."""
    a, b = [], []
    for _ in range(rounds):
        for fn, times in ((first, a), (second, b)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return a, b


def _report(benchmark, name: str, theirs: list[float], ours: list[float]) -> None:
    ratios = sorted(t / o for t, o in zip(theirs, ours, strict=True))
    benchmark.extra_info.update(
        {
            f"{name}_speedup_median": statistics.median(ratios),
            f"{name}_speedup_range": [ratios[0], ratios[-1]],
            f"{name}_theirs_s_median": statistics.median(theirs),
            f"{name}_ours_s_median": statistics.median(ours),
        }
    )
    print(f"\n{name}: ortpipe {statistics.median(ratios):.2f}x (range {ratios[0]:.2f}-{ratios[-1]:.2f})")


@pytest.mark.parametrize("batch_size", [4096, 256])
def test_run_against_a_session_run_loop(benchmark, batch_size):
    model = logistic_regression().SerializeToString()
    x = np.random.default_rng(1).standard_normal((ROWS, FEATURES)).astype(np.float32)
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])

    def loop() -> np.ndarray:
        return np.concatenate([session.run(None, {"x": x[i : i + batch_size]})[0] for i in range(0, ROWS, batch_size)])

    with Pipeline(model, device="cpu") as pipe:

        def piped() -> np.ndarray:
            return pipe.run(x, batch_size=batch_size)["prob"]

        np.testing.assert_allclose(piped(), loop(), rtol=1e-6)  # the same job, warmed up
        theirs, ours = _alternated(loop, piped)
        benchmark.pedantic(piped, rounds=1, iterations=1)
        _report(benchmark, f"run_{batch_size}", theirs, ours)


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path_factory.mktemp("host_share")
    x = np.random.default_rng(2).standard_normal((ROWS, FEATURES)).astype(np.float32)
    pq.write_table(pa.table({f"f{i}": x[:, i] for i in range(FEATURES)}), folder / "features.parquet")
    onnx.save(logistic_regression(), folder / "logreg.onnx")
    return folder / "logreg.onnx", folder / "features.parquet"


def test_ortpipe_run_against_a_pyarrow_script(benchmark, table, tmp_path):
    model, features = table
    script = tmp_path / "score.py"
    script.write_text(SCRIPT)
    ortpipe = [sys.executable, "-m", "pipeline.cli", "run", str(model), "--input", str(features), "--no-progress"]

    def theirs() -> None:
        subprocess.run(
            [sys.executable, str(script), str(model), str(features), str(tmp_path / "s.parquet")], check=True
        )

    def ours() -> None:
        out = tmp_path / "o.parquet"
        subprocess.run([*ortpipe, "--output", str(out), "--overwrite"], check=True, capture_output=True)

    ours()
    a, b = _alternated(theirs, ours, rounds=5)
    benchmark.pedantic(ours, rounds=1, iterations=1)
    _report(benchmark, "ortpipe_run", a, b)


def test_registered_in_place_against_staged_on_the_emulated_link(benchmark):
    features = 16384
    x = np.random.default_rng(3).random((2048, features), np.float32)
    identity = models.identity(features=features)
    device = HostDevice(link_gbps=25.0)
    staged_options, in_place = PipelineOptions(registering=None), PipelineOptions(registering=HostRegistering(1))
    try:
        with (
            Pipeline(identity, device, depth=3, options=staged_options) as staged,
            Pipeline(identity, device, depth=3, options=in_place) as registered,
        ):
            np.testing.assert_array_equal(registered.run(x, batch_size=64)["y"], staged.run(x, batch_size=64)["y"])
            theirs, ours = _alternated(lambda: staged.run(x, batch_size=64), lambda: registered.run(x, batch_size=64))
            assert registered.stats.host_outputs is not None and registered.stats.host_outputs.startswith("written")
            benchmark.pedantic(lambda: registered.run(x, batch_size=64), rounds=1, iterations=1)
        _report(benchmark, "registered_in_place", theirs, ours)
        benchmark.extra_info["registered_in_place_gbps_median"] = x.nbytes / statistics.median(ours) / 1e9
    finally:
        device.close()


def test_import_time(benchmark):
    def imported() -> float:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import time; t = time.perf_counter(); import pipeline; print(time.perf_counter() - t)",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        return float(done.stdout)

    seconds = sorted(imported() for _ in range(5))
    benchmark.pedantic(imported, rounds=1, iterations=1)
    benchmark.extra_info.update(import_s_median=statistics.median(seconds), import_s_range=[seconds[0], seconds[-1]])
    print(f"\nimport pipeline: {statistics.median(seconds):.3f} s (range {seconds[0]:.3f}-{seconds[-1]:.3f})")

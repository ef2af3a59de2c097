"""Bulk scoring of converter-exported classifiers, as whole commands (issue 37's figures).

1,000,000 rows of 8 float32 features and an ``id`` in one Parquet file, scored by:

* ``ortpipe run MODEL --input T.parquet --output O.parquet`` (ZipMap made a tensor at load,
  a column a class: NOTE [ ZipMap ], NOTE [ class columns ]);
* the script a user writes without it: pyarrow reads the table, ``session.run`` in batches of
  65,536 rows, pandas flattens the ZipMap's dicts into a column a class, pyarrow writes it.

Two models, each exported with its converter's defaults: a scikit-learn RandomForest
(skl2onnx, 50 trees of depth 8) and a LightGBM classifier (onnxmltools, 100 trees of 31
leaves), three classes each.  Both commands run as subprocesses, alternated (A B A B ...),
three rounds each; the ratio printed is the script's median seconds over ortpipe's, with
every round's seconds beside it.  The outputs are compared once: the same labels, the
same probabilities within 1e-6.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np
import pytest
from commands import alternated, said_seconds  # benchmarks/commands.py

ROWS, FEATURES, ROUNDS = 1_000_000, 8, 3

USER_SCRIPT = """
import sys
import numpy as np, onnxruntime as ort, pandas as pd, pyarrow as pa, pyarrow.parquet as pq

model, source, target = sys.argv[1:]
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
name = session.get_inputs()[0].name
label_name, probabilities_name = (output.name for output in session.get_outputs())
table = pq.read_table(source)
x = np.column_stack([table[c].to_numpy() for c in table.column_names if c != "id"]).astype(np.float32)
labels, probabilities = [], []
for start in range(0, len(x), 65536):
    label, zipmap = session.run(None, {name: x[start : start + 65536]})
    labels.append(label)
    probabilities.extend(zipmap)
frame = pd.DataFrame(probabilities).add_prefix(probabilities_name + "_")
frame.insert(0, label_name, np.concatenate(labels))
frame.insert(0, "id", table["id"].to_numpy())
pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), target)
"""


def _training(rows: int = 5000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, FEATURES)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.int64) + (x[:, 1] + x[:, 2] > 0.5)


def _exported(kind: str) -> bytes:
    x, y = _training()
    if kind == "forest":
        pytest.importorskip("skl2onnx")
        from skl2onnx import to_onnx
        from sklearn.ensemble import RandomForestClassifier

        forest = RandomForestClassifier(n_estimators=50, max_depth=8, random_state=0).fit(x, y)
        return to_onnx(forest, x[:1]).SerializeToString()
    pytest.importorskip("onnxmltools")
    import lightgbm
    from onnxmltools.convert import convert_lightgbm
    from onnxmltools.convert.common.data_types import FloatTensorType

    booster = lightgbm.LGBMClassifier(n_estimators=100, num_leaves=31, verbose=-1).fit(x, y)
    return convert_lightgbm(booster, initial_types=[("input", FloatTensorType([None, FEATURES]))]).SerializeToString()


def _table(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = np.random.default_rng(1).standard_normal((ROWS, FEATURES)).astype(np.float32)
    pq.write_table(pa.table({"id": np.arange(ROWS), **{f"f{i}": x[:, i] for i in range(FEATURES)}}), path)


def _same_scores(ours: Path, theirs: Path) -> None:
    import pyarrow.parquet as pq

    a, b = pq.read_table(ours), pq.read_table(theirs)
    assert a.column_names == b.column_names, (a.column_names, b.column_names)
    label, *columns = b.column_names[1:]  # id, the label, a column a class
    assert a["id"].equals(b["id"]) and a[label].equals(b[label])
    for name in columns:
        np.testing.assert_allclose(a[name].to_numpy(), b[name].to_numpy(), atol=1e-6)


@pytest.mark.parametrize("kind", ["forest", "lightgbm"])
def test_ortpipe_run_against_a_pandas_script_that_flattens_the_zipmap(benchmark, tmp_path, kind):
    model = tmp_path / f"{kind}.onnx"
    model.write_bytes(_exported(kind))
    source = tmp_path / "rows.parquet"
    _table(source)
    script = tmp_path / "score.py"
    script.write_text(USER_SCRIPT)
    ours, theirs = tmp_path / "ortpipe.parquet", tmp_path / "script.parquet"
    commands = {
        "ortpipe run": [sys.executable, "-m", "pipeline.cli", "run", str(model), "--input", str(source),
                        "--output", str(ours), "--id-column", "id", "--no-progress", "--overwrite"],
        "script": [sys.executable, str(script), str(model), str(source), str(theirs)],
    }  # fmt: skip
    seconds = benchmark.pedantic(alternated, args=(commands, ROUNDS), rounds=1, iterations=1)
    _same_scores(ours, theirs)
    ratio = statistics.median(seconds["script"]) / statistics.median(seconds["ortpipe run"])
    benchmark.extra_info.update(seconds=seconds, ratio=ratio)
    said = said_seconds(seconds)
    print(f"\n{kind}, {ROWS:,} rows: the script's median / ortpipe run's = {ratio:.2f}x ({said})")

"""Every row right, or refused (NOTE [ the table plan ]): ``ortpipe run`` over messy tables
either writes what ``session.run`` gives on the intended columns, with the ids exact, or
exits non-zero naming the column, before a row is written."""

from __future__ import annotations

import json
import os

import numpy as np
import onnxruntime as ort
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pipeline.cli import main

from ..helpers import read_table, write_table

WIDTH = 3
BIG = 2**60  # ids past 2**53: a float64 on the way would round them


def _model_bytes() -> bytes:
    """y = x @ w + 1, x [N, 3] float32: every feature's place and value shows in the output."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.array([[1.0], [10.0], [100.0]], np.float32), "w")
    one = numpy_helper.from_array(np.array([1.0], np.float32), "one")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "one"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])],
        [w, one],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10).SerializeToString()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("contract") / "m.onnx"
    path.write_bytes(_model_bytes())
    return path


def _expected(features: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(_model_bytes(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": features.astype(np.float32)})[0][:, 0]


def _run(model, source, output, *more):
    return main(["run", str(model), "--input", str(source), "--output", str(output), "--no-progress", *more])


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_a_text_cell_in_a_numeric_column_is_refused_naming_the_cell(tmp_path, capsys, model, suffix):
    rng = np.random.default_rng(0)
    cells = [str(v) for v in rng.standard_normal(80)]
    cells[50] = "abc"
    table = pa.table({"id": np.arange(80), "a": rng.standard_normal(80), "color_code": cells, "b": np.ones(80)})
    source, output = tmp_path / f"t{suffix}", tmp_path / "o.csv"
    write_table(table, source)
    assert _run(model, source, output) != 0
    assert "column 'color_code', row 50: 'abc' is not a number" in capsys.readouterr().err
    assert not output.exists()


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_ids_with_nulls_past_2_53_are_written_back_exactly(tmp_path, model, suffix):
    rows = 50
    ids = pa.array([None if i % 7 == 3 else BIG + i for i in range(rows)], pa.int64())
    x = np.arange(rows * WIDTH, dtype=np.float64).reshape(rows, WIDTH)
    table = pa.table({"id": ids, **{f"f{i}": x[:, i] for i in range(WIDTH)}})
    source, output = tmp_path / f"t{suffix}", tmp_path / f"o{suffix}"
    write_table(table, source)
    assert _run(model, source, output, "--batch-size", "16") == 0
    written = read_table(output)
    assert written["id"].type == pa.int64()
    assert written["id"].to_pylist() == ids.to_pylist()
    np.testing.assert_allclose(written["y"].to_numpy(), _expected(x))


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_string_ids_and_kept_columns_are_written_through(tmp_path, capsys, model, suffix):
    rows = 20
    x = np.random.default_rng(1).standard_normal((rows, WIDTH))
    table = pa.table(
        {
            "customer": [f"c{i % 3}" for i in range(rows)],
            "user_id": [f"u{1000 + i}" for i in range(rows)],
            **{f"f{i}": x[:, i] for i in range(WIDTH)},
            "day": pa.array([f"2026-12-{1 + i % 28:02d}" for i in range(rows)]),
        }
    )
    source, output = tmp_path / f"t{suffix}", tmp_path / f"o{suffix}"
    write_table(table, source)
    assert _run(model, source, output, "--keep", "customer,day") == 0
    out = capsys.readouterr().out
    assert "plan: id: 'user_id' (named like an id)" in out
    assert "plan: kept: customer, day (written through unchanged)" in out
    written = read_table(output)
    assert written.column_names == ["user_id", "customer", "day", "y"]
    assert written["user_id"].to_pylist() == table["user_id"].to_pylist()
    assert written["customer"].to_pylist() == table["customer"].to_pylist()
    np.testing.assert_allclose(written["y"].to_numpy(), _expected(x), rtol=1e-6)


def test_a_kept_date_and_a_nullable_int_stay_their_types_in_parquet(tmp_path, model):
    rows = 10
    x = np.ones((rows, WIDTH))
    days = pa.array(np.arange(np.datetime64("2026-01-01"), np.datetime64("2026-01-01") + rows), pa.date32())
    counts = pa.array([None if i == 2 else i for i in range(rows)], pa.int32())
    table = pa.table({"day": days, "count": counts, **{f"f{i}": x[:, i] for i in range(WIDTH)}})
    source, output = tmp_path / "t.parquet", tmp_path / "o.parquet"
    pq.write_table(table, source)
    assert _run(model, source, output, "--keep", "day", "--keep", "count") == 0
    written = pq.read_table(output)
    assert written.schema.field("day").type == pa.date32()
    assert written.schema.field("count").type == pa.int32()
    assert written["day"].equals(table["day"]) and written["count"].equals(table["count"])


def test_pandas_index_is_never_a_feature(tmp_path, capsys, model):
    pandas = pytest.importorskip("pandas")
    rng = np.random.default_rng(2)
    frame = pandas.DataFrame({"id": np.arange(40), **{f"f{i}": rng.standard_normal(40) for i in range(WIDTH)}})
    kept = frame[frame.f0 > 0]
    source, output = tmp_path / "t.parquet", tmp_path / "o.parquet"
    kept.to_parquet(source)
    assert "__index_level_0__" in pq.read_schema(source).names
    assert _run(model, source, output) == 0
    assert "plan: left out: '__index_level_0__' (pandas' index)" in capsys.readouterr().out
    written = pq.read_table(output)
    assert written["id"].to_pylist() == kept["id"].tolist()
    np.testing.assert_allclose(written["y"].to_numpy(), _expected(kept[["f0", "f1", "f2"]].to_numpy()), rtol=1e-6)
    csv = tmp_path / "t.csv"
    kept.to_csv(csv)  # its index as a first column named "Unnamed: 0" when read back
    assert _run(model, csv, tmp_path / "o2.parquet") == 0


def test_explain_prints_the_plan_and_the_output_columns_and_writes_nothing(tmp_path, capsys, model):
    x = np.ones((12, WIDTH))
    table = pa.table({"id": np.arange(12), "when": ["d"] * 12, **{f"f{i}": x[:, i] for i in range(WIDTH)}})
    source, output = tmp_path / "t.parquet", tmp_path / "o.parquet"
    pq.write_table(table, source)
    assert _run(model, source, output, "--keep", "when", "--explain") == 0
    out = capsys.readouterr().out
    assert "plan: input 'x' <- f0, f1, f2 (by width, cast float64 -> float32)" in out
    assert "output: id: int64\noutput: when: string\noutput: y: float" in out
    assert not output.exists()
    arrays = tmp_path / "o.npy"  # the outputs alone, a file each: said as arrays
    assert _run(model, source, arrays, "--input-column", "x=f0,f1,f2", "--explain") == 0
    assert "output: y: float32 [1] a row" in capsys.readouterr().out
    assert not arrays.exists()
    assert _run(model, source, arrays, "--keep", "when", "--explain") != 0  # as the run refuses it
    assert "--keep writes columns beside the outputs, in a table" in capsys.readouterr().err


def test_stats_carry_the_plan(tmp_path, model):
    x = np.ones((12, WIDTH))
    table = pa.table({"key": np.arange(12), **{f"f{i}": x[:, i] for i in range(WIDTH)}})
    source, stats = tmp_path / "t.parquet", tmp_path / "stats.json"
    pq.write_table(table, source)
    assert _run(model, source, tmp_path / "o.parquet", "--stats", str(stats)) == 0
    plan = json.loads(stats.read_text())["plan"]
    assert plan["inputs"] == {"x": ["f0", "f1", "f2"]} and plan["id_column"] == "key"


def test_a_nested_list_column_is_refused_naming_it(tmp_path, capsys, model):
    table = pa.table({"x": pa.array([[[1.0, 2.0, 3.0]]] * 4, pa.list_(pa.list_(pa.float64())))})
    source = tmp_path / "t.parquet"
    pq.write_table(table, source)
    assert _run(model, source, tmp_path / "o.parquet") != 0
    assert "column 'x' is list<element: list<element: double>>" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("column", "said"),
    [
        (pa.array([1.0, 2.0, 3e39, 4.0], pa.float64()), "float64 value 3e+39 overflows float32"),
        (pa.array([1, 2, 2**24 + 1, 4], pa.int64()), "int64 value 16,777,217 is not exact as float32"),
    ],
    ids=["float64 past float32", "int64 past 2**24"],
)
@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_a_cast_that_would_change_a_value_is_refused_naming_column_and_row(
    tmp_path, capsys, model, column, said, suffix
):
    table = pa.table({"a": np.zeros(4), "b": column, "c": np.zeros(4)})
    source, output = tmp_path / f"t{suffix}", tmp_path / "o.parquet"
    write_table(table, source)
    assert _run(model, source, output, "--batch-size", "2") != 0
    err = capsys.readouterr().err
    if suffix == ".parquet":  # its footer's range: refused before any batch, naming the rows
        assert "column 'b' cannot be cast in rows 0 to 3 (row group 0" in err and said in err, err
        assert not output.exists()
    else:  # a CSV tells at the batch: the one before it may be written, never the refused row
        assert "column 'b', row 2: cannot be cast" in err and said in err, err
        assert (pq.read_table(output).num_rows if output.exists() else 0) <= 2


# -- the property: never exit 0 with a wrong row --------------------------------------------

_FEATURE_TYPES = [pa.float64(), pa.float32(), pa.int64(), pa.int32()]


@st.composite
def _tables(draw):
    """A table of three features and whatever a real one may also hold, and what was done to it."""
    rows = draw(st.integers(1, 12))
    values = draw(
        st.lists(st.lists(st.integers(-1000, 1000), min_size=WIDTH, max_size=WIDTH), min_size=rows, max_size=rows)
    )
    x = np.array(values, np.float64) / 4
    columns: dict[str, pa.Array] = {}
    for i in range(WIDTH):
        kind = draw(st.sampled_from(_FEATURE_TYPES))
        column = x[:, i] if pa.types.is_floating(kind) else np.round(x[:, i])
        x[:, i] = column
        columns[f"f{i}"] = pa.array(column, kind)
    flaws = set()
    id_kind = draw(st.sampled_from(["none", "int", "int with nulls", "string"]))
    if id_kind != "none":
        ids = [BIG + i if id_kind != "string" else f"u{i}" for i in range(rows)]
        if id_kind == "int with nulls":
            ids[draw(st.integers(0, rows - 1))] = None
        columns["id"] = pa.array(ids, pa.string() if id_kind == "string" else pa.int64())
    if draw(st.booleans()):
        columns["__index_level_0__"] = pa.array(np.arange(rows) * 3, pa.int64())
    if draw(st.booleans()):  # a text cell in a feature column
        bad = draw(st.integers(0, rows - 1))
        cells = [str(v) for v in x[:, 1]]
        cells[bad] = "abc"
        columns["f1"] = pa.array(cells)
        flaws.add("f1")
    if draw(st.booleans()):  # a null in a feature
        cells = x[:, 2].tolist()
        cells[draw(st.integers(0, rows - 1))] = None
        columns["f2"] = pa.array(cells, pa.float64())
        flaws.add("f2")
    if draw(st.booleans()):  # a column written through with --keep (keep_columns=): never a feature
        columns["note"] = pa.array([f"n{i}" if i % 3 else None for i in range(rows)], pa.string())
    extra = draw(st.sampled_from(["none", "number", "text"]))
    if extra != "none":
        columns["extra"] = pa.array(np.ones(rows) if extra == "number" else ["n"] * rows)
        flaws.add("extra")
    names = draw(st.permutations(list(columns)))
    return pa.table({name: columns[name] for name in names}), x, flaws


@settings(
    max_examples=int(os.environ.get("ORTPIPE_PROPERTY_EXAMPLES", "40")),
    deadline=None,
    derandomize="ORTPIPE_PROPERTY_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(case=_tables(), suffix=st.sampled_from([".parquet", ".csv", ".jsonl", ".delta"]))
def test_a_run_is_right_on_the_intended_columns_or_refused_naming_one(tmp_path_factory, model, case, suffix):
    """``.delta``: a Delta table written once with other rows, then overwritten with the drawn
    ones - the stale version's file still in its folder (NOTE [ a table format's folder ])."""
    import contextlib
    import io

    table, x, flaws = case
    _the_python_api_is_right_or_refuses(table, x, flaws)
    folder = tmp_path_factory.mktemp("case")
    source, output = folder / f"t{suffix}", folder / "o.parquet"
    if suffix == ".delta":
        _write_delta_over_stale_rows(table, source)
    else:
        write_table(table, source)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = _run(model, source, output, *(["--keep", "note"] if "note" in table.column_names else []))
    event("refused" if code else "written")
    if code != 0:
        message = err.getvalue()
        assert any(f"'{name}'" in message for name in table.column_names), message
        assert flaws, f"a clean table was refused: {message}"
        assert not output.exists()
        return
    written = pq.read_table(output)
    order = [name for name in table.column_names if name.startswith("f")]
    features = x[:, [int(name[1]) for name in order]]
    np.testing.assert_allclose(written["y"].to_numpy(), _expected(features), rtol=1e-6)
    if "note" in table.column_names:  # as the input holds it: a CSV's empty cell is an empty text
        held = table if suffix == ".delta" else read_table(source)
        assert written["note"].to_pylist() == held["note"].to_pylist()
    if "id" in table.column_names:
        assert written["id"].to_pylist() == table["id"].to_pylist()
    assert "extra" not in flaws and "f1" not in flaws and "f2" not in flaws


def _write_delta_over_stale_rows(table: pa.Table, folder) -> None:
    deltalake = pytest.importorskip("deltalake", reason="needs deltalake: pip install 'ortpipe[tables]'")
    deltalake.write_deltalake(folder, pa.concat_tables([table, table]))  # stale: every row twice
    deltalake.write_deltalake(folder, table, mode="overwrite")
    event("a Delta table over stale rows")


def _the_python_api_is_right_or_refuses(table: pa.Table, x: np.ndarray, flaws: set[str]) -> None:
    """What Ray's and Spark's workers call on a batch of rows: the same plan, the same refusals."""
    from pipeline.integrations.columnar import ArrowScorer
    from pipeline.session import TensorSpec
    from pipeline.sources import SourceError

    keep = ["note"] if "note" in table.column_names else []
    scorer = ArrowScorer([TensorSpec("x", np.dtype(np.float32), ("N", WIDTH))], keep_columns=keep)
    try:
        features = scorer.features(table)["x"]
    except SourceError as exc:
        assert any(f"'{name}'" in str(exc) for name in table.column_names), str(exc)
        assert flaws, f"a clean table was refused: {exc}"
        return
    order = [name for name in table.column_names if name.startswith("f")]
    np.testing.assert_array_equal(features, x[:, [int(name[1]) for name in order]].astype(np.float32))
    assert not flaws & {"extra", "f1", "f2"}


def test_a_table_of_images_finds_its_id_as_any_table_does(tmp_path):
    """Issue 53, item 4: the id named like one is kept for a table that lists images, exactly."""
    from PIL import Image

    rng = np.random.default_rng(4)
    names = [f"img/{i}.png" for i in range(5)]
    (tmp_path / "img").mkdir()
    for name in names:
        Image.fromarray(rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)).save(tmp_path / name)
    ids = [f"u{1000 + i}" for i in range(5)]
    pq.write_table(pa.table({"user_id": ids, "image": names}), tmp_path / "list.parquet")
    output = tmp_path / "o.parquet"
    argv = ["run", "convnet", "--input", str(tmp_path / "list.parquet"), "--image-column", "image"]
    assert main([*argv, "--size", "16x16", "--no-progress", "--output", str(output)]) == 0
    written = pq.read_table(output)
    assert written["user_id"].to_pylist() == ids and written["image"].to_pylist() == names


def test_kept_columns_are_resumed_and_refused_where_they_cannot_be_written(tmp_path, capsys, model):
    rows = 40
    x = np.random.default_rng(9).standard_normal((rows, WIDTH))
    table = pa.table(
        {"id": np.arange(rows), "day": [f"d{i % 5}" for i in range(rows)], **{f"f{i}": x[:, i] for i in range(WIDTH)}}
    )
    source, output = tmp_path / "t.parquet", tmp_path / "o.csv"
    pq.write_table(table, source)
    assert _run(model, source, output, "--keep", "day", "--batch-size", "8", "--limit", "16") == 0
    assert _run(model, source, output, "--keep", "day", "--batch-size", "8", "--resume") == 0
    written = pacsv.read_csv(output)
    assert written["id"].to_pylist() == list(range(rows)) and written["day"].to_pylist() == table["day"].to_pylist()
    mapped = ("--input-column", "x=f0,f1,f2", "--batch-size", "8", "--resume")
    assert _run(model, source, output, *mapped) == 1  # a job that keeps no column: another job
    assert "another job" in capsys.readouterr().err
    assert _run(model, source, tmp_path / "o.npy", "--keep", "day") == 1
    assert "--keep writes columns beside the outputs, in a table" in capsys.readouterr().err

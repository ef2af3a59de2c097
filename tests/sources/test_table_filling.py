"""NOTE [ tables fill slots ]: a table's columns written straight into the slots give
the rows, order and metadata of the iteration, resumed runs and data sets included."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from pipeline import Pipeline, SourceError, models
from pipeline.jobs import JobSummary, run_job
from pipeline.sinks import CallbackSink
from pipeline.sources import CsvSource, ParquetDatasetSource, ParquetSource

ROWS, FEATURES = 1000, 8


def _features(rows: int = ROWS, features: int = FEATURES, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, features)).astype(np.float32)


def _scalar_table(x: np.ndarray, dtype: type = np.float32) -> pa.Table:
    columns = {f"f{i}": x[:, i].astype(dtype) for i in range(x.shape[1])}
    return pa.table({"row_id": np.arange(len(x), dtype=np.int64) + 100, **columns})


def _list_table(x: np.ndarray, fixed: bool) -> pa.Table:
    values = pa.array(x.ravel())
    column = (
        pa.FixedSizeListArray.from_arrays(values, x.shape[1])
        if fixed
        else pa.ListArray.from_arrays(pa.array(np.arange(0, x.size + 1, x.shape[1], dtype=np.int32)), values)
    )
    return pa.table({"features": column})


def _job(pipe: Pipeline, source, fill: bool) -> tuple[JobSummary, dict[str, np.ndarray], dict[str, np.ndarray]]:
    outputs: dict[str, list] = {}
    metas: dict[str, list] = {}

    def keep(index, outs, meta):
        for name, values in outs.items():
            outputs.setdefault(name, []).append(values)
        for name, values in meta.items():
            metas.setdefault(name, []).append(values)

    summary = run_job(pipe, source, CallbackSink(keep), fill_slots=fill)
    joined = {name: np.concatenate(parts) for name, parts in outputs.items()}
    return summary, joined, {name: np.concatenate(parts) for name, parts in metas.items()}


def _both_ways(pipe: Pipeline, make_source) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The job filled and iterated: the same outputs and metadata; the filled ones returned."""
    filled, outs, meta = _job(pipe, make_source(), fill=True)
    iterated, want, want_meta = _job(pipe, make_source(), fill=False)
    assert filled.filled and not iterated.filled
    assert filled.items == iterated.items
    for name in want:
        np.testing.assert_array_equal(outs[name], want[name])
    for name in want_meta:
        np.testing.assert_array_equal(meta[name], want_meta[name])
    return outs, meta


@pytest.fixture
def pipe():
    with Pipeline(models.identity(features=FEATURES), device="cpu") as pipe:
        yield pipe


def test_scalar_columns_fill_the_slots_as_the_iteration_stacks_them(tmp_path, pipe):
    x = _features()
    pq.write_table(_scalar_table(x), tmp_path / "t.parquet")
    outs, meta = _both_ways(pipe, lambda: ParquetSource(tmp_path / "t.parquet", 64, pipe.source_inputs))
    np.testing.assert_array_equal(outs["y"], x)
    np.testing.assert_array_equal(meta["row_id"], np.arange(ROWS) + 100)


@pytest.mark.parametrize("fixed", [True, False])
def test_a_list_column_fills_the_slots(tmp_path, pipe, fixed):
    x = _features()
    pq.write_table(_list_table(x, fixed), tmp_path / "t.parquet")
    outs, meta = _both_ways(pipe, lambda: ParquetSource(tmp_path / "t.parquet", 64, pipe.source_inputs))
    np.testing.assert_array_equal(outs["y"], x)
    np.testing.assert_array_equal(meta["row_id"], np.arange(ROWS))


def _free_dims_model():
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "free",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "F"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "F"])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_a_free_feature_dim_is_sized_from_the_columns(tmp_path):
    x = _features()
    pq.write_table(_scalar_table(x), tmp_path / "t.parquet")
    with Pipeline(_free_dims_model(), device="cpu") as free:
        assert not free.fills_slots
        source = ParquetSource(tmp_path / "t.parquet", 64, free.source_inputs)
        assert source.filled_rows == {"x": (FEATURES,)}
        outs, _ = _both_ways(free, lambda: ParquetSource(tmp_path / "t.parquet", 64, free.source_inputs))
    np.testing.assert_array_equal(outs["y"], x)


def test_integer_columns_are_cast_as_the_iteration_casts_them(tmp_path, pipe):
    x = np.arange(ROWS * FEATURES, dtype=np.int64).reshape(ROWS, FEATURES) % 1000
    pq.write_table(_scalar_table(x, np.int64), tmp_path / "t.parquet")
    outs, _ = _both_ways(pipe, lambda: ParquetSource(tmp_path / "t.parquet", 64, pipe.source_inputs))
    np.testing.assert_array_equal(outs["y"], x.astype(np.float32))


@pytest.mark.parametrize("fill", [True, False], ids=["filled", "iterated"])
def test_an_integer_a_float_cannot_hold_exactly_is_refused_not_rounded(tmp_path, pipe, fill):
    """Issue 34, item 8 (NOTE [ input dtypes ]): integers to floats only where every value is exact."""
    from pipeline import PipelineStageError
    from pipeline.sources import SourceError

    x = np.ones((ROWS, FEATURES), np.int64)
    x[500, 3] = 2**24 + 1  # float32 would make it 2**24
    pq.write_table(_scalar_table(x, np.int64), tmp_path / "t.parquet")
    with pytest.raises(
        (SourceError, PipelineStageError), match=r"int64 value 16,777,217 is not exact as float32 .* get"
    ):
        _job(pipe, ParquetSource(tmp_path / "t.parquet", 64, pipe.source_inputs), fill=fill)


def test_a_resumed_table_fills_from_its_first_row_left(tmp_path, pipe):
    x = _features()
    pq.write_table(_scalar_table(x), tmp_path / "t.parquet", row_group_size=300)
    outs, meta = _both_ways(pipe, lambda: ParquetSource(tmp_path / "t.parquet", 64, pipe.source_inputs).after(333))
    np.testing.assert_array_equal(outs["y"], x[333:])
    np.testing.assert_array_equal(meta["row_id"], np.arange(333, ROWS) + 100)


def test_a_data_set_and_a_csv_fill_the_slots(tmp_path, pipe):
    x = _features()
    (tmp_path / "ds").mkdir()
    pq.write_table(_scalar_table(x[:400]), tmp_path / "ds" / "a.parquet")
    pq.write_table(_scalar_table(x[400:]), tmp_path / "ds" / "b.parquet")
    outs, meta = _both_ways(pipe, lambda: ParquetDatasetSource(tmp_path / "ds", 64, pipe.source_inputs))
    np.testing.assert_array_equal(outs["y"], x)
    assert list(meta["file"][[0, 399, 400]]) == ["a.parquet", "a.parquet", "b.parquet"]
    pcsv.write_csv(_scalar_table(x), tmp_path / "t.csv")
    outs, _ = _both_ways(pipe, lambda: CsvSource(tmp_path / "t.csv", 64, pipe.source_inputs))
    np.testing.assert_allclose(outs["y"], x, rtol=1e-6)


def test_the_filler_writes_into_the_slot_it_is_given(tmp_path, pipe):
    x = _features(rows=100)
    pq.write_table(_scalar_table(x), tmp_path / "t.parquet")
    filler = ParquetSource(tmp_path / "t.parquet", 64, pipe.source_inputs).filler()
    slot = {"x": np.full((64, FEATURES), -1, np.float32)}
    rows, meta = filler.fill(slot)
    assert rows == 64 and np.array_equal(slot["x"], x[:64]) and list(meta["row_id"][:2]) == [100, 101]
    slot["x"][:] = -1
    rows, _ = filler.fill(slot)
    assert rows == 36 and np.array_equal(slot["x"][:36], x[64:]) and (slot["x"][36:] == -1).all()
    assert filler.fill(slot) is None
    filler.close()


def test_columns_of_a_type_the_input_cannot_take_are_not_filled(tmp_path):
    x = np.arange(ROWS * 2, dtype=np.float64).reshape(ROWS, 2)
    pq.write_table(_scalar_table(x, np.float64), tmp_path / "t.parquet")
    with Pipeline(models.identity(features=2, dtype=7), device="cpu") as ints:  # int64 input
        source = ParquetSource(tmp_path / "t.parquet", 64, ints.source_inputs)
        assert source.filled_rows == {}
        with pytest.raises(Exception, match="the model takes int64"):
            run_job(ints, source, CallbackSink(lambda *a: None))


def test_rows_of_another_shape_than_the_slot_are_refused_by_the_filler(tmp_path):
    """A model that takes [N, 4, 2]: the 8 columns' rows would fill it only reshaped, which
    the filler refuses naming the columns (the iteration's check refuses them too)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "rank3",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    pq.write_table(_scalar_table(_features()), tmp_path / "t.parquet")
    with Pipeline(model, device="cpu") as pipe:
        source = ParquetSource(tmp_path / "t.parquet", 64, pipe.source_inputs)
        with pytest.raises(Exception, match=r"takes rows of \[4, 2\], but 8 columns are stacked.*'f7'"):
            run_job(pipe, source, CallbackSink(lambda *a: None))


def test_a_column_named_like_an_id_is_the_id_whether_or_not_it_repeats(tmp_path, pipe):
    """NOTE [ the table plan ]: a column named like an id is the rows' id, never a feature
    unless mapped; a width that then does not fit is refused saying so."""
    x = _features()
    table = _scalar_table(x).drop(["row_id"]).append_column("user_id", pa.array(np.arange(ROWS) + 100))
    pq.write_table(table, tmp_path / "t.parquet")
    source = ParquetSource(tmp_path / "t.parquet", 64, pipe.source_inputs)
    assert source.plan.id_how == "named like an id" and source.id_column == "user_id"
    _outs, meta = _both_ways(pipe, lambda: source)
    np.testing.assert_array_equal(meta["user_id"], np.arange(ROWS) + 100)
    repeating = _scalar_table(x).drop(["row_id"]).append_column("user_id", pa.array(np.arange(ROWS) % 3))
    pq.write_table(repeating, tmp_path / "r.parquet")
    assert ParquetSource(tmp_path / "r.parquet", 64, pipe.source_inputs).id_column == "user_id"
    short = _scalar_table(x).drop(["row_id", "f7"]).append_column("user_id", pa.array(np.arange(ROWS) % 3))
    pq.write_table(short, tmp_path / "s.parquet")
    with pytest.raises(SourceError, match=r"takes rows of 8 values.*7 columns.*'user_id' is taken as the rows' id"):
        ParquetSource(tmp_path / "s.parquet", 64, pipe.source_inputs)


def test_named_columns_of_the_wrong_count_are_refused_naming_them(tmp_path, pipe):
    pq.write_table(_scalar_table(_features()), tmp_path / "t.parquet")
    with pytest.raises(SourceError, match=r"2 columns are stacked for it \(dim 1\): \['f0', 'f1'\]; map the input"):
        ParquetSource(tmp_path / "t.parquet", 64, pipe.source_inputs, columns={"x": ["f0", "f1"]})


def test_nulls_a_footer_counts_are_refused_before_any_batch_naming_the_rows(tmp_path, pipe):
    """Issue 26, item 14: Parquet's footer counts nulls: refused when the source is made."""
    x = _features()
    table = _scalar_table(x).set_column(4, "f3", pa.array([*x[:500, 3], None, *x[501:, 3]], pa.float32()))
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=200)
    with pytest.raises(SourceError, match=r"t\.parquet'.*'f3' has 1 null value\(s\) in rows 400 to 599 \(row group 2"):
        ParquetSource(tmp_path / "t.parquet", 64, pipe.source_inputs)
    (tmp_path / "ds").mkdir()
    pq.write_table(_scalar_table(x), tmp_path / "ds" / "a.parquet")
    pq.write_table(table, tmp_path / "ds" / "b.parquet", row_group_size=200)
    with pytest.raises(SourceError, match=r"b\.parquet'.*'f3' has 1 null value\(s\) in rows 400 to 599"):
        ParquetDatasetSource(tmp_path / "ds", 64, pipe.source_inputs)


@pytest.mark.parametrize("fill", [True, False])
def test_nulls_found_in_a_batch_name_the_file_and_the_first_row(tmp_path, pipe, fill):
    x = _features()
    table = _scalar_table(x).set_column(4, "f3", pa.array([*x[:500, 3], None, *x[501:, 3]], pa.float32()))
    pq.write_table(table, tmp_path / "t.parquet", write_statistics=False)  # no counts in the footer
    source = ParquetSource(tmp_path / "t.parquet", 64, pipe.source_inputs)
    with pytest.raises(
        Exception, match=r"t\.parquet'.*'f3' has 1 null value\(s\) in the rows from 448, the first at row 500"
    ):
        run_job(pipe, source, CallbackSink(lambda *a: None), fill_slots=fill)


def test_a_damaged_parquet_file_is_named(tmp_path, pipe):
    x = _features(rows=20_000)
    path = tmp_path / "t.parquet"
    pq.write_table(_scalar_table(x), path, row_group_size=1000)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle - 20_000 : middle + 20_000] = b"\xff" * 40_000  # page headers overwritten
    path.write_bytes(bytes(data))
    source = ParquetSource(path, 1000, pipe.source_inputs)
    with pytest.raises(Exception, match=r"t\.parquet' cannot be read: .*is the file damaged"):
        run_job(pipe, source, CallbackSink(lambda *a: None))

"""The scoring of Arrow batches that Ray's Predictor and Spark's scorer share, called here
without a cluster: the same rows as Pipeline.run, empty batches, numpy batches, the
worker's one engine, and the columns' messages."""

from __future__ import annotations

import asyncio

import numpy as np
import pyarrow as pa
import pytest

from pipeline import Pipeline, SourceError, models
from pipeline.ray import Predictor
from pipeline.spark import _ENGINES, scorer

FEATURES = 8


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("columnar") / "mlp.onnx"
    path.write_bytes(models.mlp(features=FEATURES).SerializeToString())
    return path


def _table(rows: int, seed: int = 0) -> tuple[pa.Table, np.ndarray]:
    x = np.random.default_rng(seed).standard_normal((rows, FEATURES)).astype(np.float32)
    ids = np.arange(rows, dtype=np.int64) + 7
    return pa.table({"id": ids, **{f"f{i}": x[:, i].astype(np.float64) for i in range(FEATURES)}}), x


def _expected(model, x: np.ndarray) -> np.ndarray:
    with Pipeline(model, device="cpu") as pipe:
        return pipe.run({"x": x})["scores"]


def test_predictor_scores_a_table_as_pipeline_run(model):
    table, x = _table(1000)
    predictor = Predictor(str(model), device="cpu", keep_columns=["id"], id_column="id", batch_size=128)
    out = asyncio.run(predictor(table))
    assert out.column_names == ["id", "scores"] and pa.types.is_fixed_size_list(out.schema.field("scores").type)
    np.testing.assert_array_equal(out["id"].to_numpy(), np.arange(1000) + 7)
    np.testing.assert_allclose(np.stack(out["scores"].to_numpy(zero_copy_only=False)), _expected(model, x), rtol=1e-6)
    assert predictor.pipeline.options.cast_inputs  # the float64 columns cast to the model's float32
    predictor.close()


def test_predictor_takes_numpy_batches_and_empty_ones(model):
    table, x = _table(300)
    batch = {name: table[name].to_numpy() for name in table.column_names}
    predictor = Predictor(str(model), device="cpu", keep_columns=["id"], id_column="id")
    out = asyncio.run(predictor(batch))
    assert out["scores"].shape == (300, 16) and list(out["id"][:2]) == [7, 8]
    np.testing.assert_allclose(out["scores"], _expected(model, x), rtol=1e-6)
    empty = asyncio.run(predictor(table.slice(0, 0)))
    assert empty.num_rows == 0 and empty.column_names == ["id", "scores"]
    predictor.close()


def test_predictor_overlaps_concurrent_batches(model):
    """Several batches at once, as Ray's async actor gives them: each gets its own rows back."""
    tables = [_table(200 + 10 * i, seed=i) for i in range(6)]
    predictor = Predictor(str(model), device="cpu", keep_columns=["id"], id_column="id", batch_size=64)

    async def all_at_once():
        return await asyncio.gather(*(predictor(table) for table, _ in tables))

    for out, (_, x) in zip(asyncio.run(all_at_once()), tables, strict=True):
        np.testing.assert_allclose(
            np.stack(out["scores"].to_numpy(zero_copy_only=False)), _expected(model, x), rtol=1e-6
        )
    predictor.close()


def test_a_bad_column_is_ortpipes_message(model):
    table, _ = _table(10)
    predictor = Predictor(str(model), device="cpu", input_columns={"x": ["f0", "nope"]})
    with pytest.raises(SourceError, match=r"columns \['nope'\] for input 'x' are not in 'the batch'"):
        asyncio.run(predictor(table))
    predictor.close()
    predictor = Predictor(str(model), device="cpu", keep_columns=["gone"])
    with pytest.raises(SourceError, match=r"kept column\(s\) \['gone'\] are not in 'the batch'"):
        asyncio.run(predictor(table))
    predictor.close()


def test_the_spark_function_keeps_one_engine_a_worker_and_takes_empty_batches(model):
    table, x = _table(2500)
    fn = scorer(str(model), keep_columns=["id"], id_column="id", device="cpu", batch_size=256)
    before = len(_ENGINES)
    first = list(fn(iter(table.to_batches(max_chunksize=700))))
    second = list(fn(iter([_empty(table)])))
    assert len(_ENGINES) == before + 1  # one engine for both partitions
    scores = np.concatenate([np.stack(b.column(1).to_numpy(zero_copy_only=False)) for b in first])
    np.testing.assert_allclose(scores, _expected(model, x), rtol=1e-6)
    assert pa.types.is_list(first[0].schema.field("scores").type)  # Spark's ArrayType
    assert sum(b.num_rows for b in second) == 0


def _empty(table: pa.Table) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=table.schema)


def test_a_one_dim_input_takes_one_column_from_numpy_and_arrow_batches():
    """Issue 37, item 3: an input of ``[N]`` takes its column as it is, in either batch format."""
    import pyarrow as pa

    from pipeline import TensorSpec
    from pipeline.integrations.columnar import ArrowScorer

    scorer = ArrowScorer([TensorSpec("v", np.dtype(np.float32), ("N",))])
    values = np.arange(5, dtype=np.float32)
    assert scorer.features({"v": values})["v"].shape == (5,)
    assert scorer.features(pa.table({"v": values}))["v"].shape == (5,)

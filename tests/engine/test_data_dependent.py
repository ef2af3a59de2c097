"""Outputs whose shape depends on the data (NOTE [ data-dependent outputs ]).

The built-in ``detect`` model returns every score over a threshold, one row a
hit, as a detector with NMS in its graph returns boxes: K is known only once
the model has run.  Its probe (zeros) finds no hit, so the first batch with
hits is the one that finds the outputs dynamic.
"""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import MultiPipeline, Pipeline, PipelineInputError, PipelineOptions, PipelineStageError, models
from pipeline.cli import main
from pipeline.jobs import open_sink, run_job
from pipeline.sinks import NpySink, SinkError
from pipeline.sources import SourceBatch

from ..conftest import assert_outputs_equal, reference, wait_no_threads
from ..helpers import gather_model

DYNAMIC = {"hits", "hit_scores"}


def _batches(sizes: list[int], seed: int = 0) -> list[np.ndarray]:
    """Standard normal rows (a few hits a row), after a batch of zeros (none, as probed),
    with one batch of nothing but hits, so the pinned output slots must grow."""
    rng = np.random.default_rng(seed)
    batches = [rng.standard_normal((rows, 64)).astype(np.float32) for rows in sizes]
    batches.insert(0, np.zeros((sizes[0], 64), np.float32))
    batches.insert(len(batches) // 2, np.full((sizes[0], 64), 2.0, np.float32))
    return batches


def test_detect_outputs_equal_session_run_batch_by_batch(device, stage_threads):
    model = models.detect()
    batches = _batches([16, 16, 9, 16, 3, 16, 12, 16])
    options = PipelineOptions(stage_threads=stage_threads)
    with Pipeline(model, device=device, depth=3, options=options) as pipe:
        for attempt in ("finds them", "knows them from the start"):
            outs = list(pipe.map(batches))
            assert pipe.session.dynamic_outputs == DYNAMIC, attempt
            assert len(outs) == len(batches)
            for batch, out in zip(batches, outs, strict=True):
                assert_outputs_equal(out, reference(model, {"x": batch}), device)
    assert wait_no_threads() == []


def test_a_fixed_batch_model_with_outputs_of_no_row_each_is_never_padded(fast_device):
    """NOTE [ rows that interact ]: a detector's hits are the batch's as a whole, the padding rows'
    included: whole batches run, a short one is refused naming the outputs, never padded silently."""
    model = models.detect(batch=8)
    rng = np.random.default_rng(3)
    batches = [rng.standard_normal((8, 64)).astype(np.float32) for _ in range(3)]
    with Pipeline(model, device=fast_device, depth=2) as pipe:
        outs = list(pipe.map(batches))
        np.testing.assert_array_equal(outs[-1]["hits"], np.argwhere(batches[-1] > 1.5))
        with pytest.raises(PipelineStageError) as caught:
            list(pipe.map([rng.standard_normal((5, 64)).astype(np.float32)]))
    message = str(caught.value)
    assert "padded to 8" in message and "'hits' has no row each" in message and "whole batches of 8" in message


def test_views_of_a_dynamic_output_have_this_batchs_shape(fast_device):
    """map_with hands over views of the pinned slot: one K per batch, not the probe's."""
    batches = _batches([16, 16, 16])
    seen = []
    with Pipeline(models.detect(), device=fast_device, depth=2) as pipe:
        for _ in pipe.map_with(batches, lambda index, rows, views: seen.append(views["hits"].copy())):
            pass
    assert [hits.shape for hits in seen] == [(int((b > 1.5).sum()), 2) for b in batches]


def test_run_says_to_use_map_for_outputs_that_are_not_per_row():
    x = np.random.default_rng(0).standard_normal((40, 64)).astype(np.float32)
    with Pipeline(models.detect(), device="cpu") as pipe, pytest.raises(PipelineInputError) as caught:
        pipe.run(x, batch_size=8)
    message = str(caught.value)
    assert "output 'hits'" in message and "use map()" in message


def test_a_real_failure_is_still_reported_not_retried_into_silence():
    """An ORT failure that is no shape mismatch fails the retry too: the batch's first error is raised."""
    batches = [np.array([1, 2], np.int64), np.array([3, 42], np.int64)]  # 42: out of range
    with Pipeline(gather_model(rows=10), device="cpu", depth=2) as pipe:
        with pytest.raises(PipelineStageError) as caught:
            list(pipe.map(batches))
        assert pipe.session.dynamic_outputs == frozenset()
    assert caught.value.batch_index == 1 and "out of data bounds" in str(caught.value.__cause__)


def _detect_job(tmp_path, name: str, batches: list[np.ndarray], **sink_options):
    """``batches`` through the detect model into ``tmp_path / name`` with the sink ``open_sink`` picks."""
    with Pipeline(models.detect(), device="cpu", depth=2) as pipe:
        sink = open_sink(tmp_path / name, pipe, **sink_options)
        summary = run_job(
            pipe, [SourceBatch({"x": batch}, {"row_id": np.arange(len(batch))}) for batch in batches], sink
        )
    assert summary.batches == len(batches)
    return sink


def _reference_by_batch(batches: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
    return [reference(models.detect(), {"x": batch}) for batch in batches]


def test_npy_writes_each_batchs_hits_one_after_another_with_offsets(tmp_path):
    batches = _batches([8, 8, 5, 8])
    sink = _detect_job(tmp_path, "dets.npy", batches)
    assert set(sink.offsets_paths) == DYNAMIC
    want = _reference_by_batch(batches)
    np.testing.assert_array_equal(np.load(sink.paths["best"]), np.concatenate([w["best"] for w in want]))
    for name in DYNAMIC:
        values, offsets = np.load(sink.paths[name]), np.load(sink.offsets_paths[name])
        assert sink.offsets_paths[name].name == f"dets.{name}.offsets.npy"
        assert offsets.dtype == np.int64 and offsets[0] == 0 and len(offsets) == len(batches) + 1
        for i, batch_want in enumerate(want):
            np.testing.assert_array_equal(values[offsets[i] : offsets[i + 1]], batch_want[name], err_msg=f"{name} {i}")


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_tables_write_each_per_batch_output_beside_the_main_one(tmp_path, suffix):
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    read = pq.read_table if suffix == ".parquet" else pcsv.read_csv
    batches = _batches([8, 8, 5, 8])
    sink = _detect_job(tmp_path, f"dets{suffix}", batches)
    assert {name: path.name for name, path in sink.side_paths.items()} == {n: f"dets.{n}{suffix}" for n in DYNAMIC}
    want = _reference_by_batch(batches)
    main = read(sink.path)
    assert main.column_names == ["row_id", "batch", "best"]
    np.testing.assert_array_equal(
        main["batch"].to_numpy(), np.repeat(np.arange(len(batches)), [len(b) for b in batches])
    )
    # CSV holds text: float32 read back as float64
    np.testing.assert_allclose(main["best"].to_numpy(), np.concatenate([w["best"] for w in want]), rtol=1e-6)
    hits, scores = read(sink.side_paths["hits"]), read(sink.side_paths["hit_scores"])
    assert scores.column_names == ["batch", "hit_scores"]
    if suffix == ".parquet":
        assert hits.column_names == ["batch", "hits"]
        hit_values = np.stack(hits["hits"].to_numpy(zero_copy_only=False)) if hits.num_rows else np.empty((0, 2))
    else:
        assert hits.column_names == ["batch", "hits_0", "hits_1"]
        hit_values = np.stack([hits["hits_0"].to_numpy(), hits["hits_1"].to_numpy()], axis=1)
    for i, batch_want in enumerate(want):
        np.testing.assert_array_equal(hit_values[hits["batch"].to_numpy() == i], batch_want["hits"], err_msg=str(i))
        np.testing.assert_allclose(
            scores["hit_scores"].to_numpy()[scores["batch"].to_numpy() == i], batch_want["hit_scores"], rtol=1e-6
        )


def _exactly_one_hit_a_row(rows: int) -> np.ndarray:
    batch = np.zeros((rows, 64), np.float32)
    batch[:, 3] = 2.0
    return batch


def test_a_count_that_equals_the_rows_in_the_first_batch_is_still_written_per_batch(tmp_path):
    """Batch 0 has as many hits as rows; the pipeline has found the output dynamic (the probe had none)."""
    batches = [_exactly_one_hit_a_row(8), *_batches([8, 8])]
    sink = _detect_job(tmp_path, "dets.npy", batches)
    offsets = np.load(sink.offsets_paths["hits"])
    want = _reference_by_batch(batches)
    assert offsets.tolist() == np.cumsum([0, *(len(w["hits"]) for w in want)]).tolist()


def test_a_per_row_sink_that_saw_a_coincidence_says_to_name_the_output(tmp_path):
    """A sink told nothing, whose first batch had a hit a row, fails on batch 1 and says how to fix it."""
    batches = [_exactly_one_hit_a_row(8), *_batches([8, 8])]
    with Pipeline(models.detect(), device="cpu") as pipe:
        source = [SourceBatch({"x": batch}) for batch in batches]
        sink = NpySink(tmp_path / "out.npy", pipe.output_names)
        with pytest.raises(
            SinkError, match=r"output 'hits' of batch 1 has shape \[\d+, 2\], expected \[8, 2\]"
        ) as caught:
            run_job(pipe, source, sink)
    assert "--data-dependent" in str(caught.value)
    assert np.load(sink.paths["best"]).shape == (8,)  # batch 0, written before the failure, is readable


def test_outputs_named_data_dependent_must_be_outputs(tmp_path):
    with Pipeline(models.detect(), device="cpu") as pipe, pytest.raises(SinkError, match=r"\['boxes'\] are not"):
        open_sink(tmp_path / "out.parquet", pipe, data_dependent=["boxes"])


def test_ortpipe_run_writes_a_detectors_hits_per_batch(tmp_path, capsys):
    data = np.concatenate(_batches([8, 8, 8]))
    np.save(tmp_path / "x.npy", data)
    argv = ["run", "detect", "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "dets.parquet")]
    assert main([*argv, "--batch-size", "8", "--device", "cpu", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert (
        "output 'hits', a count of its own each batch: " in out
        and "dets.hits.parquet' (join on the batch column)" in out
    )
    import pyarrow.parquet as pq

    hits = pq.read_table(tmp_path / "dets.hits.parquet")
    want = [reference(models.detect(), {"x": data[i : i + 8]})["hits"] for i in range(0, len(data), 8)]
    assert hits["batch"].to_numpy().tolist() == [i for i, w in enumerate(want) for _ in range(len(w))]
    assert main([*argv, "--data-dependent", "boxes", "--device", "cpu", "--no-progress", "--overwrite"]) == 1
    assert "boxes" in capsys.readouterr().err


def test_several_devices_write_per_batch_outputs_in_order(tmp_path):
    batches = [_exactly_one_hit_a_row(8), *_batches([8, 5, 8, 8, 3])]
    with MultiPipeline(models.detect(), "cpu,cpu", depth=2) as pipe:
        sink = open_sink(tmp_path / "dets.npy", pipe)
        run_job(pipe, [SourceBatch({"x": batch}) for batch in batches], sink)
        assert pipe.data_dependent_outputs == DYNAMIC  # each device found them; together they say so
    want = _reference_by_batch(batches)
    values, offsets = np.load(sink.paths["hits"]), np.load(sink.offsets_paths["hits"])
    for i, batch_want in enumerate(want):
        np.testing.assert_array_equal(values[offsets[i] : offsets[i + 1]], batch_want["hits"], err_msg=str(i))


@pytest.mark.parametrize("name", ["dets.parquet", "dets.npy"])
def test_a_stopped_job_leaves_every_table_readable_and_in_step(tmp_path, name):
    """Stopped after the first batch written: the main table and the ones beside it hold the same batches."""
    import threading

    import pyarrow.parquet as pq

    stop = threading.Event()
    batches = _batches([8] * 12)
    with Pipeline(models.detect(), device="cpu", depth=2) as pipe:
        sink = open_sink(tmp_path / name, pipe)
        write = sink.write

        def write_then_stop(index, rows, outputs, meta):
            write(index, rows, outputs, meta)
            stop.set()

        sink.write = write_then_stop
        summary = run_job(pipe, [SourceBatch({"x": batch}) for batch in batches], sink, stop=stop)
    assert summary.interrupted and 1 <= summary.batches < len(batches)
    want = _reference_by_batch(batches[: summary.batches])
    if name.endswith(".npy"):
        offsets = np.load(sink.offsets_paths["hits"])
        assert len(offsets) == summary.batches + 1
        assert np.load(sink.paths["hits"]).shape == (offsets[-1], 2) and offsets[-1] == sum(
            len(w["hits"]) for w in want
        )
    else:
        assert pq.read_table(sink.path)["batch"].to_pylist()[-1] == summary.batches - 1
        hits = pq.read_table(sink.side_paths["hits"])
        assert hits.num_rows == sum(len(w["hits"]) for w in want)


def _misdeclared_label_model():
    """A label whose batch dim the model declares as a fixed 1 (as onnxmltools does for a
    LightGBM classifier) while the run returns one a row."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("ArgMax", ["x"], ["label"], axis=1, keepdims=0),
            helper.make_node("Softmax", ["x"], ["prob"], axis=1),
        ],
        "misdeclared",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, [1]),
            helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 4]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_an_output_declared_with_a_wrong_fixed_dim_gives_what_the_run_returns(fast_device, stage_threads):
    """Issue 26, item 1: ORT refuses a buffer bound for ``label`` (it checks the declared
    [1]); the retry it allocates succeeds, and the output is kept as the run returns it."""
    model = _misdeclared_label_model()
    x = np.random.default_rng(0).standard_normal((300, 4)).astype(np.float32)
    options = PipelineOptions(stage_threads=stage_threads, direct=False)
    with Pipeline(model, device=fast_device, depth=2, options=options) as pipe:
        for attempt in ("finds it", "knows it"):
            out = pipe.run({"x": x}, batch_size=64)
            assert pipe.session.dynamic_outputs == {"label"}, attempt
            assert pipe.data_dependent_outputs == frozenset(), "a row each: not a count of its own (issue 37, 6)"
            np.testing.assert_array_equal(out["label"], x.argmax(axis=1))
            assert out["prob"].shape == (300, 4)
    assert wait_no_threads() == []

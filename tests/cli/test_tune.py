"""``ortpipe tune`` end to end (NOTE [ tuning ]): its config round-trips into ``run``, ``bench`` and ``Pipeline``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline import Pipeline, PipelineError, PipelineOptions
from pipeline.cli import main
from pipeline.tune import load_settings


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tune")
    np.save(folder / "x.npy", np.random.default_rng(0).random((64, 64), np.float32))
    config = folder / "tuned.json"
    argv = ["tune", "mlp", "--data", str(folder / "x.npy"), "--budget", "2", "--rounds", "1", "--device", "cpu"]
    assert main([*argv, "--output", str(config)]) == 0
    return folder, config


def test_tune_writes_the_winner_what_it_tried_and_its_check(tuned, capsys):
    _, config = tuned
    saved = json.loads(config.read_text())
    settings = load_settings(config)
    assert saved["settings"]["batch_size"] == settings.batch_size <= 64  # within the data's rows
    assert saved["model"] == "mlp" and saved["tried"] and saved["items_per_s"] > 0
    assert all(t["check"]["ok"] for t in saved["tried"] if t["check"] is not None)
    assert PipelineOptions.from_file(config) == PipelineOptions.from_settings(settings)


def test_the_config_sets_runs_defaults_and_an_option_given_wins(tuned, capsys):
    folder, config = tuned
    settings = load_settings(config)
    stats = folder / "stats.json"
    argv = ["run", "mlp", "--input", str(folder / "x.npy"), "--device", "cpu", "--no-progress", "--overwrite"]
    assert main([*argv, "--output", str(folder / "o.npy"), "--config", str(config), "--stats", str(stats)]) == 0
    assert json.loads(stats.read_text())["batches"] == -(-64 // settings.batch_size)
    assert main([*argv, "--output", str(folder / "o.npy"), "--config", str(config), "--stats", str(stats),
                 "--batch-size", "5"]) == 0  # fmt: skip
    assert json.loads(stats.read_text())["batches"] == -(-64 // 5)
    with Pipeline(_mlp(), device="cpu", batch_size=settings.batch_size,
                  depth=settings.depth, options=PipelineOptions.from_file(config)) as pipe:  # fmt: skip
        assert pipe.run(np.load(folder / "x.npy"))["scores"].shape[0] == 64


def test_the_config_sets_benchs_batch_size_depth_and_mode(tuned, capsys):
    folder, config = tuned
    settings = load_settings(config)
    report = folder / "bench.json"
    assert (
        main(["bench", "mlp", "--config", str(config), "--batches", "2", "--no-progress", "--json", str(report)]) == 0
    )
    data = json.loads(report.read_text())
    assert data["batch_sizes"] == [settings.batch_size]
    mode = {"caller": "caller", "threads": "pipelined", "auto": "auto"}[settings.issuing]
    assert [(row["mode"], row["depth"]) for row in data["results"]] == [("naive", None), (mode, settings.depth)]


def test_a_config_of_another_kind_is_refused_saying_so(tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"batch_size": 8}))
    assert main(["bench", "mlp", "--config", str(other), "--batches", "1", "--no-progress"]) == 2
    assert "is not one that ortpipe tune wrote" in capsys.readouterr().err
    with pytest.raises(PipelineError, match="is not one that ortpipe tune wrote"):
        PipelineOptions.from_file(other)


def _mlp():
    from pipeline import models

    return models.mlp()

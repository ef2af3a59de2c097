"""``ortpipe tune``'s settings against the defaults, as whole ``ortpipe run`` commands (issue 38's figures).

For a cheap tabular model (the built-in ``mlp``: 64 float32 features a row) and the conv net
(``convnet``: 3x64x64 float32 frames), over one ``.npy`` input each:

1. ``ortpipe tune MODEL --data IN.npy --budget 40 --output T.json``;
2. ``ortpipe run MODEL --input IN.npy --output O.npy`` with the defaults and with ``--config
   T.json``, alternated (A B A B ...), three rounds each, as subprocesses.

The ratio printed is the defaults' median seconds over the tuned run's, with every round's
seconds beside it; the tuned settings and what tune said are printed too.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import numpy as np
import pytest
from commands import alternated, said_seconds  # benchmarks/commands.py

ROUNDS = 3
INPUTS = {"mlp": (400_000, (64,)), "convnet": (4_000, (3, 64, 64))}


@pytest.mark.parametrize("model", list(INPUTS))
def test_tuned_settings_against_the_defaults_in_ortpipe_run(benchmark, tmp_path, model):
    rows, row = INPUTS[model]
    data = tmp_path / "in.npy"
    np.save(data, np.random.default_rng(0).random((rows, *row), np.float32))
    config = tmp_path / "tuned.json"
    cli = [sys.executable, "-m", "pipeline.cli"]
    tune = [*cli, "tune", model, "--data", str(data), "--budget", "40", "--device", "cpu", "--output", str(config)]
    said = subprocess.run(tune, check=True, capture_output=True, text=True, timeout=900).stdout
    run = [*cli, "run", model, "--input", str(data), "--output", str(tmp_path / "o.npy"), "--device", "cpu",
           "--no-progress", "--overwrite"]  # fmt: skip
    commands = {"defaults": run, "tuned": [*run, "--config", str(config)]}
    seconds = benchmark.pedantic(alternated, args=(commands, ROUNDS), rounds=1, iterations=1)
    ratio = statistics.median(seconds["defaults"]) / statistics.median(seconds["tuned"])
    settings = json.loads(config.read_text())["settings"]
    benchmark.extra_info.update(seconds=seconds, ratio=ratio, settings=settings)
    runs = said_seconds(seconds)
    summary = next(line for line in said.splitlines() if line.startswith("tuned:"))
    print(f"\n{model}, {rows:,} rows: {summary}\n  ortpipe run, defaults / tuned: {ratio:.2f}x ({runs})")

"""Embedding a corpus: ``ortpipe run --text-column`` against what a user writes (issue 39's figures).

20,000 texts of a log-normal number of words (median 20, tail cut at 300) in one Parquet file,
embedded by a BERT-like encoder made in the tests' way (``tests/text_models.py``: one attention
block of 128 wide, a feed-forward block of 512, a WordPiece tokenizer of 300 tokens), mean pooled:

* ``ortpipe run FOLDER --input docs.parquet --text-column text --output emb.parquet``;
* the user's script: pyarrow reads, batches of 64 rows in input order, ``encode_batch`` padded to
  each batch's longest, ``session.run``, mean pooling in numpy, pyarrow writes;
* the same script with every text padded to the longest text's length (once: it is slow).

The first two run as subprocesses alternated, three rounds each; the ratio is the script's
median seconds over ortpipe's, every round's seconds beside it.
"""

from __future__ import annotations

import statistics
import sys

import numpy as np
import pytest
from commands import alternated, said_seconds, timed_command  # benchmarks/commands.py

TEXTS, ROUNDS = 20_000, 3

SCRIPT = """
import sys
import numpy as np, onnxruntime as ort, pyarrow as pa, pyarrow.parquet as pq
from tokenizers import Tokenizer

folder, source, target, pad_to = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tokenizer = Tokenizer.from_file(folder + "/tokenizer.json")
tokenizer.enable_truncation(512)
tokenizer.enable_padding(length=pad_to or None)
session = ort.InferenceSession(folder + "/onnx/model.onnx", providers=["CPUExecutionProvider"])
texts = pq.read_table(source)["text"].to_pylist()
vectors = []
for start in range(0, len(texts), 64):
    encodings = tokenizer.encode_batch(texts[start : start + 64])
    ids = np.array([e.ids for e in encodings], np.int64)
    mask = np.array([e.attention_mask for e in encodings], np.int64)
    types = np.array([e.type_ids for e in encodings], np.int64)
    hidden = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
    weights = mask[:, :, None].astype(np.float32)
    vectors.append((hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9))
pq.write_table(pa.table({"embedding": list(np.concatenate(vectors))}), target)
"""


def test_ortpipe_run_against_batches_of_64_padded_to_their_longest(benchmark, tmp_path):
    pytest.importorskip("tokenizers")
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))
    from tests.text_models import corpus, model_folder

    folder = model_folder(tmp_path / "encoder", hidden=128, ffn=512)
    texts = corpus(TEXTS, seed=1, median_words=20, most_words=300)
    source = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"text": texts}), source)
    script = tmp_path / "embed.py"
    script.write_text(SCRIPT)
    ours, theirs = tmp_path / "ortpipe.parquet", tmp_path / "script.parquet"
    commands = {
        "ortpipe run": [sys.executable, "-m", "pipeline.cli", "run", str(folder), "--input", str(source),
                        "--text-column", "text", "--output", str(ours), "--no-progress", "--overwrite"],
        "script": [sys.executable, str(script), str(folder), str(source), str(theirs), "0"],
    }  # fmt: skip
    seconds = benchmark.pedantic(alternated, args=(commands, ROUNDS), rounds=1, iterations=1)
    got = np.stack(pq.read_table(ours)["embedding"].to_numpy(zero_copy_only=False))
    want = np.stack(pq.read_table(theirs)["embedding"].to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    longest = max(len(e) for e in __import__("tokenizers").Tokenizer.from_file(str(folder / "tokenizer.json"))
                  .encode_batch(texts))  # fmt: skip
    padded = timed_command([*commands["script"][:-1], str(min(512, longest))])
    ratio = statistics.median(seconds["script"]) / statistics.median(seconds["ortpipe run"])
    to_longest = padded / statistics.median(seconds["ortpipe run"])
    benchmark.extra_info.update(seconds=seconds, ratio=ratio, padded_to_longest_s=padded)
    said = said_seconds(seconds)
    print(f"\n{TEXTS:,} texts: the script's median / ortpipe run's = {ratio:.2f}x ({said}); every text "
          f"padded to the longest ({longest} tokens): {padded:.2f} s, {to_longest:.2f}x ortpipe's")  # fmt: skip

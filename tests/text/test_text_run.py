"""``ortpipe run MODEL --input T --text-column text``: a corpus embedded, each result equal to
scoring its text alone, in input order, in every output format; resumed, windowed, paired."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main

from ..text_models import alone, corpus, model_folder

pytest.importorskip("tokenizers")

ROWS = 240


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return model_folder(tmp_path_factory.mktemp("encoder"))


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    path = tmp_path_factory.mktemp("docs") / "docs.parquet"
    texts = corpus(ROWS, seed=3)
    pq.write_table(pa.table({"id": np.arange(1000, 1000 + ROWS), "text": texts}), path)
    return path, texts


@pytest.fixture(scope="module")
def expected(folder, docs):
    return alone(folder, docs[1])


def _embeddings(path):
    table = pq.read_table(path)
    return table.column(0).to_numpy(), np.stack(table["embedding"].to_numpy(zero_copy_only=False))  # id, or row_id


def _run(folder, source, output, *more):
    args = ["run", str(folder), "--input", str(source), "--text-column", "text", "--output", str(output)]
    return main([*args, "--device", "cpu", "--no-progress", "--max-batch-tokens", "256", *more])


def test_a_corpus_is_embedded_in_input_order_equal_to_each_text_alone(folder, docs, expected, tmp_path, capsys):
    assert _run(folder, docs[0], tmp_path / "emb.parquet", "--id-column", "id") == 0
    said = capsys.readouterr()
    ids, vectors = _embeddings(tmp_path / "emb.parquet")
    np.testing.assert_array_equal(ids, np.arange(1000, 1000 + ROWS))  # input order, not sorted by length
    np.testing.assert_allclose(vectors, expected, rtol=1e-4, atol=1e-5)
    assert "mean pooling in the graph" in said.out and "256 a batch" in said.out
    assert "issued by caller thread" in said.out  # on the CPU: the tokenizer and ORT each take every CPU
    assert "note: tokens: " in said.err and "real of" in said.err  # the padding's waste, said


@pytest.mark.parametrize("issuing", ["threads", "caller"])
def test_every_way_of_issuing_writes_the_same_rows(folder, docs, expected, tmp_path, issuing):
    """Stage threads hand the sink views of a pinned slot that the next batches reuse: the rows
    held back until the rows before them come are copies (NOTE [ rows put back in order ])."""
    assert _run(folder, docs[0], tmp_path / "emb.parquet", "--id-column", "id", "--issuing", issuing) == 0
    ids, vectors = _embeddings(tmp_path / "emb.parquet")
    np.testing.assert_array_equal(ids, np.arange(1000, 1000 + ROWS))
    np.testing.assert_allclose(vectors, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".npy"])
def test_every_output_format_holds_the_rows_in_input_order(folder, docs, expected, tmp_path, suffix):
    output = tmp_path / f"emb{suffix}"
    assert _run(folder, docs[0], output, "--id-column", "id") == 0
    if suffix == ".npy":
        np.testing.assert_allclose(np.load(output), expected, rtol=1e-4, atol=1e-5)
        return
    if suffix == ".csv":
        table = pacsv.read_csv(output)
        vectors = np.stack([table[f"embedding_{i}"].to_numpy() for i in range(expected.shape[1])], axis=1)
        ids = table["id"].to_numpy()
    else:
        rows = [json.loads(line) for line in output.read_text().splitlines()]
        ids, vectors = np.array([r["id"] for r in rows]), np.array([r["embedding"] for r in rows])
    np.testing.assert_array_equal(ids, np.arange(1000, 1000 + ROWS))
    np.testing.assert_allclose(vectors, expected, rtol=1e-4, atol=1e-5)


def test_a_stopped_run_resumes_and_a_window_of_rows_keeps_its_ids(folder, docs, expected, tmp_path, capsys):
    output = tmp_path / "emb.parquet"
    assert _run(folder, docs[0], output, "--id-column", "id", "--limit", "100") == 0
    assert len(pq.read_table(output)) == 100
    assert _run(folder, docs[0], output, "--id-column", "id", "--resume") == 0
    assert "resuming:" in capsys.readouterr().out
    ids, vectors = _embeddings(output)
    np.testing.assert_array_equal(ids, np.arange(1000, 1000 + ROWS))
    np.testing.assert_allclose(vectors, expected, rtol=1e-4, atol=1e-5)
    window = tmp_path / "window.parquet"
    assert _run(folder, docs[0], window, "--id-column", "id", "--rows", "50:130") == 0
    ids, vectors = _embeddings(window)
    np.testing.assert_array_equal(ids, np.arange(1050, 1130))
    np.testing.assert_allclose(vectors, expected[50:130], rtol=1e-4, atol=1e-5)


def test_pairs_truncation_and_normalizing(folder, tmp_path):
    texts, pairs = corpus(40, seed=5), corpus(40, seed=6)
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps({"text": a, "other": b}) + "\n" for a, b in zip(texts, pairs, strict=True)))
    output = tmp_path / "pairs.parquet"
    assert _run(folder, source, output, "--text-pair-column", "other", "--normalize") == 0
    ids, vectors = _embeddings(output)
    np.testing.assert_array_equal(ids, np.arange(40))  # row_id: the row's number
    np.testing.assert_allclose(vectors, alone(folder, texts, normalize=True, pairs=pairs), rtol=1e-4, atol=1e-5)
    long = tmp_path / "long.parquet"
    pq.write_table(pa.table({"text": [" ".join(["alpha"] * 200), "beta"]}), long)
    assert _run(folder, long, tmp_path / "cut.parquet", "--max-length", "16") == 0
    cut = _embeddings(tmp_path / "cut.parquet")[1]
    short = alone(folder, [" ".join(["alpha"] * 14), "beta"])  # 14 words and [CLS], [SEP]: 16 tokens
    np.testing.assert_allclose(cut, short, rtol=1e-4, atol=1e-5)


def test_nulls_and_wrong_options_are_refused_clearly_and_empty_texts_are_scored(folder, tmp_path, capsys):
    table = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"text": ["one", None, "three"]}), table)
    assert _run(folder, table, tmp_path / "o.parquet") == 1
    assert "row 1 of text column 'text' is null" in capsys.readouterr().err
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"text": ["", "alpha"]}), empty)
    assert _run(folder, empty, tmp_path / "e.parquet") == 0
    np.testing.assert_allclose(_embeddings(tmp_path / "e.parquet")[1], alone(folder, ["", "alpha"]), rtol=1e-4)
    argv = ["run", str(folder), "--input", str(empty), "--output", str(tmp_path / "x.parquet"), "--no-progress"]
    assert main([*argv, "--pooling", "cls"]) == 1
    assert "are for a table's texts: give --text-column too" in capsys.readouterr().err
    assert main([*argv, "--text-column", "nope"]) == 1
    assert "text column 'nope' is not in" in capsys.readouterr().err


def test_embed_in_python_equals_each_text_alone(folder):
    from pipeline.text import embed

    texts = corpus(30, seed=8)
    vectors = embed(folder, texts, device="cpu", max_batch_tokens=128)
    np.testing.assert_allclose(vectors, alone(folder, texts), rtol=1e-4, atol=1e-5)
    cls = embed(folder / "onnx" / "model.onnx", texts, tokenizer=folder, pooling="cls", device="cpu")
    np.testing.assert_allclose(cls, alone(folder, texts, pooling="cls"), rtol=1e-4, atol=1e-5)


def test_a_text_classifier_takes_top_k_with_its_config_labels(tmp_path):
    import onnxruntime as ort
    from tokenizers import Tokenizer

    from ..text_models import classifier_folder

    folder = classifier_folder(tmp_path / "classifier")
    texts = corpus(30, seed=9)
    pq.write_table(pa.table({"text": texts}), tmp_path / "docs.parquet")
    output = tmp_path / "labels.parquet"
    assert _run(folder, tmp_path / "docs.parquet", output, "--top-k", "logits=1") == 0
    table = pq.read_table(output)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    session = ort.InferenceSession(str(folder / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    best = []
    for text in texts:
        e = tokenizer.encode(text)
        feeds = {"input_ids": [e.ids], "attention_mask": [e.attention_mask], "token_type_ids": [e.type_ids]}
        best.append(int(session.run(None, {k: np.array(v) for k, v in feeds.items()})[0][0].argmax()))
    names = ("negative", "neutral", "positive")
    label_column = next(name for name in table.column_names if name.endswith("_label"))
    assert table[label_column].to_pylist() == [names[i] for i in best]


def test_a_text_job_killed_mid_run_resumes_to_every_row_once_and_shards_cover_the_corpus(folder, tmp_path):
    """SIGKILL while rows are held back for their order, then --resume: every row once, in order,
    each equal to its text alone; two shards hold every row once between them."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from ..helpers import ROOT, stop_signals_handled

    texts = corpus(1500, seed=21)
    source = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"text": texts}), source)
    output = tmp_path / "emb.parquet"
    argv = ["run", str(folder), "--input", str(source), "--text-column", "text", "--output", str(output),
            "--device", "cpu", "--no-progress", "--max-batch-tokens", "256", "--part-rows", "64"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", *argv], env=env, preexec_fn=stop_signals_handled,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    from pipeline.sinks import journal_of

    journal = journal_of(output)
    deadline = time.monotonic() + 60
    while process.poll() is None and time.monotonic() < deadline:
        if journal.is_dir() and len(list(journal.glob("part-*.parquet"))) >= 2:
            break
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert journal.is_dir() and not output.exists()  # killed mid-run: its closed parts, nothing under the name
    assert main([*argv, "--resume"]) == 0
    ids, vectors = _embeddings(output)
    np.testing.assert_array_equal(ids, np.arange(1500))
    sample = np.arange(0, 1500, 97)
    np.testing.assert_allclose(vectors[sample], alone(folder, [texts[i] for i in sample]), rtol=1e-4, atol=1e-5)
    shards = [tmp_path / f"shard{k}.parquet" for k in range(2)]
    for k, shard in enumerate(shards):
        assert main([*argv[:7], str(shard), *argv[8:], "--shard", f"{k}/2"]) == 0
    together = np.concatenate([_embeddings(shard)[0] for shard in shards])
    np.testing.assert_array_equal(together, np.arange(1500))

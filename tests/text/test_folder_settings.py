"""NOTE [ a folder's own settings ]: a sentence-transformers folder, laid out file by file as
its ``save(..., backend="onnx")`` writes one, embeds as its own ``encode`` would: its max
length, pooling and Normalize step; flags override; what the graph lacks is refused.
NOTE [ texts cut before tokenizing ]: a long text costs about what a short one does."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from pipeline.text import TextEncoder, embed, folder_settings
from pipeline.util.errors import ModelError, SourceError

from ..text_models import HIDDEN, corpus, model_folder

pytest.importorskip("tokenizers")

MAX = 12  # tokens: short enough that the corpus's longer texts are cut


def _st_folder(path, pooling_config, modules=("Transformer", "Pooling", "Normalize"), max_length=MAX):
    """sentence-transformers' layout: modules.json, sentence_bert_config.json, 1_Pooling/config.json."""
    model_folder(path)
    places = {"Transformer": "", "Pooling": "1_Pooling", "Normalize": "2_Normalize", "Dense": "2_Dense"}
    listed = [
        {"idx": i, "name": str(i), "path": places[kind], "type": f"sentence_transformers.models.{kind}"}
        for i, kind in enumerate(modules)
    ]
    (path / "modules.json").write_text(json.dumps(listed))
    if max_length is not None:
        (path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_length}))
    (path / "1_Pooling").mkdir(exist_ok=True)
    (path / "1_Pooling" / "config.json").write_text(json.dumps(pooling_config))
    return path


def _reference(folder, texts, pooling, normalize, max_length):
    """Each text alone, as sentence-transformers' encode makes it: truncated, pooled, normalized."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_truncation(max_length)
    session = ort.InferenceSession(str(folder / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    vectors = []
    for text in texts:
        e = tokenizer.encode(text)
        feeds = {"input_ids": [e.ids], "attention_mask": [e.attention_mask], "token_type_ids": [e.type_ids]}
        hidden = session.run(None, {k: np.array(v) for k, v in feeds.items()})[0][0]
        vector = hidden.mean(axis=0) if pooling == "mean" else hidden[0]
        vectors.append(vector / np.linalg.norm(vector) if normalize else vector)
    return np.stack(vectors)


NEW = {"embedding_dimension": HIDDEN, "pooling_mode": "cls", "include_prompt": True}
OLD = {"word_embedding_dimension": HIDDEN, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}


@pytest.mark.parametrize("config", [NEW, OLD], ids=["newer releases", "older releases"])
def test_a_sentence_transformers_folder_embeds_with_its_own_settings(tmp_path, config):
    folder = _st_folder(tmp_path / "st", config)
    texts = corpus(40, seed=5, median_words=10)
    settings = folder_settings(folder)
    assert (settings.max_length, settings.pooling, settings.normalize) == (MAX, "cls", True)
    assert settings.said() == (
        f"max length {MAX} (sentence_bert_config.json); pooling cls (1_Pooling/config.json); "
        "normalized: yes (modules.json's Normalize)"
    )
    got = embed(folder, texts, device="cpu")
    np.testing.assert_allclose(got, _reference(folder, texts, "cls", True, MAX), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)
    # flags override each of them
    overridden = embed(folder, texts, pooling="mean", normalize=False, max_length=512, device="cpu")
    np.testing.assert_allclose(overridden, _reference(folder, texts, "mean", False, 512), rtol=1e-5, atol=1e-6)


def test_a_newer_folder_keeps_its_max_length_in_tokenizer_config(tmp_path):
    folder = _st_folder(tmp_path / "st", NEW, max_length=None)
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 20}))
    settings = folder_settings(folder)
    assert (settings.max_length, settings.max_length_from) == (20, "tokenizer_config.json")
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": int(1e30)}))
    assert folder_settings(folder).max_length is None  # transformers' "no limit": the tokenizer's own


def test_the_run_says_where_each_setting_came_from_and_writes_them(tmp_path, capsys):
    folder = _st_folder(tmp_path / "st", NEW)
    texts = corpus(30, seed=6)
    source = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": np.arange(30), "day": ["d"] * 30, "text": texts}), source)
    output = tmp_path / "emb.parquet"
    argv = ["run", str(folder), "--input", str(source), "--text-column", "text", "--output", str(output)]
    assert main([*argv, "--id-column", "id", "--keep", "day", "--device", "cpu", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "text: max length 12 (sentence_bert_config.json); pooling cls (1_Pooling/config.json)" in out
    table = pq.read_table(output)
    assert table.column_names[:2] == ["id", "day"] and table["day"].to_pylist() == ["d"] * 30
    got = np.stack(table["embedding"].to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(got, _reference(folder, texts, "cls", True, MAX), rtol=1e-5, atol=1e-6)
    assert main([*argv[:-1], str(tmp_path / "raw.parquet"), "--no-normalize", "--device", "cpu", "--no-progress"]) == 0
    assert "normalized: no (--no-normalize)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("modules", "config", "said"),
    [
        (("Transformer", "Pooling", "Dense", "Normalize"), NEW, r"lists a Dense step \(2_Dense\) that the ONNX graph"),
        (("Transformer", "Pooling"), {"pooling_mode": "max"}, r"asks for max pooling; ortpipe makes one of"),
        (("Transformer", "Pooling"), {"pooling_mode": ["mean", "max"]}, r"asks for mean \+ max pooling"),
    ],
)
def test_what_the_graph_lacks_is_refused_with_the_reason(tmp_path, modules, config, said):
    folder = _st_folder(tmp_path / "st", config, modules=modules)
    with pytest.raises(ModelError, match=said):
        embed(folder, ["a text"], device="cpu")


def test_embed_refuses_what_is_not_a_list_of_texts_and_gives_no_rows_their_width(tmp_path):
    folder = model_folder(tmp_path / "m")
    with pytest.raises(SourceError, match=r"texts\[2\] is None, not a str"):
        embed(folder, ["a", "b", None], device="cpu")
    with pytest.raises(SourceError, match=r"texts is one string, not a list of them"):
        embed(folder, "one text", device="cpu")
    assert embed(folder, [], device="cpu").shape == (0, HIDDEN)


def test_a_long_text_is_cut_by_characters_with_the_same_ids_as_uncut(tmp_path):
    """NOTE [ texts cut before tokenizing ]: the ids are the uncut text's, whatever its spaces."""
    from tokenizers import Tokenizer

    folder = model_folder(tmp_path / "m")
    plain = Tokenizer.from_file(str(folder / "tokenizer.json"))
    plain.enable_truncation(MAX)
    words = " ".join(corpus(2000, seed=7))
    texts = [
        words * 40,  # megabytes of words: cut at once
        "a b c d e f g h " + "".join(words.split())[:150] + " " + words,  # a word cut mid-way: WordPiece's
        # [UNK] for a word of over 100 characters, pieces for the cut one
        "alpha" + " " * 5000 + words,  # white space that makes no tokens
        words[:50],  # short: never cut
        "\n".join(corpus(400, seed=8)),
    ]
    encoder = TextEncoder(folder / "tokenizer.json", MAX)
    got = encoder.encode(texts)
    for text, encoding in zip(texts, got, strict=True):
        assert encoding.ids == plain.encode(text).ids
    assert len(texts[0]) > 1 << 20
    # pairs: each text of a pair cut alike, the truncation between them as uncut (texts of a few
    # thousand characters: tokenizers' overflow of an uncut pair grows with the product of the two)
    medium = [
        words[:3000],
        "alpha" + " " * 500 + words[:2000],
        "a b c " + "".join(words.split())[:150] + " " + words[:1500],
    ]
    firsts, seconds = [medium[0], "short one", medium[1], medium[2]], ["short two", medium[0], medium[2], medium[1]]
    for first, second, encoding in zip(firsts, seconds, encoder.encode(firsts, seconds), strict=True):
        want = plain.encode(first, second)
        assert (encoding.ids, encoding.type_ids) == (want.ids, want.type_ids)


def test_embed_without_pooling_gives_each_text_its_own_tokens(tmp_path):
    """Issue 54: token outputs of different lengths are no one array: a text's own rows each."""
    from ..text_models import alone

    folder = model_folder(tmp_path / "m")
    texts = corpus(20, seed=11)
    got = embed(folder, texts, pooling="none", max_batch_tokens=128, device="cpu")
    assert isinstance(got, list) and len(got) == len(texts)
    for mine, text in zip(got, texts, strict=True):
        (theirs,) = alone(folder, [text], pooling="none")
        assert mine.shape == theirs.shape
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-5)


def test_a_text_table_finds_its_id_as_any_table_does(tmp_path, capsys):
    """NOTE [ the table plan ]: the one column named like an id is the rows' id, written exactly."""
    folder = model_folder(tmp_path / "m")
    ids = [f"doc-{i}" for i in range(12)]
    source = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"doc_id": ids, "text": corpus(12, seed=4)}), source)
    output = tmp_path / "emb.parquet"
    argv = ["run", str(folder), "--input", str(source), "--text-column", "text", "--output", str(output)]
    assert main([*argv, "--device", "cpu", "--no-progress"]) == 0
    table = pq.read_table(output)
    assert table.column_names[0] == "doc_id" and table["doc_id"].to_pylist() == ids

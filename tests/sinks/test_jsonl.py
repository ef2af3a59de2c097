"""JSON Lines text made a column at a time (pipeline._jsonl) against what Python's json reads back."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.sinks._json_text import infinities, json_lines

pa = pytest.importorskip("pyarrow")


def _read(text: bytes) -> list[dict]:
    assert text.endswith(b"\n") or not text
    return [json.loads(line) for line in text.decode("utf-8").split("\n")[:-1]]


def _as_json(value):
    """What a row's value reads back as: NaN null, as JSON has none; infinities as themselves."""
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, list):
        return [_as_json(item) for item in value]
    if isinstance(value, dict):
        return {key: _as_json(item) for key, item in value.items()}
    return value


def test_float32_is_written_as_its_own_shortest_text_and_reads_back_as_the_same_float32():
    values = np.array([0.1, 1.0, 1e-5, 3.4028235e38, -0.0, 1.1754944e-38, 123456.79], dtype=np.float32)
    text = json_lines(pa.record_batch({"y": pa.array(values)}))
    assert text.split(b"\n")[0] == b'{"y":0.1}'  # not 0.10000000149011612, the double it is
    assert text.split(b"\n")[1] == b'{"y":1.0}'  # a float, as a JSON reader reads it, not the integer 1
    read = np.array([row["y"] for row in _read(text)], dtype=np.float32)
    np.testing.assert_array_equal(read, values)
    assert np.signbit(read[4])


def test_float64_reads_back_exactly():
    values = np.random.default_rng(3).standard_normal(200) * 10.0 ** np.arange(-100, 100)
    read = [row["t"] for row in _read(json_lines(pa.record_batch({"t": pa.array(values)})))]
    assert read == values.tolist()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_nan_and_null_are_null_and_infinities_read_back_as_themselves_in_scalars_and_lists(dtype):
    """Issue 34, item 4: +inf and -inf as Infinity and -Infinity (Python's json, pandas and pyarrow
    read them back), never null as NaN is; counted for the run to say so."""
    values = np.array([[1.5, np.nan], [np.inf, -np.inf]], dtype=dtype)
    batch = pa.record_batch(
        {
            "x": pa.array(values[:, 1]),
            "v": pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), 2),
            "i": pa.array([7, None], type=pa.int64()),
            "n": pa.array([None, 2.5], type=pa.float32()),
        }
    )
    text = json_lines(batch)
    expected = [
        {"x": None, "v": [1.5, None], "i": 7, "n": None},
        {"x": -math.inf, "v": [math.inf, -math.inf], "i": None, "n": 2.5},
    ]
    assert _read(text) == expected
    assert b'"v":[Infinity,-Infinity]' in text
    assert infinities(batch) == 3
    import io

    import pyarrow.json as pjson

    assert pjson.read_json(io.BytesIO(text)).to_pylist() == expected


def test_strings_are_quoted_and_escaped_only_where_needed_and_kept_utf8():
    names = ["a.jpg", 'say "hi".jpg', "back\\slash", "tab\there\nnewline", "façade/日本.png", None, ""]
    text = json_lines(pa.record_batch({"path": pa.array(names)}))
    assert [row["path"] for row in _read(text)] == names
    assert "façade/日本.png".encode() in text  # written as UTF-8, not \u escapes
    plain = json_lines(pa.record_batch({"path": pa.array(["a", "b"])}))
    assert plain == b'{"path":"a"}\n{"path":"b"}\n'


def test_lists_of_every_kind_sliced_and_null():
    labels = pa.array([["cat", "dog"], [], None, ['"quoted"'], ["x"]])
    scores = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(10, dtype=np.float32) / 8), 2)
    classes = pa.array([[1, 2], [3], [], [4], None], type=pa.list_(pa.int32()))
    pairs = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(10)), 2, mask=pa.array([False, True] * 2 + [False]))
    batch = pa.record_batch({"labels": labels, "scores": scores, "classes": classes, "pairs": pairs})
    for start, stop in [(0, 5), (1, 4), (2, 5), (4, 5)]:
        part = batch.slice(start, stop - start)
        assert _read(json_lines(part)) == [_as_json(row) for row in part.to_pylist()], (start, stop)


def test_names_booleans_integers_float16_and_an_empty_batch():
    batch = pa.record_batch(
        {
            'the "key"': pa.array([True, False]),
            "u8": pa.array(np.array([0, 255], dtype=np.uint8)),
            "i64": pa.array(np.array([-(2**62), 2**62])),
            "f16": pa.array(np.array([0.1, np.nan], dtype=np.float16)),
        }
    )
    text = json_lines(batch)
    assert text.split(b"\n")[0] == b'{"the \\"key\\"":true,"u8":0,"i64":-4611686018427387904,"f16":0.1}'
    assert _read(text)[1] == {'the "key"': False, "u8": 255, "i64": 2**62, "f16": None}
    assert json_lines(batch.slice(0, 0)) == b""


def test_a_column_of_another_type_goes_through_json():
    batch = pa.record_batch({"kind": pa.array(["cat", "dog", "cat"]).dictionary_encode()})
    assert _read(json_lines(batch)) == [{"kind": "cat"}, {"kind": "dog"}, {"kind": "cat"}]


def test_large_strings_are_written_as_strings_are():
    batch = pa.record_batch({"path": pa.array(["a", "bc", "d"], type=pa.large_string())})
    assert json_lines(batch) == b'{"path":"a"}\n{"path":"bc"}\n{"path":"d"}\n'


_floats = st.floats(width=32, allow_nan=True, allow_infinity=True)
_three_floats = st.lists(_floats, min_size=3, max_size=3)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(-(2**63), 2**63 - 1), st.text(max_size=6), _floats, _three_floats),
        min_size=1,
        max_size=12,
    ),
    start=st.integers(0, 11),
)
def test_any_rows_read_back_as_json_reads_the_same_rows(rows, start):
    batch = pa.record_batch(
        {
            "id": pa.array([row[0] for row in rows], type=pa.int64()),
            "path": pa.array([row[1] for row in rows]),
            "score": pa.array(np.array([row[2] for row in rows], dtype=np.float32)),
            "v": pa.FixedSizeListArray.from_arrays(pa.array(np.array([row[3] for row in rows], np.float32).ravel()), 3),
        }
    )
    batch = batch.slice(min(start, len(rows) - 1))
    read = _read(json_lines(batch))
    expected = [_as_json(row) for row in batch.to_pylist()]
    for got, want in zip(read, expected, strict=True):
        assert (got["id"], got["path"]) == (want["id"], want["path"])
        for value, wanted in [(got["score"], want["score"]), *zip(got["v"], want["v"], strict=True)]:
            # each float32 as its own shortest text: the same float32 once read back
            assert (value is None) == (wanted is None) and (value is None or np.float32(value) == np.float32(wanted))


@pytest.mark.parametrize("output", ["o.csv", "o.jsonl", "-csv", "-jsonl"])
def test_infinities_and_nan_read_back_distinctly_through_every_text_output(tmp_path, capsys, output):
    """Issue 34, item 4, through ``ortpipe run``: +inf, -inf, NaN and a finite value each read back
    as itself (CSV: inf, -inf, nan; JSON Lines: Infinity, -Infinity, null), said once for JSON Lines."""
    import io

    import onnx
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson

    from pipeline import models
    from pipeline.cli import main

    onnx.save(models.identity(features=4), tmp_path / "id.onnx")
    x = np.ones((4, 4), np.float32)
    x[0, 0], x[1, 1], x[2, 2] = np.inf, -np.inf, np.nan
    np.save(tmp_path / "x.npy", x)
    argv = ["run", str(tmp_path / "id.onnx"), "--input", str(tmp_path / "x.npy"), "--no-progress", "--output"]
    if output.startswith("-"):
        argv += ["-", "--output-format", output[1:]]
    else:
        argv += [str(tmp_path / output)]
    assert main(argv) == 0
    said = capsys.readouterr()  # standard output: the rows alone, the run's lines on standard error
    text = said.out if output.startswith("-") else (tmp_path / output).read_text()
    if "csv" in output:
        table = pcsv.read_csv(io.BytesIO(text.encode()))
        got = np.stack([table[f"y_{i}"].to_numpy(zero_copy_only=False) for i in range(4)], axis=1)
        assert "0,inf,1,1,1" in text and "1,1,-inf,1,1" in text and "2,1,1,nan,1" in text
        np.testing.assert_array_equal(got, x)
    else:
        rows = pjson.read_json(io.BytesIO(text.encode()))["y"].to_pylist()
        assert rows[0][0] == math.inf and rows[1][1] == -math.inf and rows[2][2] is None
        shown = said.err if output.startswith("-") else said.out
        assert shown.count("2 value(s) were +inf or -inf: written to JSON Lines as Infinity and -Infinity") == 1

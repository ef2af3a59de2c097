"""JSON Lines text of an Arrow record batch, encoded a column at a time.

The JSON Lines sinks write a batch's rows as ``{"key":value,...}`` lines.  Going
through Python objects (``batch.to_pylist()`` and ``json.dumps`` a row) costs a
few microseconds a value and writes a float32 as the double it is
(``0.10000000149011612`` for ``0.1``).  Here each column becomes the JSON text of
its values by Arrow's compute kernels, in C++: numbers by Arrow's shortest
round-trip formatting *of their own type* (a float32 ``0.1`` is written ``0.1``,
and reads back, cast to float32, as the same float32), strings quoted (escaped
by ``json`` only where a value needs it), lists joined; then the columns are
joined into lines, and the lines' bytes are one Arrow buffer, taken whole.

The literal pieces (the braces, the keys, ``null``) are Arrow scalars made from
their bytes (:func:`_text`): pyarrow turns a Python string into a scalar through
its pandas shim, which imports pandas where it is installed - a fifth of a
second of a run's first write.

JSON has no NaN or infinity.  A NaN, and a null, is written ``null``; +inf and
-inf are written ``Infinity`` and ``-Infinity``, as Python's ``json``, pandas and
pyarrow write and read them, so that they read back as themselves, not as a
missing value (a strict parser, such as JavaScript's ``JSON.parse``, refuses
them: :func:`infinities` counts them, for the run to say so).  A float16 goes through numpy, whose
shortest text is float16's own (Arrow writes a float16 exactly, 13 digits for
``0.1``).  A column of any other type (none that the sinks make) goes the slow
way, through ``json.dumps``.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import numpy as np

from ..util.arrow import from_numpy, numpy_dtype_of, to_numpy

#: a string holding one of these is escaped by json.dumps; any other is only quoted
_NEEDS_ESCAPING = r'["\\\x00-\x1f]'
#: a float's text that would read back as an integer
_WHOLE_NUMBER = r"^-?[0-9]+$"


@functools.lru_cache(maxsize=1024)
def _text(value: str) -> Any:
    """``value`` as an Arrow string scalar, made from its UTF-8 bytes (no pandas: see above)."""
    import pyarrow as pa

    data = value.encode()
    offsets = from_numpy(np.array([0, len(data)], np.int32)).buffers()[1]
    return pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(data)])[0]


def json_lines(batch: Any) -> bytes:
    """The rows of the pyarrow record batch ``batch`` as JSON Lines, UTF-8, each line
    ending in a newline (``b""`` for a batch of no rows)."""
    import pyarrow.compute as pc

    if batch.num_rows == 0:
        return b""
    pieces: list[Any] = []
    for number, (name, column) in enumerate(zip(batch.schema.names, batch.columns, strict=True)):
        key = ("{" if number == 0 else ",") + json.dumps(name, ensure_ascii=False) + ":"
        pieces += [_text(key), _json_values(column)]
    lines = pc.binary_join_element_wise(*pieces, _text("}\n"), _text(""))
    return _text_bytes(lines)


def _json_values(column: Any) -> Any:
    """A string array of ``column``'s values as JSON text, ``null`` for a null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if pa.types.is_floating(kind):
        text = _float_text(column)
    elif pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        text = pc.cast(column, pa.string())
    elif pa.types.is_string(kind):
        text = _quoted(column)
    elif pa.types.is_large_string(kind):  # joined with the others, which are strings
        text = _quoted(column.cast(pa.string()))
    elif pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind):
        text = _joined_lists(column)
    elif pa.types.is_temporal(kind):  # a kept date or time: its ISO text, as pyarrow's readers take it back
        text = _quoted(pc.cast(column, pa.string()))
    else:
        text = pa.array([json.dumps(_finite(value), ensure_ascii=False) for value in column.to_pylist()])
    return pc.fill_null(text, _text("null"))


def _float_text(column: Any) -> Any:
    """Floats as their type's shortest text; NaN as ``null``, infinities as ``Infinity`` and ``-Infinity``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_float16(column.type):  # numpy's text is float16's own; Arrow 16 cannot test one
        values = column.to_numpy(zero_copy_only=False)  # a null as NaN: not finite
        text, finite = pa.array(values.astype(str)), pa.array(np.isfinite(values))
    else:
        text, finite = pc.cast(column, pa.string()), pc.is_finite(column)
        # Arrow writes 1.0 as "1", which JSON readers read as an integer (and -0.0 as 0); the
        # test on the numbers is cheap, the one on the text is not, and seldom needed
        if pc.any(pc.equal(pc.trunc(column), column)).as_py():
            whole = pc.match_substring_regex(text, _WHOLE_NUMBER)
            text = pc.if_else(whole, pc.binary_join_element_wise(text, _text(".0"), _text("")), text)
    if pc.all(finite).as_py():
        return text
    values = column.to_numpy(zero_copy_only=False)  # seldom here: numpy's tests take float16 too; a null is NaN
    infinite = pc.if_else(pa.array(values > 0), _text("Infinity"), _text("-Infinity"))
    return pc.if_else(finite, text, pc.if_else(pa.array(np.isnan(values)), _text("null"), infinite))


def infinities(batch: Any) -> int:
    """How many values of the record batch ``batch``'s float columns (lists of floats too) are
    +inf or -inf: JSON Lines writes them as ``Infinity``, which a strict JSON parser refuses."""
    import pyarrow as pa
    import pyarrow.compute as pc

    count = 0
    for column in batch.columns:
        while pa.types.is_fixed_size_list(column.type) or pa.types.is_list(column.type):
            column = column.flatten()
        if pa.types.is_float16(column.type):  # Arrow 16 cannot test one
            count += int(np.isinf(column.to_numpy(zero_copy_only=False)).sum())
        elif pa.types.is_floating(column.type):
            count += pc.sum(pc.is_inf(column)).as_py() or 0
    return count


def _quoted(column: Any) -> Any:
    """Strings as JSON strings: quoted, and escaped where one holds a quote, a backslash
    or a control character (paths and labels seldom do)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pc.any(pc.match_substring_regex(column, _NEEDS_ESCAPING)).as_py():
        values = column.to_pylist()
        return pa.array([None if value is None else json.dumps(value, ensure_ascii=False) for value in values])
    return pc.binary_join_element_wise(_text('"'), column, _text('"'), _text(""))


def _joined_lists(column: Any) -> Any:
    """Lists as JSON arrays, their values encoded as a column's are."""
    import pyarrow as pa
    import pyarrow.compute as pc

    # flatten() leaves out what a slice or a null list covers; the offsets are made anew to match
    lengths = pc.list_value_length(column)
    zero = from_numpy(np.zeros(1, numpy_dtype_of(lengths.type)))[0]  # a scalar of its type
    lengths = to_numpy(pc.fill_null(lengths, zero))
    offsets = from_numpy(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    lists = pa.ListArray.from_arrays(offsets, _json_values(column.flatten()), mask=column.is_null())
    return pc.binary_join_element_wise(_text("["), pc.binary_join(lists, _text(",")), _text("]"), _text(""))


def _text_bytes(lines: Any) -> bytes:
    """The bytes of a string array's values end to end, read from its buffers at once."""
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)[lines.offset : lines.offset + len(lines) + 1]
    return lines.buffers()[2].to_pybytes()[offsets[0] : offsets[-1]]


def _finite(value: Any) -> Any:
    """``value`` with every NaN in it made None (JSON's null); infinities as json writes them."""
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, list):
        return [_finite(item) for item in value]
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    return value

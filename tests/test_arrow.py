"""``pipeline._arrow``: numpy views of Arrow numbers and back, equal to pyarrow's
own conversions for every type, offset, chunking and null."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.util.arrow import from_numpy, list_column, to_numpy

pa = pytest.importorskip("pyarrow")

NUMBERS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64"]


@pytest.mark.parametrize("dtype", NUMBERS)
def test_numbers_are_viewed_both_ways(dtype):
    values = (np.arange(10) * 3).astype(dtype)
    array = from_numpy(values)
    assert array.type == pa.from_numpy_dtype(np.dtype(dtype))
    assert array.equals(pa.array(values))
    back = to_numpy(array)
    assert back.dtype == np.dtype(dtype) and np.array_equal(back, values)
    assert np.shares_memory(back, values)  # no copy either way


def test_a_slice_is_viewed_from_its_offset():
    array = pa.array(np.arange(100, dtype=np.float32)).slice(7, 11)
    assert np.array_equal(to_numpy(array), np.arange(7, 18, dtype=np.float32))


def test_chunked_arrays_join_their_chunks():
    one = pa.chunked_array([pa.array(np.arange(4, dtype=np.int64))])
    several = pa.chunked_array([pa.array(np.arange(3)), pa.array(np.arange(3, 5))])
    none = pa.chunked_array([], type=pa.float32())
    assert np.array_equal(to_numpy(one), np.arange(4))
    assert np.array_equal(to_numpy(several), np.arange(5))
    assert to_numpy(none).shape == (0,)


@pytest.mark.parametrize(
    "array",
    [
        pa.array([1.0, None, 3.0]),
        pa.array([True, False, True]),
        pa.array(["a", "b"]),
        pa.array(np.array(["2024-01-01"], dtype="datetime64[s]")),
        pa.array(np.zeros(0, np.float32)),
    ],
    ids=["nulls", "booleans", "strings", "dates", "empty"],
)
def test_what_is_not_plain_numbers_is_converted_as_pyarrow_does(array):
    got, expected = to_numpy(array), array.to_numpy(zero_copy_only=False)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    "values",
    [
        np.arange(12, dtype=np.float32)[::3],  # strided: made contiguous
        np.array([True, False]),
        np.array(["a", "bc"]),
    ],
    ids=["strided", "booleans", "strings"],
)
def test_from_numpy_equals_pyarrow_for_any_column(values):
    assert from_numpy(values).equals(pa.array(values))


def test_another_byte_order_is_refused_as_pyarrow_refuses_it():
    with pytest.raises(pa.ArrowNotImplementedError):
        from_numpy(np.arange(4, dtype=np.dtype("i4").newbyteorder()))


def test_a_list_column_holds_one_row_a_list():
    flat = np.arange(12, dtype=np.float32).reshape(4, 3)
    column = list_column(flat[:, ::-1])  # not contiguous
    assert column.type == pa.list_(pa.float32(), 3)
    assert column.to_pylist() == flat[:, ::-1].tolist()


def test_the_memory_outlives_the_numpy_array():
    array = from_numpy(np.arange(1000, dtype=np.float64) * 2)  # the only reference is Arrow's buffer
    import gc

    gc.collect()
    assert to_numpy(array)[999] == 1998.0


def test_numpy_dtypes_of_arrow_types_are_pyarrows_own_without_pandas():
    """Issue 56: ``DataType.to_pandas_dtype`` needs pandas in some pyarrow releases."""
    import numpy as np
    import pyarrow as pa

    from pipeline.util.arrow import numpy_dtype_of

    kinds = [pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(),
             pa.uint64(), pa.float16(), pa.float32(), pa.float64(), pa.timestamp("s"), pa.timestamp("ns")]  # fmt: skip
    for kind in kinds:
        assert numpy_dtype_of(kind) == np.dtype(kind.to_pandas_dtype()), kind
    assert numpy_dtype_of(pa.string()) == np.dtype(object)

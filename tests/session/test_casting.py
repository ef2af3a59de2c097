"""NOTE [ input dtypes ]: a cast that would change a value is refused, naming that value and where it is."""

from __future__ import annotations

import numpy as np

from pipeline.session import exact_cast_refusal, refused_at


def test_the_place_given_is_the_place_of_the_value_named():
    values = np.array([1, 2**24 + 1, 5, 2**24 + 3])  # two refused: the message names the largest
    said = exact_cast_refusal(values, np.dtype(np.float32))
    assert said is not None and "16,777,219" in said
    assert refused_at(values, np.dtype(np.float32)) == (3,)
    floats = np.array([[1.0, 3e39], [4e39, np.inf]])  # infinity stays itself: not refused
    said = exact_cast_refusal(floats, np.dtype(np.float32))
    assert said is not None and "3e+39 overflows float32" in said
    assert refused_at(floats, np.dtype(np.float32)) == (0, 1)
    assert refused_at(np.array([1.0, np.inf]), np.dtype(np.float32)) is None

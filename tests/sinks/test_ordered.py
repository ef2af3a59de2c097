"""NOTE [ rows put back in order ]: rows run out of order are written in input order, held no longer than needed."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.sinks import CallbackSink, InputOrderSink, SinkError


def test_rows_come_out_in_input_order_as_soon_as_the_rows_before_them_have_come():
    written = []
    sink = InputOrderSink(CallbackSink(lambda i, outputs, meta: written.append((outputs, meta))), "place")
    order = [np.array([3, 4]), np.array([0, 2]), np.array([5]), np.array([1])]
    for index, places in enumerate(order):
        outputs = {"y": places.astype(np.float32) * 10}
        sink.write(index, len(places), outputs, {"place": places, "row_id": places + 100})
        if index == 1:
            assert [m["row_id"].tolist() for _, m in written] == [[100]] and sink.held_rows == 3
    sink.close()
    rows = np.concatenate([m["row_id"] for _, m in written])
    assert rows.tolist() == [100, 101, 102, 103, 104, 105] and sink.held_rows == 0
    assert np.concatenate([o["y"] for o, _ in written]).tolist() == [0, 10, 20, 30, 40, 50]
    assert all("place" not in m for _, m in written)


def test_an_output_without_a_row_each_is_refused():
    sink = InputOrderSink(CallbackSink(lambda *a: None), "place")
    with pytest.raises(SinkError, match="no row each"):
        sink.write(0, 2, {"count": np.array(3)}, {"place": np.array([1, 0])})

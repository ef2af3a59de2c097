"""NOTE [ token batches ]: a window sorted by length, cut under a token budget, padded to a multiple of 8."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from pipeline.text.batching import cuts, padded_length, token_batches


def test_cuts_keep_every_batch_under_the_budget_unless_a_row_alone_is_over():
    lengths = [3, 5, 9, 9, 17, 40, 100]
    spans = cuts(lengths, max_tokens=64)
    assert spans[0][0] == 0 and spans[-1][1] == len(lengths)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))  # every row once, in order
    for start, stop in spans:
        rows = stop - start
        assert rows == 1 or rows * padded_length(lengths[stop - 1]) <= 64
    assert (6, 7) in spans  # 100 tokens is over 64 alone: a batch of its own


@given(st.lists(st.integers(1, 300), min_size=1, max_size=200), st.integers(8, 4096))
def test_batches_hold_every_row_once_sorted_padded_and_in_budget(lengths, budget):
    rows = [(np.arange(n, dtype=np.int64) + 5, np.zeros(n, np.int64)) for n in lengths]
    positions = np.arange(100, 100 + len(rows))
    batches = token_batches(rows, positions, budget, pad_id=0)
    seen = np.concatenate([b.positions for b in batches])
    assert sorted(seen.tolist()) == positions.tolist()
    for batch in batches:
        width = batch.ids.shape[1]
        assert width % 8 == 0 and (len(batch.positions) == 1 or batch.ids.size <= budget)
        for row, place in enumerate(batch.positions):
            n = lengths[place - 100]
            assert batch.mask[row].sum() == n and (batch.ids[row, :n] == np.arange(n) + 5).all()
            assert (batch.ids[row, n:] == 0).all()
    longest = [int(b.mask.sum(axis=1).max()) for b in batches]
    assert longest == sorted(longest)  # shortest first


def test_padded_length_rounds_up_to_a_multiple():
    assert [padded_length(n) for n in (1, 8, 9, 16, 17)] == [8, 8, 16, 16, 24]

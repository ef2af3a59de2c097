"""NOTE [ shapes foretold ]: output shapes foretold from probes only where their rules fix every dim."""

from __future__ import annotations

import numpy as np

from pipeline.session.shape_rules import foretold

F = np.dtype(np.float32)


def _probe(rows, tokens, out):
    return ({"ids": (rows, tokens), "mask": (rows, tokens)}, {"y": (F, out)})


def test_dims_that_follow_an_input_dim_or_stay_constant_are_foretold():
    probes = [_probe(1, 8, (1, 8, 384)), _probe(2, 16, (2, 16, 384))]
    assert foretold(probes, {"ids": (40, 72), "mask": (40, 72)}) == {"y": (F, (40, 72, 384))}


def test_what_no_rule_fixes_is_left_to_a_probe():
    shapes = {"ids": (40, 72), "mask": (40, 72)}
    assert foretold([_probe(1, 8, (1, 8))], shapes) is None  # one probe proves nothing
    assert foretold([_probe(1, 8, (2, 8)), _probe(2, 16, (4, 16))], shapes) is None  # rows twice over
    # dim 1 kept 8 while tokens kept 8: a constant, or tokens? it cannot tell where tokens vary now
    assert foretold([_probe(1, 8, (1, 8)), _probe(2, 8, (2, 8))], shapes) is None
    assert foretold([_probe(1, 8, (1, 8)), _probe(2, 8, (2, 8))], {"ids": (40, 8), "mask": (40, 8)}) == {
        "y": (F, (40, 8))
    }
    # rows and tokens equal in both probes: which one dim 0 follows is known only when they differ
    assert foretold([_probe(8, 8, (8,)), _probe(16, 16, (16,))], shapes) is None
    assert foretold([_probe(8, 8, (8,)), _probe(16, 16, (16,))], {"ids": (5, 5), "mask": (5, 5)}) == {"y": (F, (5,))}


def test_inputs_of_another_rank_or_name_are_not_foretold():
    probes = [_probe(1, 8, (1, 8)), _probe(2, 16, (2, 16))]
    assert foretold(probes, {"ids": (4, 8, 1), "mask": (4, 8)}) is None
    assert foretold(probes, {"other": (4, 8), "mask": (4, 8)}) is None

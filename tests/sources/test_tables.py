"""Table sources' refusals (issue 34, item 8)."""

from __future__ import annotations

import pytest

from pipeline import Pipeline, models
from pipeline.sources import CsvSource, SourceError


def test_a_csv_of_a_header_alone_is_said_to_have_no_rows(tmp_path):
    """Issue 34, item 8: not "no numeric columns" (its columns' types are null: there is no row to infer them)."""
    (tmp_path / "h.csv").write_text("a,b,c\n")
    with (
        Pipeline(models.mlp(), device="cpu") as pipe,
        pytest.raises(SourceError, match=r"has no rows \(a header only\)"),
    ):
        CsvSource(tmp_path / "h.csv", 8, pipe.source_inputs)

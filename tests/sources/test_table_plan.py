"""NOTE [ the table plan ]: which columns feed the model, which is the id, which are kept,
and why every other one is left out; a table the rules cannot place is refused."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from pipeline.session import TensorSpec
from pipeline.sources import SourceError
from pipeline.sources.table_plan import BY_NAME, BY_WIDTH, MAPPED, first_non_number, pandas_index, plan_table

ROW3 = [TensorSpec("x", np.dtype(np.float32), ("N", 3))]


def _schema(**types):
    return pa.schema([(name, kind) for name, kind in types.items()])


def test_a_one_input_model_takes_the_columns_left_over_in_order_and_says_so():
    schema = _schema(id=pa.int64(), b=pa.float64(), a=pa.float32(), c=pa.int32())
    plan = plan_table(schema, ROW3)
    assert plan.how == BY_WIDTH
    assert plan.inputs == {"x": ("b", "a", "c")}
    assert (plan.id_column, plan.id_how) == ("id", "named like an id")
    assert plan.casts == {"x": "float32/float64/int32 -> float32"}
    lines = plan.lines()
    assert lines[0] == "input 'x' <- b, a, c (by width, cast float32/float64/int32 -> float32)"
    assert lines[1] == "id: 'id' (named like an id), written back exactly"
    assert plan.as_dict()["inputs"] == {"x": ["b", "a", "c"]}


def test_a_text_column_is_refused_naming_its_first_bad_cell_never_dropped():
    schema = _schema(id=pa.int64(), a=pa.float64(), color_code=pa.string(), b=pa.float64())
    cells = {"color_code": ["1.5", "", "2", "abc", "x"]}
    with pytest.raises(SourceError, match=r"column 'color_code', row 3: 'abc' is not a number"):
        plan_table(schema, ROW3, first_non_number=lambda column: first_non_number(cells[column]))
    with pytest.raises(SourceError, match=r"column 'color_code' holds numbers stored as text \(string\)"):
        plan_table(schema, ROW3, first_non_number=lambda column: None)


def test_a_column_of_the_wrong_count_is_refused_with_the_plan_so_far():
    schema = _schema(a=pa.float64(), b=pa.float64())
    with pytest.raises(SourceError, match=r"takes rows of 3 values .* 2 columns are stacked for it"):
        plan_table(schema, ROW3)
    schema = _schema(a=pa.float64(), b=pa.float64(), c=pa.float64(), user_id=pa.float64())
    plan = plan_table(schema, ROW3)  # a column named like an id is the id, never a feature
    assert plan.id_column == "user_id"
    schema = _schema(a=pa.float64(), b=pa.float64(), user_id=pa.float64())
    with pytest.raises(SourceError, match=r"'user_id' is taken as the rows' id, being named like one"):
        plan_table(schema, ROW3)


def test_pandas_index_is_left_out_and_said():
    metadata = {b"pandas": json.dumps({"index_columns": ["when"]}).encode()}
    schema = pa.schema(
        [("when", pa.int64()), ("a", pa.float64()), ("b", pa.float64()), ("c", pa.float64())], metadata=metadata
    )
    assert pandas_index(schema) == ["when"]
    plan = plan_table(schema, ROW3)
    assert plan.inputs == {"x": ("a", "b", "c")}
    assert plan.left_out == {"when": "pandas' index"}
    unnamed = _schema(**{"Unnamed: 0": pa.int64(), "a": pa.float64(), "b": pa.float64(), "c": pa.float64()})
    assert plan_table(unnamed, ROW3).left_out == {"Unnamed: 0": "pandas' index"}
    # mapped explicitly, an index column is a feature: the user said so
    mapped = plan_table(unnamed, ROW3, columns={"x": ["Unnamed: 0", "a", "b"]})
    assert mapped.how == MAPPED and mapped.inputs == {"x": ("Unnamed: 0", "a", "b")}
    assert mapped.left_out == {"c": "not named by --input-column; --keep writes it through"}


def test_kept_columns_and_the_id_are_never_features():
    schema = _schema(key=pa.string(), day=pa.date32(), a=pa.float64(), b=pa.float64(), c=pa.float64())
    plan = plan_table(schema, ROW3, keep_columns=["day"])
    assert plan.inputs == {"x": ("a", "b", "c")} and plan.kept == ("day",) and plan.id_column == "key"
    with pytest.raises(SourceError, match=r"kept column\(s\) \['gone'\] are not in"):
        plan_table(schema, ROW3, keep_columns=["gone"])


def test_two_columns_named_like_ids_need_one_named():
    schema = _schema(id=pa.int64(), user_id=pa.int64(), a=pa.float64(), b=pa.float64(), c=pa.float64())
    with pytest.raises(SourceError, match=r"columns \['id', 'user_id'\] are each named like an id"):
        plan_table(schema, ROW3)
    assert plan_table(schema, ROW3, id_column="id", keep_columns=["user_id"]).kept == ("user_id",)
    assert plan_table(schema, ROW3, keep_columns=["user_id"]).id_column == "id"


def test_inputs_named_like_columns_are_fed_by_name_with_the_id_found():
    specs = [TensorSpec(name, np.dtype(np.float32), ("N", 1)) for name in ("f0", "f1")]
    schema = _schema(customer_id=pa.string(), f1=pa.float64(), f0=pa.float64(), note=pa.string())
    plan = plan_table(schema, specs)
    assert plan.how == BY_NAME and plan.inputs == {"f0": ("f0",), "f1": ("f1",)}
    assert plan.id_column == "customer_id"
    assert plan.left_out == {"note": "no input of that name; --keep writes it through"}


def test_columns_that_do_not_stack_are_refused_naming_them():
    schema = _schema(nested=pa.list_(pa.list_(pa.float32())))
    specs = [TensorSpec("x", np.dtype(np.float32), ("N", "D"))]
    with pytest.raises(SourceError, match=r"column 'nested' is list<item: list<item: float>>"):
        plan_table(schema, specs)
    with pytest.raises(SourceError, match=r"column 'nested' is list<item: list<item: float>>"):
        plan_table(schema, specs, columns={"x": ["nested"]})


def test_an_id_that_cannot_be_written_back_exactly_is_refused():
    schema = _schema(id=pa.timestamp("us", tz="UTC"), a=pa.float64(), b=pa.float64(), c=pa.float64())
    with pytest.raises(SourceError, match=r"column 'id' is timestamp\[us, tz=UTC\], which ortpipe does not write"):
        plan_table(schema, ROW3)


def test_a_header_only_table_says_it_has_no_rows():
    with pytest.raises(SourceError, match=r"has no rows \(a header only\)"):
        plan_table(_schema(a=pa.null(), b=pa.null(), c=pa.null()), ROW3)


def test_a_column_named_like_an_id_beside_the_id_is_refused_not_fed():
    schema = _schema(row_id=pa.int64(), user_id=pa.int64(), a=pa.float64(), b=pa.float64(), c=pa.float64())
    with pytest.raises(SourceError, match=r"column\(s\) \['user_id'\] are named like an id, and 'row_id' is the"):
        plan_table(schema, ROW3)
    assert plan_table(schema, ROW3, keep_columns=["user_id"]).kept == ("user_id",)
    mapped = plan_table(schema, ROW3, columns={"x": ["user_id", "a", "b"]})
    assert mapped.inputs == {"x": ("user_id", "a", "b")} and mapped.id_column == "row_id"

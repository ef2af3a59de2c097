"""The plan of a table run: which columns feed which model input, which is the rows'
id, which are carried through, and why every other column is left out.

NOTE [ the table plan ]: a column becomes a model input only by a rule a user can
read, and a table the rules cannot place exactly is refused before a row is
read, with the plan so far and the flag that fixes it.  The rules, in order:

1. **mapped**: ``--input-column`` (``columns=``) names each input's columns;
2. **by name**: every input of the model is named like a column (skl2onnx's
   export of a ColumnTransformer: ``colour``, ``f0``, ``f1``), each fed its own;
3. **by width**: a model of one input takes the columns left over - after the
   id, the kept columns and pandas' index - all of them, in order, and only
   where each is of the input's kind (numbers; bools or strings for a bool or
   string input) and, where the model fixes a row's width, they are exactly
   that many.  A text cell in a numeric column is refused naming the column,
   the row and the value; no column is ever dropped to make the width fit.

The id is ``--id-column`` (``id_column=``), else ``row_id``, else the one column
named like an id (``id``, ``user_id``, ``key``, ``uuid``) that no rule feeds to
an input; two such columns are refused unless one is named.  A column named
like an id is never a feature unless it is mapped.  pandas' index
(``__index_level_0__``, the ``index_columns`` of its metadata, a CSV's
first column with no name, or ``Unnamed: 0``) is never a feature unless mapped either.

The same plan serves ``ortpipe run``'s tables, the Python API's and Ray's and
Spark's batches (``integrations.columnar``); ``ortpipe run --explain`` prints it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..session import TensorSpec
from ._base import SourceError
from .columns import check_widths, column_casts, element_type, is_list, is_numeric, is_text

#: column names that hold a row's id or key, not a feature
ID_LIKE = re.compile(r"(^|_)(id|key|uuid)$", re.IGNORECASE)
#: the names pandas gives its index in a file: Parquet's unnamed levels, a CSV's unnamed first column
#: (its header is empty; pandas reads it back as ``Unnamed: 0``)
_PANDAS_INDEX = re.compile(r"^(__index_level_\d+__|Unnamed: 0|)$")

#: how a plan's inputs were matched to columns
MAPPED, BY_NAME, BY_WIDTH = "mapped", "by name", "by width"

#: given a column's name, the first of its rows that is not a number, and the value
FirstNonNumber = Callable[[str], tuple[int, str] | None]


@dataclass(frozen=True)
class TablePlan:
    """Which columns feed each input, the id, the kept columns, and every column left out with why."""

    #: each model input's columns, in the order they are stacked
    inputs: dict[str, tuple[str, ...]]
    #: MAPPED, BY_NAME or BY_WIDTH (NOTE [ the table plan ])
    how: str
    id_column: str | None
    #: how the id was chosen: "named", "row_id", "named like an id", or "" where there is none
    id_how: str = ""
    kept: tuple[str, ...] = ()
    #: each column not used, with the reason
    left_out: dict[str, str] = field(default_factory=dict)
    #: the inputs whose columns are cast to the model's dtype, "float64 -> float32"
    casts: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """The plan as a person reads it, a line an input, then the id, kept and left-out columns."""
        lines = []
        for name, columns in self.inputs.items():
            cast = f", cast {self.casts[name]}" if name in self.casts else ""
            lines.append(f"input {name!r} <- {_listed(columns)} ({self.how}{cast})")
        if self.id_column is None:
            lines.append("id: none in the table: rows are numbered (row_id); --id-column names one")
        else:
            lines.append(f"id: {self.id_column!r} ({self.id_how}), written back exactly")
        if self.kept:
            lines.append(f"kept: {', '.join(self.kept)} (written through unchanged)")
        lines.extend(f"left out: {column!r} ({why})" for column, why in self.left_out.items())
        return lines

    def as_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready values (``--stats``)."""
        return {
            "inputs": {name: list(columns) for name, columns in self.inputs.items()},
            "how": self.how,
            "id_column": self.id_column,
            "id_how": self.id_how,
            "kept": list(self.kept),
            "left_out": dict(self.left_out),
            "casts": dict(self.casts),
        }


def _listed(columns: Sequence[str], most: int = 8) -> str:
    """Columns as a line says them: a long run as its first and last, and how many."""
    if len(columns) <= most:
        return ", ".join(columns)
    return f"{', '.join(columns[: most - 2])}, ..., {columns[-1]} ({len(columns)} columns)"


def plan_table(
    schema: Any,
    inputs: Sequence[TensorSpec],
    *,
    columns: Mapping[str, Sequence[str]] | None = None,
    id_column: str | None = None,
    keep_columns: Sequence[str] = (),
    where: str = "the table",
    first_non_number: FirstNonNumber | None = None,
) -> TablePlan:
    """The plan of ``schema``'s table for a model of ``inputs`` (NOTE [ the table plan ]), or a
    SourceError saying which rule could not be applied and what fixes it.  ``first_non_number``
    finds the bad cell of a text column where numbers were wanted, for the message."""
    names = list(schema.names)
    _check_named(names, id_column, keep_columns, where)
    index = pandas_index(schema)
    given = {name: tuple(cols) for name, cols in (columns or {}).items()}
    if given:
        how = MAPPED
        _check_mapping(given, inputs, names, where)
    elif all(spec.name in names for spec in inputs):
        how, given = BY_NAME, {spec.name: (spec.name,) for spec in inputs}
    else:
        how = BY_WIDTH
    used = {c for cols in given.values() for c in cols}
    id_column, id_how = rows_id(names, id_column, used, keep_columns, where)
    kept = tuple(dict.fromkeys(c for c in keep_columns if c != id_column))
    if how == BY_WIDTH:
        given = {inputs[0].name: _by_width(schema, inputs, names, id_column, kept, index, where, first_non_number)}
    specs = {spec.name: spec for spec in inputs}
    used = {c for cols in given.values() for c in cols} | set(kept) | ({id_column} if id_column else set())
    left_out = _left_out(names, used, how, index)
    plan = TablePlan(given, how, id_column, id_how, kept, left_out, column_casts(schema, given, specs))
    _check_feeds(plan, schema, specs, where)
    _check_carried(schema, [c for c in (id_column, *kept) if c is not None], where)
    return plan


def first_non_number(cells: Iterable[Any], start: int = 0) -> tuple[int, str] | None:
    """The first of text ``cells`` (row ``start`` on) that does not read as a number, and its row;
    an empty cell is a null, refused as such at its batch."""
    for row, value in enumerate(cells, start):
        if value is None or value == "":
            continue
        try:
            float(value)
        except ValueError:
            return row, value
    return None


def pandas_index(schema: Any) -> list[str]:
    """The columns that are pandas' index of the frame a file was written from."""
    found = [name for name in schema.names if _PANDAS_INDEX.match(name)]
    raw = (schema.metadata or {}).get(b"pandas")
    if raw:
        try:
            described = json.loads(raw)
        except ValueError:
            described = {}
        found += [c for c in described.get("index_columns", []) if isinstance(c, str) and c in schema.names]
    return list(dict.fromkeys(found))


def _check_named(names: list[str], id_column: str | None, keep: Sequence[str], where: str) -> None:
    if id_column is not None and id_column not in names:
        raise SourceError(f"id column {id_column!r} is not in {where!r}: columns {names}")
    absent = [c for c in keep if c not in names]
    if absent:
        raise SourceError(f"kept column(s) {absent} are not in {where!r}: columns {names}")


def _check_mapping(
    given: Mapping[str, Sequence[str]], inputs: Sequence[TensorSpec], names: list[str], where: str
) -> None:
    input_names = [spec.name for spec in inputs]
    unknown = sorted(set(given) - set(input_names))
    if unknown:
        raise SourceError(f"--input-column names {unknown}, not inputs of the model: {input_names}")
    missing = [n for n in input_names if n not in given]
    if missing:
        raise SourceError(f"model input(s) {missing} have no columns: map them with --input-column")
    for name, cols in given.items():
        absent = [c for c in cols if c not in names]
        if absent:
            raise SourceError(f"columns {absent} for input {name!r} are not in {where!r}: {names}")


def rows_id(
    names: Sequence[str], id_column: str | None, used: set[str], keep: Sequence[str] = (), where: str = "the table"
) -> tuple[str | None, str]:
    """The rows' id and how it was chosen (NOTE [ the table plan ]): ``id_column``, else
    ``row_id``, else the one column named like an id that is not ``used`` for an input;
    a table that lists images or videos finds its id so too."""
    if id_column is not None:
        return id_column, "named"
    if "row_id" in names and "row_id" not in used:
        return "row_id", "row_id"
    candidates = [n for n in names if ID_LIKE.search(n) and n not in used]
    if len(candidates) > 1:
        unkept = [c for c in candidates if c not in keep]
        if len(unkept) == 1 and unkept != candidates:
            candidates = unkept
        else:
            raise SourceError(
                f"{where!r}: columns {candidates} are each named like an id, and none is named the rows' id: "
                f"name it with --id-column (id_column= in Python); a column named like an id is never a feature "
                "unless --input-column maps it"
            )
    return (candidates[0], "named like an id") if candidates else (None, "")


def _by_width(
    schema: Any,
    inputs: Sequence[TensorSpec],
    names: list[str],
    id_column: str | None,
    kept: Sequence[str],
    index: list[str],
    where: str,
    first_non_number: FirstNonNumber | None,
) -> tuple[str, ...]:
    """A one-input model's columns: every column left over, each of the input's kind."""
    input_names = [spec.name for spec in inputs]
    if len(inputs) != 1:
        raise SourceError(
            f"{where!r}: the model has inputs {input_names}, not every one named like a column of the table "
            f"({names}): map each to its columns with --input-column (input_columns= in Python)"
        )
    spec = inputs[0]
    leftover = [n for n in names if n != id_column and n not in kept and n not in index]
    like_ids = [n for n in leftover if ID_LIKE.search(n)]
    if like_ids:  # another id's column (row_id is the id, or --id-column named one): never a feature unmapped
        raise SourceError(
            f"{where!r}: column(s) {like_ids} are named like an id, and {id_column!r} is the rows' id: a column named "
            "like an id feeds the model only where --input-column maps it; --keep writes it through"
        )
    if leftover and all(_is_null(schema.field(n).type) for n in leftover):
        raise SourceError(f"{where!r} has no rows (a header only): there is nothing to run")
    if not leftover:
        raise SourceError(f"{where!r} has no columns left for input {spec.name!r} besides the id and kept: {names}")
    for name in leftover:
        _check_kind(schema.field(name).type, name, spec, where, first_non_number)
    return tuple(leftover)


def _check_kind(kind: Any, name: str, spec: TensorSpec, where: str, first_non_number: FirstNonNumber | None) -> None:
    """A SourceError where column ``name`` cannot feed ``spec`` as it is: text where numbers
    are wanted (naming the first cell that is not one), lists of lists, no values at all."""
    fix = "map the input's columns with --input-column, keep it with --keep, or fix the table"
    if spec.dtype.kind == "O":
        if not is_text(kind):
            raise SourceError(f"{where!r}: column {name!r} is {kind}; input {spec.name!r} takes strings: {fix}")
        return
    if spec.dtype.kind == "b":
        import pyarrow as pa

        if not pa.types.is_boolean(kind):
            raise SourceError(f"{where!r}: column {name!r} is {kind}; input {spec.name!r} takes bools: {fix}")
        return
    if is_numeric(kind):
        return
    if _is_null(kind):
        raise SourceError(f"{where!r}: column {name!r} has no values (every cell is empty): {fix}")
    if is_text(kind):
        bad = first_non_number(name) if first_non_number is not None else None
        if bad is not None:
            row, value = bad
            raise SourceError(f"{where!r}: column {name!r}, row {row:,}: {value!r} is not a number: {fix}")
        raise SourceError(f"{where!r}: column {name!r} holds numbers stored as text ({kind}): cast it, or {fix}")
    raise SourceError(f"{where!r}: column {name!r} is {kind}, not numbers or one list of numbers a row: {fix}")


def _check_feeds(plan: TablePlan, schema: Any, specs: Mapping[str, TensorSpec], where: str) -> None:
    """The columns of each input: of a type that stacks, and as many as a row of it takes."""
    for name, cols in plan.inputs.items():
        for column in cols:
            kind = schema.field(column).type
            if is_list(kind) and element_type(kind) is None and specs[name].dtype.kind != "O":
                raise SourceError(
                    f"{where!r}: column {column!r} is {kind}; an input takes numbers, or one list of numbers a row"
                )
    try:
        check_widths(where, plan.inputs, specs, schema, chosen=plan.how == MAPPED)
    except SourceError as exc:
        if plan.id_how != "named like an id" or plan.how != BY_WIDTH:
            raise
        raise SourceError(
            f"{exc}; {plan.id_column!r} is taken as the rows' id, being named like one: to feed it to the model, map "
            "the input's columns with --input-column"
        ) from None


def _check_carried(schema: Any, columns: Sequence[str], where: str) -> None:
    """A SourceError where the id or a kept column is of a type not written back exactly."""
    from ..util.arrow import carried_exactly

    for column in columns:
        kind = schema.field(column).type
        if not carried_exactly(kind):
            raise SourceError(
                f"{where!r}: column {column!r} is {kind}, which ortpipe does not write back exactly (it carries "
                "numbers, text, bytes, bools, dates and times without a zone): cast it first"
            )


def _left_out(names: list[str], used: set[str], how: str, index: list[str]) -> dict[str, str]:
    """Each column no input, id or keeping uses, with why."""
    left = {}
    for name in names:
        if name in used:
            continue
        if name in index:
            left[name] = "pandas' index"
        elif how == MAPPED:
            left[name] = "not named by --input-column; --keep writes it through"
        else:
            left[name] = "no input of that name; --keep writes it through"
    return left


def _is_null(kind: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_null(kind))

"""Conversions between typed records and Arrow record batches.

Stages exchange ``pa.RecordBatch`` objects under :data:`ARROW_SCHEMA`. Stages that work row by
row convert with :func:`to_records` / :func:`to_batch`, once each way (a row stage reads a
batch into records once and writes what it made, per output, with :func:`batches_by_output`);
stages that work on whole columns (the quality stages, at a million rows) use pyarrow compute
directly and never build records.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from .errors import DataError
from .schema import ARROW_SCHEMA, Trajectory
from .text import clean_json

__all__ = ["batches_by_output", "conform", "empty_batch", "to_batch", "to_records"]


def to_batch(records: Iterable[Trajectory | dict[str, Any]]) -> pa.RecordBatch:
    """Records (or dicts in record form) → one RecordBatch under ``ARROW_SCHEMA``.

    Records are encoded as they are (a dict is validated into a record first); a JSON value
    several records share is encoded once.
    """
    texts: dict[int, tuple[Any, str]] = {}
    rows = [
        (r if isinstance(r, Trajectory) else Trajectory.model_validate(r)).to_row(texts)
        for r in records
    ]
    try:
        return pa.RecordBatch.from_pylist(rows, schema=ARROW_SCHEMA)
    except UnicodeEncodeError:  # a lone surrogate in some row: Arrow strings are UTF-8
        return pa.RecordBatch.from_pylist(clean_json(rows), schema=ARROW_SCHEMA)


def to_records(batch: pa.RecordBatch | pa.Table) -> list[Trajectory]:
    """A RecordBatch (full schema) → typed records, the tools and ground truth that several
    rows carry decoded once (those rows share the value)."""
    values: dict[str, Any] = {}
    return [Trajectory.from_row(row, values) for row in batch.to_pylist()]


def batches_by_output(
    items: Iterable[tuple[str | None, Any]],
) -> Iterator[tuple[str | None, pa.RecordBatch | pa.Table]]:
    """What a row-wise stage made, ``(output, data)`` with output None for the main one, as
    ``(output, batch)``: the main output first, then each named output in the order first
    seen. ``data`` is a record, a list of records, or a RecordBatch/Table; records become
    batches (one per run of records), batches and tables pass through untouched, and the
    rows of each output keep their order.
    """
    runs: dict[str | None, list[Any]] = {None: []}
    for name, data in items:
        parts = runs.setdefault(name, [])
        if isinstance(data, (pa.RecordBatch, pa.Table)):
            parts.append(data)
            continue
        records = [data] if isinstance(data, Trajectory) else list(data)
        if parts and isinstance(parts[-1], list):
            parts[-1].extend(records)
        else:
            parts.append(records)
    for name, parts in runs.items():
        for part in parts:
            if isinstance(part, list):
                if part:
                    yield name, to_batch(part)
            elif part.num_rows:
                yield name, part


def empty_batch() -> pa.RecordBatch:
    """A RecordBatch with no rows under ``ARROW_SCHEMA``."""
    return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)


def conform(data: pa.RecordBatch | pa.Table | Sequence[Trajectory], *, where: str = "") -> pa.Table:
    """Bring what a stage yielded to exactly ``ARROW_SCHEMA`` (column order and types).

    Accepts a RecordBatch, a Table or a list of records. Columns missing from a batch are
    filled with nulls; unknown columns are an error (the schema is the contract).
    """
    if isinstance(data, (list, tuple)):
        return pa.Table.from_batches([to_batch(data)])
    table: pa.Table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
    if table.schema.equals(ARROW_SCHEMA, check_metadata=False):
        return table.replace_schema_metadata(ARROW_SCHEMA.metadata)
    unknown = [n for n in table.column_names if ARROW_SCHEMA.get_field_index(n) < 0]
    if unknown:
        raise DataError(f"{where or 'batch'} has columns that are not in the schema: {unknown}")
    arrays = []
    for field in ARROW_SCHEMA:
        if field.name in table.column_names:
            column = table.column(field.name)
            arrays.append(column if column.type == field.type else column.cast(field.type))
        else:
            arrays.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(arrays, schema=ARROW_SCHEMA)

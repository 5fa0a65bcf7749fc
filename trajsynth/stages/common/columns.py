"""Column helpers for stages that annotate rows in place of building them one by one."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

__all__ = ["gather_table", "replace_columns"]


def gather_table(batches: Iterable[pa.RecordBatch]) -> pa.Table | None:
    """Every row of ``batches`` as one table (a global stage's input), None when there is
    none."""
    parts = [b for b in batches if b.num_rows]
    if not parts:
        return None
    return pa.Table.from_batches(parts)


def replace_columns(batch: pa.RecordBatch | pa.Table, columns: dict[str, pa.Array]) -> pa.Table:
    """A new table equal to ``batch`` with ``columns`` set (added when absent)."""
    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    for name, values in columns.items():
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, values) if i >= 0 else table.append_column(name, values)
    return table

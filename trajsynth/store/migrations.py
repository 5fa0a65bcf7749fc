"""Schema migrations: ``MIGRATIONS[v]`` turns a table of schema version ``v`` into one of a
later version and returns ``(table, new_version)``. The reader applies them in a chain until
the table is at :data:`trajsynth.core.schema.SCHEMA_VERSION`.

- 1 → 2: the per-step ``step_diffs`` column (each assistant step's state change) and
  ``env_version`` (the environment's version the row was played in) are new; rows written
  before get an empty list and ``''`` (not recorded), and their ``schema_version`` stays
  what it was, so a reader can tell them apart.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

__all__ = ["MIGRATIONS"]


def _v1_to_v2(table: pa.Table) -> tuple[pa.Table, int]:
    if "step_diffs" not in table.schema.names:
        empty = pa.array([[]] * table.num_rows, pa.list_(pa.string()))
        at = (
            table.schema.get_field_index("step_flags") + 1
            if "step_flags" in table.schema.names
            else table.num_columns
        )
        table = table.add_column(at, pa.field("step_diffs", pa.list_(pa.string())), empty)
    if "env_version" not in table.schema.names:
        at = table.schema.get_field_index("domain") + 1 if "domain" in table.schema.names else 0
        empty = pa.array([""] * table.num_rows, pa.string())
        table = table.add_column(at, pa.field("env_version", pa.string()), empty)
    return table, 2


MIGRATIONS: dict[int, Callable[[pa.Table], tuple[pa.Table, int]]] = {1: _v1_to_v2}

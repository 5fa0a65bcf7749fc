"""Schema migrations: ``MIGRATIONS[v]`` turns a table of schema version ``v`` into one of a
later version and returns ``(table, new_version)``. The reader applies them in a chain until
the table is at :data:`trajsynth.core.schema.SCHEMA_VERSION`.

There are none yet: version 1 is the first schema. When a column is added, add an entry here
(fill the column with nulls or a computed value) and a test that reads an old shard.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

__all__ = ["MIGRATIONS"]

MIGRATIONS: dict[int, Callable[[pa.Table], tuple[pa.Table, int]]] = {}

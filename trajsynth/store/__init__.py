"""Store: Parquet shards, manifests and atomic commits (the only layer that opens data files)."""

from .manifest import MANIFEST_NAME, OutputState, RunManifest, ShardRecord, StageState
from .shards import (
    DEFAULT_COMPRESSION,
    ShardInfo,
    ShardWriter,
    count_rows,
    iter_batches,
    iter_shard,
    list_shards,
    read_records,
    read_table,
    write_shard,
)

__all__ = [
    "DEFAULT_COMPRESSION",
    "MANIFEST_NAME",
    "OutputState",
    "RunManifest",
    "ShardInfo",
    "ShardRecord",
    "ShardWriter",
    "StageState",
    "count_rows",
    "iter_batches",
    "iter_shard",
    "list_shards",
    "read_records",
    "read_table",
    "write_shard",
]

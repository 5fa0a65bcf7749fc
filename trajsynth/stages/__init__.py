"""Stages: one module per method, each a pure transform of record batches.

The machinery lives apart from the methods: :mod:`.context` (what a stage may use),
:mod:`.kinds` (source, map, row and global stages), :mod:`.registry` (names, discovery,
building from a config); :mod:`.common` holds the helpers several methods share. Every other
module of this package is a method, and no method imports another.
"""

from .context import Context, ContextSpec, Metrics
from .kinds import (
    BASE_COLUMNS,
    Emit,
    GlobalStage,
    MapStage,
    Output,
    RowsGlobalStage,
    RowStage,
    ShardSet,
    SourceStage,
    Stage,
    StageConfig,
    StageKind,
    StreamingGlobalStage,
)
from .registry import (
    STAGES,
    StageImportError,
    build_stage,
    config_hash,
    get_stage,
    load_builtin_stages,
    register,
    stage,
)

__all__ = [
    "BASE_COLUMNS",
    "STAGES",
    "Context",
    "ContextSpec",
    "Emit",
    "GlobalStage",
    "MapStage",
    "Metrics",
    "Output",
    "RowStage",
    "RowsGlobalStage",
    "ShardSet",
    "SourceStage",
    "Stage",
    "StageConfig",
    "StageImportError",
    "StageKind",
    "StreamingGlobalStage",
    "build_stage",
    "config_hash",
    "get_stage",
    "load_builtin_stages",
    "register",
    "stage",
]

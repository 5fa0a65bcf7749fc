"""trajsynth: synthesize, verify, balance and train on multi-turn tool-use trajectories.

The public API is the few names below; everything else is reached through its layer
(``trajsynth.envs``, ``trajsynth.llm``, ``trajsynth.quality``, ``trajsynth.train``, ...).

    from trajsynth import run_pipeline, read_records
    result = run_pipeline("pipelines/looptool.yaml")
    rows = read_records(result.output("balance"))
"""

from .core import (
    BackendError,
    ConfigError,
    DataError,
    GoldCall,
    GoldTurn,
    GroundTruth,
    Message,
    ToolCall,
    Trajectory,
    TrajsynthError,
    UserError,
)
from .pipeline import RunResult, load_pipeline, run_pipeline
from .stages import (
    Context,
    Emit,
    GlobalStage,
    MapStage,
    RowStage,
    SourceStage,
    Stage,
    StageConfig,
    register,
    stage,
)
from .store import ShardWriter, iter_batches, read_records, read_table
from .version import __version__

__all__ = [
    "BackendError",
    "ConfigError",
    "Context",
    "DataError",
    "Emit",
    "GlobalStage",
    "GoldCall",
    "GoldTurn",
    "GroundTruth",
    "MapStage",
    "Message",
    "RowStage",
    "RunResult",
    "ShardWriter",
    "SourceStage",
    "Stage",
    "StageConfig",
    "ToolCall",
    "Trajectory",
    "TrajsynthError",
    "UserError",
    "__version__",
    "iter_batches",
    "load_pipeline",
    "read_records",
    "read_table",
    "register",
    "run_pipeline",
    "stage",
]

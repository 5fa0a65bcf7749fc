"""Core: the trajectory schema, typed records, ground truth, ids and errors (imports nothing
of ours)."""

from .batch import conform, empty_batch, to_batch, to_records
from .config import StrictModel
from .errors import (
    BackendError,
    ConfigError,
    DataError,
    EndpointError,
    InputNotFoundError,
    RateLimited,
    SandboxError,
    SchemaVersionError,
    SpecError,
    StageFailed,
    TrajsynthError,
    UnknownStageError,
    UserError,
)
from .ids import canonical_json, file_fingerprint, seed_from, stable_hash, stable_id
from .schema import (
    ARROW_SCHEMA,
    CAPABILITIES,
    SCHEMA_VERSION,
    Json,
    Judge,
    Message,
    ToolCall,
    Trajectory,
    arrow_schema,
    json_schema,
)
from .task import GoldCall, GoldTurn, GroundTruth

__all__ = [
    "ARROW_SCHEMA",
    "CAPABILITIES",
    "SCHEMA_VERSION",
    "BackendError",
    "ConfigError",
    "DataError",
    "EndpointError",
    "GoldCall",
    "GoldTurn",
    "GroundTruth",
    "InputNotFoundError",
    "Json",
    "Judge",
    "Message",
    "RateLimited",
    "SandboxError",
    "SchemaVersionError",
    "SpecError",
    "StageFailed",
    "StrictModel",
    "ToolCall",
    "Trajectory",
    "TrajsynthError",
    "UnknownStageError",
    "UserError",
    "arrow_schema",
    "canonical_json",
    "conform",
    "empty_batch",
    "file_fingerprint",
    "json_schema",
    "seed_from",
    "stable_hash",
    "stable_id",
    "to_batch",
    "to_records",
]

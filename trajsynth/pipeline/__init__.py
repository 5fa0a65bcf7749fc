"""Pipeline: YAML → stage graph, the runner (cache keys, resume), executors."""

from .executors import Executor, InlineExecutor, LocalExecutor, UnitResult, UnitTask
from .runner import Reporter, Runner, RunResult, run_pipeline
from .spec import (
    InputRef,
    PipelineSpec,
    ResolvedPipeline,
    ResolvedStage,
    StepSpec,
    load_pipeline,
    resolve_pipeline,
)

__all__ = [
    "Executor",
    "InlineExecutor",
    "InputRef",
    "LocalExecutor",
    "PipelineSpec",
    "Reporter",
    "ResolvedPipeline",
    "ResolvedStage",
    "RunResult",
    "Runner",
    "StepSpec",
    "UnitResult",
    "UnitTask",
    "load_pipeline",
    "resolve_pipeline",
    "run_pipeline",
]

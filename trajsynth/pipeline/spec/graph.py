"""A validated pipeline: each stage built, with its resolved inputs, in run order."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.ids import stable_hash
from ...stages import Stage, StageConfig
from .models import PipelineSpec, StepSpec


@dataclass(frozen=True)
class InputRef:
    """One resolved input of a stage: another stage's output, or a path on disk."""

    stage: str | None = None
    output: str = "main"
    path: Path | None = None

    @property
    def stage_id(self) -> str:
        """The stage whose output this is (for an input that is not a path)."""
        assert self.stage is not None, "an input is another stage's output or a path"
        return self.stage

    def __str__(self) -> str:
        if self.path is not None:
            return str(self.path)
        return self.stage_id if self.output == "main" else f"{self.stage}:{self.output}"


@dataclass
class ResolvedStage:
    step: StepSpec
    stage: Stage[Any]
    inputs: list[InputRef]
    shard_rows: int
    iteration: int = 0
    needs: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.step.id

    @property
    def config(self) -> StageConfig:
        config: StageConfig = self.stage.config
        return config


@dataclass
class ResolvedPipeline:
    spec: PipelineSpec
    path: Path | None
    stages: dict[str, ResolvedStage]
    order: list[str]
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    def config_hash(self) -> str:
        return stable_hash(self.raw)

    def sinks(self) -> list[str]:
        """Stages whose main output no other stage reads (the pipeline's results)."""
        used = {ref.stage for s in self.stages.values() for ref in s.inputs if ref.stage}
        return [sid for sid in self.order if sid not in used]

"""The pipeline file's models: ``defaults``, ``stages`` entries (a stage or a loop of
stages) and the whole file."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Discriminator, Field, Tag, field_validator

from ...core.config import StrictModel

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class Defaults(StrictModel):
    """Settings shared by every stage of a pipeline."""

    seed: int = Field(default=0, description="Base seed; every stage derives its RNGs from it.")
    output: str | None = Field(
        default=None, description="Run folder (default runs/<name>); --out overrides it."
    )
    shard_rows: int = Field(default=50_000, ge=1, description="Rows per output shard.")
    executor: Literal["local", "ray"] = Field(
        default="local",
        description="Where map-stage units run: local processes/threads, or Ray tasks.",
    )
    ray_address: str | None = Field(
        default=None,
        description="Ray cluster address ('auto' to join a running cluster); none = local Ray.",
    )
    workers: int = Field(
        default=0, ge=0, description="Processes for CPU-bound map stages (0 = one per core)."
    )
    pool_min_rows: int = Field(
        default=20_000,
        ge=0,
        description="CPU-bound map stages use the process pool only from this many input rows.",
    )
    io_concurrency: int = Field(
        default=4, ge=1, description="Units run at once by I/O-bound (LLM) map stages."
    )
    llm: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="LLM roles: {role: {backend, model, base_url, ...}}."
    )
    env: dict[str, Any] = Field(default_factory=dict, description="Environment settings.")
    cache_dir: str | None = Field(
        default=None, description="LLM response cache (default <run>/cache)."
    )
    max_infra_error_rate: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="Largest share of a stage's rollouts (or rows) lost to LLM endpoint "
        "failures (retries exhausted, circuit open) before the stage fails so that a rerun "
        "plays them again; 0: every one must be played.",
    )
    allow_unverified: bool = Field(
        default=False,
        description="Accept a mostly unverified final output (more than half its rows with "
        "success false or null, or none left once failures were set aside); otherwise "
        "`trajsynth run` warns and exits 1.",
    )


class StepSpec(StrictModel):
    """One ``stages:`` entry."""

    id: str = Field(description="Unique stage id; also the name of its output folder.")
    uses: str = Field(description="Registered stage name (see `trajsynth stages`).")
    from_: list[str] = Field(
        default_factory=list,
        validation_alias=AliasChoices("from", "from_"),
        serialization_alias="from",
        description="Inputs: stage ids, `id:output` for side outputs, or paths.",
    )
    with_: dict[str, Any] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("with", "with_"),
        serialization_alias="with",
        description="The stage's config (see `trajsynth stages`).",
    )
    needs: list[str] = Field(
        default_factory=list,
        description="Stages whose artifacts (e.g. a trained checkpoint) this stage uses.",
    )
    shard_rows: int | None = Field(default=None, ge=1, description="Overrides defaults.")
    min_rows: int | None = Field(
        default=None,
        ge=0,
        description="Fewest rows the stage must yield, else the run fails with the reasons the "
        "stage counted (default 1 for source stages, 0 for the others).",
    )
    description: str = ""

    @field_validator("from_", "needs", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        if v is None:
            return []
        return [v] if isinstance(v, str) else v

    @field_validator("with_", mode="before")
    @classmethod
    def _none_is_empty(cls, v: Any) -> Any:
        return {} if v is None else v

    @field_validator("id")
    @classmethod
    def _id_chars(cls, v: str) -> str:
        if not _ID.match(v) or ":" in v:
            raise ValueError("ids use letters, digits, '_', '-' and '.' only")
        return v


class CarrySpec(StrictModel):
    """A value a loop carries from one iteration to the next (``$name`` inside the loop)."""

    init: str | None = Field(
        default=None,
        description="What $name means in the first iteration: a stage id outside the loop "
        "(or null: then $name is dropped from `from`/`needs` in the first iteration).",
    )
    next: str = Field(description="Stage of the loop body whose output $name is next time.")


class LoopSpec(StrictModel):
    """A block of stages repeated ``iterations`` times (e.g. LoopTool's train → probe → fix).

    Iteration k's stages get ids ``<loop><k>.<id>`` (``round2.train``); inside the body, a
    body id means the same iteration's stage and ``$name`` a carried value; outside the loop,
    ``<loop>.<id>`` means the last iteration's stage. Each stage sees its iteration number in
    ``ctx.iteration`` (and in the ``iteration`` column of the rows it makes).
    """

    loop: str = Field(description="Loop name; prefixes the ids of its stages.")
    iterations: int = Field(ge=1, description="How many times the body runs.")
    carry: dict[str, CarrySpec] = Field(
        default_factory=dict, description="Values passed from one iteration to the next."
    )
    stages: list[StepSpec] = Field(description="The loop body.")
    description: str = ""

    @field_validator("loop")
    @classmethod
    def _name_chars(cls, v: str) -> str:
        if not re.match(r"^[A-Za-z][A-Za-z_\-]*$", v):
            raise ValueError("loop names use letters, '_' and '-' (no digits or dots)")
        return v


def _entry_kind(value: Any) -> str:
    return "loop" if isinstance(value, dict) and "loop" in value else "step"


Entry = Annotated[
    Annotated[StepSpec, Tag("step")] | Annotated[LoopSpec, Tag("loop")],
    Discriminator(_entry_kind),
]


class PipelineSpec(StrictModel):
    """A whole pipeline file."""

    name: str = Field(description="Pipeline name (the default run folder is runs/<name>).")
    description: str = ""
    defaults: Defaults = Field(default_factory=Defaults)
    plugins: list[str] = Field(
        default_factory=list, description="Modules imported first; they may register stages."
    )
    stages: list[Entry] = Field(
        description="The stages (or loops of stages), in any order; `from:` wires them."
    )

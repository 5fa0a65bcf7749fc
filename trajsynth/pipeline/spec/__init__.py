"""Pipeline files: YAML → a validated stage graph.

A pipeline file::

    name: tiny
    defaults:              # shared by every stage
      seed: 0
      output: runs/tiny    # run folder (overridden by --out)
      shard_rows: 50000
      llm: {teacher: {backend: sim}}
    plugins: [my_package.stages]   # modules that register extra stages
    stages:
      - id: raw
        uses: synthetic
        with: {rows: 1000}
      - id: sampled
        uses: sample
        from: raw          # a stage id, `id:output` for a side output, or a path
        with: {n: 100}

Everything is checked before any stage runs: YAML syntax, unknown or mistyped fields, unknown
stages, each stage's ``with:`` against its config model, inputs that name no stage and no
path, the number of inputs, cycles, and the column wiring (a stage that reads ``quality_score``
needs a stage upstream that writes it). Each problem is one :class:`ConfigError` whose message
starts with the stage id and names the field.

Overrides (``--set``) are applied to the YAML before validation:
``stages.rollouts.with.samples=16`` (a stage addressed by its id), ``defaults.seed=3``.

Modules, one job each: :mod:`.models` (the file's pydantic models), :mod:`.overrides`
(``--set``), :mod:`.envvars` (``${VAR}`` expansion), :mod:`.resolve` (validation into a
:class:`ResolvedPipeline`, whose dataclasses are in :mod:`.graph`), :mod:`.load` (files and
the built-in pipelines), :mod:`.schema` (the JSON Schema for editors).
"""

from .envvars import expand_env
from .graph import InputRef, ResolvedPipeline, ResolvedStage
from .load import builtin_pipelines, load_pipeline
from .models import Defaults, PipelineSpec, StepSpec
from .overrides import apply_overrides, parse_overrides
from .resolve import resolve_pipeline
from .schema import pipeline_json_schema

__all__ = [
    "Defaults",
    "InputRef",
    "PipelineSpec",
    "ResolvedPipeline",
    "ResolvedStage",
    "StepSpec",
    "apply_overrides",
    "builtin_pipelines",
    "expand_env",
    "load_pipeline",
    "parse_overrides",
    "pipeline_json_schema",
    "resolve_pipeline",
]

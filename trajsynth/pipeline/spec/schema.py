"""The JSON Schema of a pipeline file, for editors (``schemas/pipeline.schema.json``)."""

from __future__ import annotations

from typing import Any

from ...stages import load_builtin_stages
from .models import PipelineSpec


def pipeline_json_schema() -> dict[str, Any]:
    """JSON Schema of a pipeline file, with each registered stage's ``with:`` (for editors).

    Committed as ``schemas/pipeline.schema.json``; regenerate with ``trajsynth schema --write``.
    """
    stages = {
        name: cls
        for name, cls in load_builtin_stages().items()
        if cls.__module__.startswith("trajsynth.")  # built-in stages only, not plugins/tests
    }
    schema = PipelineSpec.model_json_schema(by_alias=True)
    defs = schema.setdefault("$defs", {})
    step = defs["StepSpec"]
    step["properties"]["uses"]["enum"] = sorted(stages)
    branches = []
    for name in sorted(stages):
        cls = stages[name]
        cfg = cls.Config.model_json_schema()
        cfg_defs = cfg.pop("$defs", {})
        for k, v in cfg_defs.items():
            defs[f"{name}__{k}"] = v
        text = _retarget_refs(cfg, name)
        text["description"] = cls.doc()
        branches.append(
            {
                "if": {"properties": {"uses": {"const": name}}},
                "then": {"properties": {"with": text}},
            }
        )
    step["allOf"] = branches
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://trajsynth.dev/schemas/pipeline.schema.json",
        **schema,
        "title": "trajsynth pipeline",
    }


def _retarget_refs(node: Any, prefix: str) -> Any:
    if isinstance(node, dict):
        return {
            k: (
                f"#/$defs/{prefix}__{v.rsplit('/', 1)[-1]}"
                if k == "$ref" and isinstance(v, str)
                else _retarget_refs(v, prefix)
            )
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_retarget_refs(x, prefix) for x in node]
    return node

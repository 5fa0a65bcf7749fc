"""``function_masking``: Hammer's function masking — offered functions (and their parameters)
renamed to meaningless identifiers in a share of the rows, so that a student learns to choose
a function by its description and copy its name from the offered list instead of writing a
name it makes up from the request (Lin et al. 2024, "Hammer: Robust Function-Calling for
On-Device Language Models via Function Masking", arXiv:2410.04587; code
``MadeAgents/Hammer``).

A small student trained on tool-use rows learns that a function's name can be guessed from
the request ("find the hcf" → ``hcf``), because in most rows it can; on a benchmark it then
writes ``hcf`` where the offered function is ``math_hcf``, and calls a made-up function where
no offered one fits. Hammer's remedy is to make names uninformative in part of the data:

1) a row is masked with probability ``p`` (seeded by its id: the same rows on every run);
2) each offered function gets a random identifier (``func_`` + letters and digits, seeded by
   the row's id and the function's position; ``prefix`` sets the first part); with
   ``params`` each parameter of each function gets one too (``arg_`` + ...). Descriptions,
   types, enums and required lists stay (the required names renamed), so the description is
   what tells the functions apart;
3) the names are replaced everywhere the row names them: the offered tools, the assistant's
   calls (the arguments' keys, for parameters), the tool messages' ``name``, the ground
   truth's calls, and whole-word mentions in the assistant's text; argument values are never
   touched;
4) the masked row gets a new id derived from the original, ``parent_ids`` naming it, and
   ``extra["function_masking"]`` = the name map ``{original: masked}`` (and the parameter
   map); rows not chosen pass on unchanged (``keep_original`` also passes the originals of
   the masked rows on).

Metrics: ``rows``, ``masked``, ``functions_masked``, ``params_masked``.
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pydantic import Field

from ...core.batch import to_records
from ...core.ids import seed_from
from ...core.schema import ToolCall, Trajectory
from ...core.task import GroundTruth
from ..context import Context
from ..kinds import MapStage, Output, StageConfig
from ..registry import register

__all__ = ["FunctionMasking", "FunctionMaskingConfig", "mask_row"]


class FunctionMaskingConfig(StageConfig):
    p: float = Field(0.5, ge=0, le=1, description="Share of the rows masked (seeded by id).")
    params: bool = Field(True, description="Mask the parameters' names too.")
    prefix: str = Field("func_", description="First part of a masked function name.")
    param_prefix: str = Field("arg_", description="First part of a masked parameter name.")
    length: int = Field(6, ge=3, le=32, description="Random characters after the prefix.")
    keep_original: bool = Field(False, description="Pass the originals of masked rows on too.")


def _random_name(rng: random.Random, prefix: str, length: int, taken: set[str]) -> str:
    alphabet = string.ascii_lowercase + string.digits
    while True:
        name = prefix + "".join(rng.choice(alphabet) for _ in range(length))
        if name not in taken:
            taken.add(name)
            return name


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    return tool.get("function", tool) if isinstance(tool, dict) else {}


def _rename_keys(args_text: str, names: dict[str, str]) -> str:
    """The arguments with their keys renamed (text that is not a JSON object is kept)."""
    try:
        args = json.loads(args_text)
    except (json.JSONDecodeError, TypeError):
        return args_text
    if not isinstance(args, dict):
        return args_text
    return json.dumps({names.get(k, k): v for k, v in args.items()}, ensure_ascii=False)


def _gt_calls(node: Any, fmap: dict[str, str], pmap: dict[str, dict[str, str]]) -> Any:
    """The ground truth with every call's name (and argument keys) renamed: a call is a dict
    with a ``name`` and ``arguments`` (or ``args``); nothing else is touched."""
    if isinstance(node, list):
        return [_gt_calls(x, fmap, pmap) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _gt_calls(v, fmap, pmap) for k, v in node.items()}
    name = node.get("name")
    if isinstance(name, str) and name in fmap and ("arguments" in node or "args" in node):
        out["name"] = fmap[name]
        for key in ("arguments", "args"):
            value = node.get(key)
            if isinstance(value, dict):
                out[key] = {pmap.get(name, {}).get(k, k): v for k, v in value.items()}
            elif isinstance(value, str):
                out[key] = _rename_keys(value, pmap.get(name, {}))
    return out


def _masked_gt(
    gt: GroundTruth | None, fmap: dict[str, str], pmap: dict[str, dict[str, str]]
) -> GroundTruth | None:
    """The ground truth with its calls renamed (:func:`_gt_calls` on its JSON dump)."""
    if gt is None:
        return None
    return GroundTruth.model_validate(_gt_calls(gt.model_dump(mode="json"), fmap, pmap))


def mask_row(
    row: Trajectory, cfg: FunctionMaskingConfig
) -> tuple[Trajectory, dict[str, str], dict[str, dict[str, str]]]:
    """Steps 2-4 on one row: the masked row, the function map and the parameter maps."""
    rng = random.Random(seed_from("function_masking", row.id))
    tools = [t for t in (row.tools or []) if isinstance(t, dict)]
    taken: set[str] = set()
    fmap: dict[str, str] = {}
    pmap: dict[str, dict[str, str]] = {}
    new_tools = []
    for tool in tools:  # 2) new names
        fn = _function(tool)
        name = fn.get("name")
        if not isinstance(name, str):
            new_tools.append(tool)
            continue
        fmap[name] = _random_name(rng, cfg.prefix, cfg.length, taken)
        schema = dict(fn.get("parameters") or {})
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        if cfg.params and props:
            pmap[name] = {k: _random_name(rng, cfg.param_prefix, cfg.length, taken) for k in props}
            schema["properties"] = {pmap[name][k]: v for k, v in props.items()}
            if isinstance(schema.get("required"), list):
                schema["required"] = [pmap[name].get(k, k) for k in schema["required"]]
        new_fn = (
            {**fn, "name": fmap[name], "parameters": schema}
            if schema
            else {**fn, "name": fmap[name]}
        )
        new_tools.append({**tool, "function": new_fn} if "function" in tool else new_fn)
    mention = (
        re.compile(r"\b(" + "|".join(map(re.escape, sorted(fmap, key=len, reverse=True))) + r")\b")
        if fmap
        else None
    )

    def text(value: str | None) -> str | None:
        return mention.sub(lambda m: fmap[m.group(1)], value) if value and mention else value

    messages = []
    for m in row.messages:  # 3) everywhere the row names them
        if m.role == "assistant":
            calls = [
                ToolCall(
                    id=c.id,
                    name=fmap.get(c.name, c.name),
                    arguments=_rename_keys(c.arguments, pmap.get(c.name, {}))
                    if c.name in pmap
                    else c.arguments,
                )
                for c in m.tool_calls
            ]
            m = m.model_copy(
                update={
                    "tool_calls": calls,
                    "content": text(m.content),
                    "reasoning": text(m.reasoning),
                }
            )
        elif m.role == "tool" and m.name in fmap:
            m = m.model_copy(update={"name": fmap[m.name]})
        messages.append(m)
    masked = row.derive(  # 4)
        id=Trajectory.make_id(row.id, "function_masking"),
        parent_ids=[row.id],
        tools=new_tools,
        messages=messages,
        ground_truth=_masked_gt(row.ground_truth, fmap, pmap),
        extra={**(row.extra or {}), "function_masking": {"functions": fmap, "params": pmap}},
    )
    return masked, fmap, pmap


@register
class FunctionMasking(MapStage[FunctionMaskingConfig]):
    """Hammer's function masking: offered functions and parameters renamed in a share of the
    rows, everywhere the row names them."""

    name = "function_masking"

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        for batch in batches:
            out: list[Trajectory] = []
            for row in to_records(batch):
                ctx.metrics.inc("rows")
                chosen = random.Random(seed_from("function_masking.p", row.id)).random() < cfg.p
                if not chosen or not row.tools:  # 1)
                    out.append(row)
                    continue
                masked, fmap, pmap = mask_row(row, cfg)
                ctx.metrics.inc("masked")
                ctx.metrics.inc("functions_masked", len(fmap))
                ctx.metrics.inc("params_masked", sum(len(v) for v in pmap.values()))
                if cfg.keep_original:
                    out.append(row)
                out.append(masked)
            if out:
                yield out

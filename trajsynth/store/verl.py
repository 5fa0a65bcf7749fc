"""verl / verl-agent RL datasets: one Parquet row per task, with the tools and environment.

verl's ``RLHFDataset`` (``verl/utils/dataset/rl_dataset.py``) reads a Parquet file whose rows
carry ``data_source`` (selects the reward function), ``prompt`` (chat messages, rendered with
the tokenizer's chat template), ``ability``, ``reward_model`` (``{"style": "rule",
"ground_truth"}``, handed to the reward function) and ``extra_info`` (``index`` and ``split``;
for multi-turn tool rollouts ``tools_kwargs`` — per tool name, the ``create_kwargs`` its
``BaseTool.create`` receives — with ``need_tools_kwargs``, and ``interaction_kwargs``, whose
``name`` selects the interaction). ``agent_name`` picks verl's agent loop (``tool_agent``).

A row per task (the first row of each ``task_id``; an RL trainer samples its own rollouts):

- ``prompt``: the messages before the first assistant turn (system + user), or the goal as a
  user message for a task row that has none;
- ``reward_model.ground_truth``: the task's executable ground truth
  (:class:`~trajsynth.core.task.GroundTruth`) as JSON text;
- ``extra_info``: ``index``, ``split``, ``task_id``, ``domain`` (the environment a tool or
  reward function builds to replay calls), ``capabilities``, ``tools`` (the OpenAI tool
  schemas offered, JSON text), ``need_tools_kwargs``, ``tools_kwargs`` and
  ``interaction_kwargs`` (``name`` = the domain, ``query``, ``ground_truth``).

``tools_kwargs`` has an entry for every tool name of the export, each with the row's
``create_kwargs`` (``domain`` and ``task_id``: which environment a tool builds, for which
task), so every row has the same Arrow struct (no per-row nulls that a tool's ``create``
would have to guard against); the ground truth itself (with the environment's seed and
initial state) is stored once per place verl hands it on: ``reward_model`` for the reward
function, ``interaction_kwargs`` for an interaction.
Rows without ground truth cannot be rewarded and are skipped (``no_ground_truth``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from ..core.schema import Trajectory

__all__ = ["VERL_AGENT", "VERL_COLUMNS", "tool_names", "verl_rows", "verl_schema"]

VERL_COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info", "agent_name")
#: verl's multi-turn tool agent loop (``verl/experimental/agent_loop/tool_agent_loop.py``)
VERL_AGENT = "tool_agent"


def _tool_name(tool: Any) -> str | None:
    if not isinstance(tool, dict):
        return None
    fn = tool["function"] if isinstance(tool.get("function"), dict) else tool
    name = fn.get("name")
    return name if isinstance(name, str) and name else None


def tool_names(tools_json: Iterable[str | None]) -> list[str]:
    """Every tool name in a ``tools`` column (JSON text per row), sorted."""
    names: set[str] = set()
    for text in set(tools_json):  # rows of one toolset share the same text
        for tool in json.loads(text) if text else []:
            name = _tool_name(tool)
            if name:
                names.add(name)
    return sorted(names)


def verl_schema(names: list[str]) -> pa.Schema:
    """The Arrow schema of the export; ``names`` are the tool names of ``tools_kwargs``."""
    create = pa.struct([("domain", pa.string()), ("task_id", pa.string())])
    per_tool = pa.struct([("create_kwargs", create)])
    extra = pa.struct(
        [
            ("index", pa.int64()),
            ("split", pa.string()),
            ("task_id", pa.string()),
            ("domain", pa.string()),
            ("capabilities", pa.list_(pa.string())),
            ("tools", pa.string()),
            ("need_tools_kwargs", pa.bool_()),
            ("tools_kwargs", pa.struct([(n, per_tool) for n in names]) if names else pa.null()),
            (
                "interaction_kwargs",
                pa.struct(
                    [("name", pa.string()), ("query", pa.string()), ("ground_truth", pa.string())]
                ),
            ),
        ]
    )
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
            ("extra_info", extra),
            ("agent_name", pa.string()),
        ]
    )


def _prompt(t: Trajectory) -> list[dict[str, str]]:
    prompt = []
    for m in t.messages:
        if m.role == "assistant":
            break
        if m.role in ("system", "user"):
            prompt.append({"role": m.role, "content": m.content or ""})
    if not any(m["role"] == "user" for m in prompt) and t.goal:
        prompt.append({"role": "user", "content": t.goal})
    return prompt


def verl_rows(
    rows: Iterable[Trajectory], *, split: str, names: list[str], skipped: Counter[str]
) -> Iterator[dict[str, Any]]:
    """verl rows of ``rows``, one per task; counts what it leaves out in ``skipped``."""
    seen: set[str] = set()
    index = 0
    for t in rows:
        if t.task_id in seen:
            skipped["repeated_task"] += 1
            continue
        if t.ground_truth is None:
            skipped["no_ground_truth"] += 1
            continue
        prompt = _prompt(t)
        if not prompt:
            skipped["no_prompt"] += 1
            continue
        seen.add(t.task_id)
        truth = json.dumps(
            t.ground_truth.model_dump(mode="json"), ensure_ascii=False, sort_keys=True
        )
        create = {"domain": t.domain, "task_id": t.task_id}
        query = next((m["content"] for m in prompt if m["role"] == "user"), t.goal)
        yield {
            "data_source": f"trajsynth/{t.domain}" if t.domain else "trajsynth",
            "prompt": prompt,
            "ability": "tool_use",
            "reward_model": {"style": "rule", "ground_truth": truth},
            "extra_info": {
                "index": index,
                "split": split,
                "task_id": t.task_id,
                "domain": t.domain,
                "capabilities": list(t.capabilities),
                "tools": json.dumps(t.tools, ensure_ascii=False),
                "need_tools_kwargs": True,
                "tools_kwargs": {n: {"create_kwargs": create} for n in names} if names else None,
                "interaction_kwargs": {"name": t.domain, "query": query, "ground_truth": truth},
            },
            "agent_name": VERL_AGENT,
        }
        index += 1

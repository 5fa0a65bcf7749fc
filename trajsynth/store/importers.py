"""Importers of trajectories written by others into trajsynth rows.

tau-bench historical trajectories (sierra-research/tau-bench,
``historical_trajectories/``): each run is
``{task_id, trial, reward, info: {task: {user_id, actions: [{name, kwargs}], instruction,
outputs}, reward_info}, traj: OpenAI chat messages}``. :func:`tau_trajectories` turns each
into one row:

1) ``messages``: the OpenAI messages as they are (``tool_calls[i].function`` flattened into
   name and raw JSON arguments; tool results kept as text);
2) ``tools``: the domain's OpenAI tool list (``<domain>/tools_openai.json``);
3) ``goal``: the task's instruction to the simulated user (the whole goal), ``domain``:
   ``tau-<domain>``;
4) ``ground_truth``: one tool turn whose steps are the gold actions, one call each, with the
   task's required ``outputs``; tau-bench's own data hash is kept in its ``extra``;
5) outcome: ``success`` = (reward == 1), ``reward`` and ``reward_components["task"]`` =
   tau-bench's reward (its own verdict: a replay of the gold actions compared by DB hash),
   ``rollouts_total`` / ``rollouts_passed`` = trials and successes of the same task in the file
   (so difficulty is measured by pass@k);
6) ``capabilities`` from what the agent did: ``no_tool_needed`` / ``single_call`` /
   ``multi_call``, ``parallel_calls`` (two calls in one message), ``long_horizon`` (≥5
   calls), ``error_recovery`` (a tool result starting with "Error" followed by a successful
   call of the same tool);
7) provenance: ``method`` = ``import:tau-bench``, ``generator`` = the model named in the file
   name (``gpt-4o``), ``id`` = a hash of (file name, task, trial), ``created_at`` = the file's
   modification time, so re-importing the same file gives identical rows.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path
from typing import Any

from ..core.errors import DataError, InputNotFoundError
from ..core.ids import stable_id
from ..core.schema import Message, ToolCall, Trajectory
from ..core.task import GoldCall, GoldTurn, GroundTruth
from .shards import ShardInfo, ShardWriter

__all__ = ["tau_trajectories", "write_rows"]


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise InputNotFoundError(f"{path}: cannot read ({exc.strerror})") from exc
    except ValueError as exc:
        raise DataError(f"{path}: not JSON ({exc})") from exc


def source_files(src: str | Path, pattern: str, what: str) -> list[Path]:
    """``src`` itself when it is a file, else its files matching ``pattern`` (sorted); a
    missing ``src`` or a folder without any is an InputNotFoundError."""
    path = Path(src)
    if not path.exists():
        raise InputNotFoundError(f"{path} does not exist")
    files = [path] if path.is_file() else sorted(path.glob(pattern))
    if not files:
        raise InputNotFoundError(f"{path}: no {what}")
    return files


def _tools_for(src: Path, domain: str, tools: Path | None) -> list[dict[str, Any]]:
    if tools is None:
        for candidate in (
            src.parent.parent / domain / "tools_openai.json",
            src.parent / domain / "tools_openai.json",
            src.parent / "tools_openai.json",
        ):
            if candidate.is_file():
                tools = candidate
                break
    if tools is None:
        raise InputNotFoundError(
            f"no tools_openai.json found for domain {domain!r} next to {src}",
            hint="pass --tools PATH/TO/tools_openai.json",
        )
    value = _load_json(tools)
    if not isinstance(value, list):
        raise DataError(f"{tools}: expected a list of OpenAI tools")
    return value


def _message(raw: dict[str, Any], where: str) -> Message:
    role = raw.get("role")
    if role not in ("system", "user", "assistant", "tool"):
        raise DataError(f"{where}: unknown message role {role!r}")
    content = raw.get("content")
    if content is not None and not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    calls = []
    for i, c in enumerate(raw.get("tool_calls") or []):
        fn = c.get("function") or c
        args = fn.get("arguments", "{}")
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False)
        calls.append(
            ToolCall(id=c.get("id") or f"call_{i}", name=fn.get("name", ""), arguments=args)
        )
    return Message(
        role=role,
        content=content,
        tool_calls=calls,
        tool_call_id=raw.get("tool_call_id"),
        name=raw.get("name") if role == "tool" else None,
    )


def _capabilities(messages: list[Message]) -> list[str]:
    calls = [(m, c) for m in messages if m.role == "assistant" for c in m.tool_calls]
    caps: set[str] = set()
    n = len(calls)
    caps.add("no_tool_needed" if n == 0 else ("single_call" if n == 1 else "multi_call"))
    if any(len(m.tool_calls) > 1 for m in messages if m.role == "assistant"):
        caps.add("parallel_calls")
    if n >= 5:
        caps.add("long_horizon")
    # error recovery: an "Error..." result, later a successful call of the same tool
    names = {c.id: c.name for _, c in calls}
    outcomes = [
        (names.get(m.tool_call_id or "", m.name or ""), (m.content or "").startswith("Error"))
        for m in messages
        if m.role == "tool"
    ]
    for i, (name, failed) in enumerate(outcomes):
        if failed and any(n2 == name and not f2 for n2, f2 in outcomes[i + 1 :]):
            caps.add("error_recovery")
            break
    return sorted(caps)


def tau_trajectories(
    src: str | Path, *, tools: str | Path | None = None, domain: str | None = None
) -> list[Trajectory]:
    """Rows for every run in a tau-bench historical trajectories file (steps 1–7 above)."""
    path = Path(src)
    if not path.is_file():
        raise InputNotFoundError(f"{path} does not exist")
    stem = path.stem  # e.g. gpt-4o-airline
    if domain is None:
        domain = next((d for d in ("airline", "retail") if stem.endswith(d)), None)
        if domain is None:
            raise DataError(
                f"{path}: cannot tell the domain from the file name",
                hint="pass --domain airline or --domain retail",
            )
    generator = stem[: -len(domain)].rstrip("-_") if stem.endswith(domain) else ""
    tool_list = _tools_for(path, domain, Path(tools) if tools else None)
    runs = _load_json(path)
    if not isinstance(runs, list):
        raise DataError(f"{path}: expected a list of runs")
    created = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC)
    trials = Counter(r.get("task_id") for r in runs)
    passes = Counter(r.get("task_id") for r in runs if float(r.get("reward") or 0) >= 1.0)
    rows = []
    for k, run in enumerate(runs):
        where = f"{path}: run {k}"
        try:
            task_index = run["task_id"]
            task = run["info"]["task"]
            traj = run["traj"]
        except (KeyError, TypeError) as exc:
            raise DataError(f"{where}: missing {exc}") from None
        trial = run.get("trial", 0)
        reward = float(run.get("reward") or 0.0)
        messages = [_message(m, f"{where}, message {i}") for i, m in enumerate(traj)]
        actions = [a for a in task.get("actions") or [] if a.get("name") != "respond"]
        gold = GroundTruth(
            turns=[
                GoldTurn(
                    request=task.get("instruction", ""),
                    kind="tool" if actions else "no_tool",
                    steps=[
                        [GoldCall(name=a["name"], arguments=a.get("kwargs") or {})] for a in actions
                    ],
                )
            ],
            required_outputs=[str(o) for o in task.get("outputs") or []],
            extra={
                "source": "tau-bench v1",
                "user_id": task.get("user_id"),
                "gt_data_hash": ((run["info"].get("reward_info") or {}).get("info") or {}).get(
                    "gt_data_hash"
                ),
            },
        )
        rows.append(
            Trajectory(
                id=stable_id("tau-bench", path.name, task_index, trial),
                task_id=stable_id("tau-bench", domain, task_index),
                goal=task.get("instruction", ""),
                domain=f"tau-{domain}",
                capabilities=_capabilities(messages),
                ground_truth=gold,
                tools=tool_list,
                messages=messages,
                success=reward >= 1.0,
                reward=reward,
                reward_components={"task": reward},
                rollouts_total=trials[task_index],
                rollouts_passed=passes[task_index],
                method="import:tau-bench",
                stage_id="import",
                generator=generator,
                created_at=created,
                extra={
                    "source": f"tau-bench/historical_trajectories/{path.name}",
                    "task_index": task_index,
                    "trial": trial,
                    "user_cost": run["info"].get("user_cost"),
                },
            )
        )
    return rows


def write_rows(
    rows: list[Trajectory], out: str | Path, *, shard_rows: int = 50_000
) -> list[ShardInfo]:
    """Write rows as ``part-NNNNN.parquet`` shards in ``out`` (atomically, one by one)."""
    with ShardWriter(Path(out), shard_rows=shard_rows) as writer:
        writer.write(rows)
    return writer.shards

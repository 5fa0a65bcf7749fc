"""What LoopTool's stages share (Zhang et al. 2025, "LoopTool: Closing the Data–Training Loop
for Robust LLM Tool Calls", arXiv:2511.09148): a gold or predicted step as JSON and as the
judge reads it, where a flattened step sits in a task, the trajectory that executes a
relabelled task, and the origins a round's rows come from.

Used by ``gcp``, ``jglv``, ``edde``, ``looptool`` and ``looptool_report``; editing a helper
here changes all of them, on purpose.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any

from ...core.errors import EndpointError
from ...core.extras import GcpRecord, get
from ...core.schema import Message, ToolCall, Trajectory
from ...core.task import GoldCall, GroundTruth
from ...envs.verifiers.schema import normalize_call
from ...train.synth import gold_trajectory
from ..context import Context
from .rollouts import make_env

__all__ = [
    "ORIGINS",
    "calls_json",
    "context_calls",
    "locate_step",
    "origin_of",
    "run_gold",
    "step_text",
]

ORIGINS = ("seed", "expanded", "corrected", "high_ppl", "hindsight", "hard")


def origin_of(row: Trajectory) -> str:
    """The origin of a row entering a LoopTool round (the ``looptool`` stage's step 1)."""
    if row.method == "edde":
        return "expanded"
    if row.method == "jglv":
        return "corrected"
    if row.method == "echo":
        return "hindsight"
    if row.method == "hardgen":
        return "hard"
    gcp = get(row.extra, GcpRecord)
    if gcp is not None and gcp.status == "hard":
        return "high_ppl"
    return "seed"


def calls_json(step: Sequence[Any] | None) -> list[dict[str, Any]] | str:
    """A step as JSON: ``[{"name", "arguments"}]`` for calls, ``"text"`` for a text step."""
    if step is None:
        return "text"
    out = []
    for c in step:
        if isinstance(c, GoldCall):
            out.append({"name": c.name, "arguments": c.arguments})
        else:  # a ToolCall: arguments are raw JSON text
            name, args = normalize_call(c)
            if isinstance(args, str):
                # malformed text is kept as written (never equal to a label)
                with contextlib.suppress(ValueError):
                    args = json.loads(args)
            out.append({"name": name, "arguments": args})
    return out


def context_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls of an assistant message of a failure's ``context`` as ``{name, arguments}``
    (the context is dumped without defaults, so a call with no arguments has no key)."""
    return [
        {"name": c["name"], "arguments": c.get("arguments", "{}")}
        for c in message.get("tool_calls") or []
    ]


def step_text(step: list[dict[str, Any]] | str | None, content: str | None = None) -> str:
    """A step as LoopTool's judge reads it: ``<tool_call>`` blocks, or the text."""
    if step is None or isinstance(step, str):
        return content or "(a text reply, no tool call)"
    return "\n".join(
        f"<tool_call>\n{json.dumps(c, ensure_ascii=False)}\n</tool_call>" for c in step
    )


def locate_step(gt: GroundTruth, index: int) -> tuple[int, int] | None:
    """(turn, step) of flattened gold step ``index`` (the order of
    :func:`trajsynth.train.eval.gold_steps`), or None for a text step."""
    k = 0
    for t, turn in enumerate(gt.turns):
        if turn.kind == "clarify" and turn.clarification:
            if k == index:
                return None
            k += 1
        for s in range(len(turn.steps)):
            if k == index:
                return (t, s)
            k += 1
        if k == index:
            return None
        k += 1
    return None


def run_gold(
    row: Trajectory, gt: GroundTruth, ctx: Context, *, rehash: bool = False
) -> Trajectory | None:
    """The trajectory that executes ``gt``'s gold calls in the row's domain and state (the
    row's system prompt kept), or None when a call fails (JGLV's relabelled and EDDE's new
    samples must execute before they are kept). With ``rehash`` the returned row's ground
    truth gets the final state these calls reach (``final_state_hash``), so that ``verify``
    checks it. An endpoint error of a simulated tool (the ``tool`` role) is raised, not taken
    for a failing call."""
    task = row.derive(ground_truth=gt, messages=[])
    env = make_env(ctx, task, gt)
    try:
        env.reset(gt)
        n = 0
        for turn in gt.turns:
            for step in turn.steps:
                calls = []
                for c in step:
                    calls.append(
                        ToolCall(id=f"call_{n}", name=c.name, arguments=json.dumps(c.arguments))
                    )
                    n += 1
                obs, _, _ = env.step(Message(role="assistant", tool_calls=calls))
                if obs.errors:
                    return None
        if rehash:
            gt = gt.model_copy(update={"final_state_hash": env.state_hash()})
            task = task.derive(ground_truth=gt)
        traj = gold_trajectory(task, lambda r: make_env(ctx, r, gt))
    except EndpointError:  # a simulated tool's endpoint failed: not the calls' fault
        raise
    except Exception:  # a call the environment cannot run at all
        return None
    finally:
        env.close()
    system = [m for m in row.messages[:1] if m.role == "system"]
    return traj.derive(messages=system + list(traj.messages))

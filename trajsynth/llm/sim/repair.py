"""Simulated repair roles: the ECHO rewriter and the STeCa reflector.

- rewriter (ECHO, arXiv 2510.10304, PeopleJoin variant): reads a trajectory, keeps only the
  calls that actually succeeded (their tool results are not errors), and proposes the goal
  those calls achieved with a shortest workflow for it — or abstains with empty strings when
  nothing was achieved or, at ``abstain_rate``, when "unsure". Goals come only from what was
  observed, as ECHO requires. At ``error_rate`` one argument of the rewritten calls is wrong,
  so that the stage's replay check (trajsynth's addition to ECHO) has something to reject.
- reflector (STeCa, arXiv 2502.14276, §calibration): given the expert's next action and the
  agent's deviated one, writes the thought that notices the deviation and leads to the
  expert action.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from ...core.surface import verbatim
from ...core.task import GoldCall
from .actor import SimOutput
from .contracts import ReflectorMeta, RewriterMeta, SimConfig
from .judge import _ERROR_WORDS, as_calls
from .phrasing import compose_query, describe_call, intent_phrase
from .text import ToolIndex, perturb_value

__all__ = ["reflect", "rewrite"]


def _achieved(messages: list[dict[str, Any]]) -> list[tuple[GoldCall, str]]:
    """Executed calls whose results are not errors, in order, without exact repeats."""
    results: dict[str, str] = {}
    for m in messages:
        if m.get("role") == "tool" and m.get("tool_call_id"):
            content = m.get("content")
            results[m["tool_call_id"]] = (
                content if isinstance(content, str) else json.dumps(content)
            )
    done: list[tuple[GoldCall, str]] = []
    seen: set[str] = set()
    for m in messages:
        if m.get("role") != "assistant":
            continue
        for tc in m.get("tool_calls") or []:
            fn = tc["function"] if isinstance(tc.get("function"), dict) else tc
            name, raw = fn.get("name"), fn.get("arguments")
            result = results.get(tc.get("id") or "")
            if not name or result is None or _is_error(result):
                continue
            try:
                args = json.loads(raw) if isinstance(raw, str) else (raw or {})
            except ValueError:
                continue
            if not isinstance(args, dict):
                continue
            key = json.dumps([name, args], sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            try:
                output: Any = json.loads(result)
            except ValueError:
                output = result
            done.append((GoldCall(name=name, arguments=args, output=output), result))
    return done


def _is_error(result: str) -> bool:
    try:
        value = json.loads(result)
    except ValueError:
        return bool(_ERROR_WORDS.search(result[:300]))
    if isinstance(value, dict) and ("error" in value or value.get("status") == "error"):
        return True
    return isinstance(value, str) and bool(_ERROR_WORDS.search(value[:300]))


def rewrite(
    meta: RewriterMeta,
    messages: list[dict[str, Any]],
    tools_list: list | None,
    cfg: SimConfig,
    rng: Callable[..., random.Random],
) -> SimOutput:
    """ECHO's rewrite (JSON) or achievable-goal list (see the module docstring)."""
    tools = ToolIndex(meta.tools if meta.tools is not None else tools_list)
    traj = (
        [m.model_dump(mode="json") for m in meta.trajectory]
        if meta.trajectory is not None
        else messages
    )
    done = _achieved(traj)
    r = rng("rewrite")
    if meta.mode == "goals":
        goals = [describe_call(c, tools, r, prior_outputs=[]) for c, _ in done]
        if len(done) > 1:
            goals.append(compose_query([[c] for c, _ in done], tools, r))
        return SimOutput(content=json.dumps({"possible_goals": goals}, ensure_ascii=False))
    abstain = meta.abstain_rate if meta.abstain_rate is not None else cfg.rewriter_abstain_rate
    if not done or r.random() < abstain:
        empty = {"query": "", "workflow": "", "final_answer": "", "calls": []}
        return SimOutput(content=json.dumps(empty), uncertain=True)
    calls = [c for c, _ in done]
    query = compose_query([[c] for c in calls], tools, r)
    out_calls: list[dict[str, Any]] = [
        {"name": c.name, "arguments": dict(c.arguments)} for c in calls
    ]
    error = meta.error_rate if meta.error_rate is not None else cfg.rewriter_error_rate
    wrong = False
    if r.random() < error:
        with_args = [c for c in out_calls if c["arguments"]]
        if with_args:
            target = r.choice(with_args)
            k = r.choice(sorted(target["arguments"]))
            target["arguments"][k] = perturb_value(target["arguments"][k], r)
            wrong = True
    workflow = " ".join(
        f"Step {i + 1}: {intent_phrase(c['name'], _desc(tools, c['name']))} "
        f"({', '.join(f'{k}={verbatim(v)}' for k, v in c['arguments'].items())})."
        for i, c in enumerate(out_calls)
    )
    final = done[-1][1]
    body = {
        "query": query,
        "workflow": workflow,
        "final_answer": final[:500],
        "calls": out_calls,
    }
    return SimOutput(content=json.dumps(body, ensure_ascii=False), uncertain=wrong)


def _desc(tools: ToolIndex, name: str) -> str:
    info = tools.get(name)
    return info.description if info else ""


def reflect(
    meta: ReflectorMeta, tools_list: list | None, cfg: SimConfig, rng: Callable[..., random.Random]
) -> SimOutput:
    """STeCa's reflection thought for a deviated step."""
    tools = ToolIndex(tools_list)
    r = rng("reflect")
    expert = meta.expert_action
    deviated = as_calls(meta.deviated_action)
    if isinstance(deviated, list) and deviated:
        names = ", ".join(n for n, _ in deviated)
        what = f"calling {names}"
    elif isinstance(deviated, str) and deviated:
        what = "answering without the needed tool call"
    else:
        what = "the previous action"
    plan = " and ".join(
        f"{intent_phrase(c.name, _desc(tools, c.name))} by calling {c.name} with "
        + (
            ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in c.arguments.items())
            or "no arguments"
        )
        for c in expert
    )
    goal = f" toward the goal ({meta.goal.rstrip('.')})" if meta.goal else ""
    opener = r.choice(
        [
            f"My last step, {what}, was not optimal and does not move{goal}.",
            f"Looking back, {what} led in the wrong direction{goal}.",
            f"The last step ({what}) was a mistake; it does not get me closer{goal}.",
        ]
    )
    closer = r.choice(
        ["Instead, I should ", "To get back on track I need to ", "The right next step is to "]
    )
    return SimOutput(content=f"{opener} {closer}{plan}.")

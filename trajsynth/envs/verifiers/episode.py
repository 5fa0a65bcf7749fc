"""Layered verification of a played episode, in APIGen's order (Liu et al. 2024,
arXiv:2406.18518, §3.2: format → execution → semantics), with tau-bench's final
state as the first semantic check.

An episode (:class:`~trajsynth.envs.episode.EpisodeResult`) has already run its calls in a
real environment, so nothing is replayed: the layers read what happened. Stopping at the
first that fails:

1) ``format``: the policy's output parsed (no format errors) and every call names an offered
   tool with arguments that fit its schema (:func:`~.schema.check_call`);
2) ``execution``: no call returned an error, except the errors the task expects (gold calls
   listed in ``ground_truth.extra["expected_errors"]``: error-recovery tasks fail on purpose);
3) ``final_state``: the environment ended in the gold final state (``final_state_hash``),
   when the task records one;
4) ``outputs``: every required output appears in the last answer
   (:func:`~.final_state.required_outputs_present`);
5) ``call_match``: every gold call is matched, with BFCL's semantics
   (:func:`~.call_match.match_call`: acceptable values, optional parameters), by a distinct
   call of the episode (``contains``: extra calls allowed; ``exact``: no other calls), and
   the turns have the gold shape: a ``clarify`` turn's first assistant message asks instead
   of calling, a ``no_tool`` turn calls nothing.

The verdict names the first failing layer and why (a rejection reason), plus a 1/0 component
per layer run, so stages can write ``failure_layer``, ``failure_reason`` and
``reward_components``. An LLM judge, APIGen's last layer, is the calling stage's business.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ...core.ids import canonical_json
from ...core.schema import ToolCall
from ...core.task import GoldCall, GroundTruth
from ..spec import Toolset
from .call_match import match_call
from .final_state import required_outputs_present
from .schema import check_call

__all__ = ["LAYERS", "EpisodeVerdict", "verify_episode"]

LAYERS = ("format", "execution", "final_state", "outputs", "call_match")


@dataclass(frozen=True)
class EpisodeVerdict:
    """Whether an episode passed, and if not the first layer that failed and why."""

    ok: bool
    layer: str | None = None
    reason: str | None = None
    components: dict[str, float] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.ok


def _key(name: str, args: Any) -> str:
    return canonical_json([name, args])


def _final_answer(messages: Sequence[Any]) -> str | None:
    for m in reversed(messages):
        if m.role == "assistant" and not m.tool_calls:
            return m.content
    return None


def verify_episode(
    episode: Any,
    task: GroundTruth,
    tools: Toolset | list[dict[str, Any]],
    *,
    call_match: Literal["contains", "exact", "off"] = "contains",
) -> EpisodeVerdict:
    """Layers 1-5 of the module docstring for an :class:`EpisodeResult`."""
    toolset = Toolset.shared(tools)
    comps: dict[str, float] = {}

    def fail(layer: str, reason: str) -> EpisodeVerdict:
        comps[layer] = 0.0
        return EpisodeVerdict(False, layer, reason, dict(comps))

    calls: list[ToolCall] = list(episode.calls)
    # 1) format
    if episode.format_errors:
        return fail("format", episode.format_errors[0])
    for c in calls:
        issues = check_call(c, toolset)
        if issues:
            return fail("format", f"{c.name}: {issues[0]}")
    comps["format"] = 1.0
    # 2) execution
    flat = task.flat_calls()
    expected = {
        _key(flat[i].name, flat[i].arguments)
        for i in task.extra.get("expected_errors", [])
        if isinstance(i, int) and i < len(flat)
    }
    for r in episode.results:
        if r.error is not None and _key(r.name, r.arguments) not in expected:
            return fail("execution", f"{r.name}: {r.error.get('type')}: {r.error.get('message')}")
    comps["execution"] = 1.0
    # 3) final state
    if task.final_state_hash:
        if episode.final_state_hash != task.final_state_hash:
            return fail("final_state", "the environment did not end in the gold state")
        comps["final_state"] = 1.0
    # 4) required outputs
    if task.required_outputs:
        ok, missing = required_outputs_present(
            _final_answer(episode.messages), task.required_outputs
        )
        if not ok:
            return fail("outputs", f"the answer lacks {missing}")
        comps["outputs"] = 1.0
    # 5) call match and turn shape
    if call_match != "off":
        reason = _match_calls(calls, flat, toolset, exact=call_match == "exact")
        reason = reason or _turn_shape(episode, task)
        if reason:
            return fail("call_match", reason)
        comps["call_match"] = 1.0
    return EpisodeVerdict(True, None, None, comps)


def _match_calls(
    calls: list[ToolCall], gold: list[GoldCall], toolset: Toolset, *, exact: bool
) -> str | None:
    used: set[int] = set()
    for g in gold:
        spec = toolset.get(g.name)
        hit = next(
            (i for i, c in enumerate(calls) if i not in used and match_call(c, g, spec)), None
        )
        if hit is None:
            return f"no call matches the gold call {g.name}({canonical_json(g.arguments)})"
        used.add(hit)
    if exact and len(used) != len(calls):
        extra = [calls[i].name for i in range(len(calls)) if i not in used]
        return f"calls the gold does not make: {extra}"
    return None


def _turn_shape(episode: Any, task: GroundTruth) -> str | None:
    by_turn: dict[int, list[dict[str, Any]]] = {}
    for info in episode.step_info:
        by_turn.setdefault(info["turn"], []).append(info)
    for t, g in enumerate(task.turns):
        steps = by_turn.get(t, [])
        if g.kind == "clarify" and steps and steps[0]["calls"]:
            return f"turn {t} needs a clarifying question before any call"
        if g.kind == "no_tool" and any(s["calls"] for s in steps):
            return f"turn {t} needs no tool, but a tool was called"
    return None

"""Evaluation: a model's episodes on held-out tasks, scored by the shared verifiers, per
capability and overall. GRPO's reward and LoopTool's GCP probe use the same scoring code.

Scoring one episode (:func:`score_episode`) against its task's ground truth:

1) align steps: the gold steps are, turn by turn, a text step for a ``clarify`` turn's
   question, the turn's call steps, then a text step (the answer); the predicted steps are the
   episode's assistant messages (calls, or text when a message has no call);
2) ``call_match`` (BFCL AST semantics, :func:`~trajsynth.envs.verifiers.match_parallel`):
   as many steps as the gold, each gold call step matched by the predicted step at the same
   position (order-insensitive within a step, acceptable values, optional parameters), each
   text step answered by text;
3) ``exact_match``: LoopTool's binary reward (:func:`~trajsynth.envs.verifiers.
   exact_multiset_reward`) at every aligned step, 1 only when every step scores 1 and the
   step counts agree;
4) ``state_match``: tau-bench final state (the episode's calls replayed on a fresh
   environment reach the gold state hash) and ``outputs_match``: required outputs in the final
   answer (:mod:`~trajsynth.envs.verifiers.final_state`);
5) ``call_accuracy``: the share of gold call steps matched at their position;
6) ``tool_match``: the right tools at every step (each call step's multiset of tool names
   equals the gold's, text where the gold is text, as many steps), arguments aside: the skill
   a student learns before it can copy values.

:func:`evaluate` rolls a player out (greedy by default, :mod:`.rollout`: the runner and the
gold user generation uses) on every task and aggregates the scores overall and per
capability tag; when the player asks for log-probabilities (a local checkpoint, or a role
that reports them) it adds each episode's mean log-probability of its generated tokens and
the perplexity, which GCP ranks samples by.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..core.schema import Message, ToolCall, Trajectory
from ..core.task import GoldCall, GroundTruth
from .rollout import Player, RolloutConfig, run_rollouts

__all__ = [
    "METRICS",
    "EvalReport",
    "evaluate",
    "first_step_exact",
    "gold_steps",
    "predicted_steps",
    "score_episode",
    "step_outcomes",
]

#: the per-episode scores that are aggregated
METRICS = (
    "call_match",
    "exact_match",
    "state_match",
    "outputs_match",
    "call_accuracy",
    "tool_match",
)

Step = list[GoldCall] | None  # None: a text step
PredStep = list[ToolCall] | None


def gold_steps(gt: GroundTruth) -> list[Step]:
    """Step 1, the gold side."""
    steps: list[Step] = []
    for turn in gt.turns:
        if turn.kind == "clarify" and turn.clarification:
            steps.append(None)
        steps.extend(list(s) for s in turn.steps)
        steps.append(None)
    return steps


def predicted_steps(messages: Sequence[Message]) -> list[PredStep]:
    """Step 1, the predicted side."""
    return [list(m.tool_calls) or None for m in messages if m.role == "assistant"]


def score_episode(
    row: Trajectory,
    messages: Sequence[Message],
    make_env: Callable[[Trajectory], Any] | None = None,
) -> dict[str, float]:
    """Steps 1-5 for one episode; ``make_env`` enables the final-state check."""
    from ..envs.verifiers import exact_multiset_reward, required_outputs_present

    gt = row.ground_truth
    if gt is None:
        raise ValueError(f"task {row.task_id} has no ground truth")
    gold = gold_steps(gt)
    pred = predicted_steps(messages)
    tools = row.tools or None
    # 2) BFCL call match, step by step; 5) the share of call steps matched
    step_ok = _aligned(gold, pred, tools)
    call_steps = sum(1 for g in gold if g is not None)
    matched = sum(1 for g, ok in zip(gold, step_ok, strict=True) if g is not None and ok)
    call_match = len(pred) == len(gold) and all(step_ok)
    # 3) LoopTool exact multiset, step by step
    exact = len(pred) == len(gold) and all(
        exact_multiset_reward(p if p is not None else "text", g if g is not None else "text") == 1.0
        for p, g in zip(pred, gold, strict=False)
    )
    # 6) the right tools at every step
    tools_ok = len(pred) == len(gold) and all(
        (p is None) == (g is None)
        and (g is None or sorted(c.name for c in p or []) == sorted(c.name for c in g))
        for p, g in zip(pred, gold, strict=False)
    )
    scores = {
        "call_match": float(call_match),
        "exact_match": float(exact),
        "tool_match": float(tools_ok),
        "call_accuracy": matched / call_steps if call_steps else float(call_match),
    }
    # 4) final state and required outputs
    answer = next(
        (m.content for m in reversed(messages) if m.role == "assistant" and not m.tool_calls),
        None,
    )
    scores["outputs_match"] = float(required_outputs_present(answer, gt.required_outputs)[0])
    golds = gt.extra.get("answers") or gt.required_outputs  # a QA task's accepted answers
    if golds:
        from ..envs.verifiers import answer_exact_match, answer_f1

        scores["answer_em"] = answer_exact_match(answer, golds)
        scores["answer_f1"] = answer_f1(answer, golds)
    if make_env is not None:
        from ..envs.verifiers import final_state_match

        calls = [c for m in messages if m.role == "assistant" for c in m.tool_calls]
        state = final_state_match(calls, gt, lambda: make_env(row), use_cached=True)
        scores["state_match"] = float(state.ok)
    return scores


def _aligned(gold: list[Step], pred: list[PredStep], tools: Any) -> list[bool]:
    """Step 2 at each gold step: a call step matched by the predicted step at its position
    (BFCL AST semantics), a text step answered by text."""
    from ..envs.verifiers import match_parallel

    out = []
    for i, g in enumerate(gold):
        p = pred[i] if i < len(pred) else None
        if g is None:
            out.append(i < len(pred) and p is None)
        else:
            out.append(p is not None and bool(match_parallel(p, g, tools)))
    return out


def step_outcomes(
    row: Trajectory, messages: Sequence[Message], level: Literal["call", "tool"] = "call"
) -> list[float]:
    """The verifier's outcome of every assistant step: 1.0 when it matches the gold step at
    its position (step 2; ``level="tool"``: the same tools, arguments aside, as step 6), 0.0
    otherwise (a step past the gold's last is 0). Process labels for a step scorer
    (:mod:`.agent_prm`).

    >>> from trajsynth.core.task import GoldTurn
    >>> gt = GroundTruth(turns=[GoldTurn(request="hi", steps=[])])
    >>> row = Trajectory(id="r", task_id="t", ground_truth=gt)
    >>> step_outcomes(row, [Message(role="assistant", content="hello"),
    ...                     Message(role="assistant", content="again")])
    [1.0, 0.0]
    """
    gt = row.ground_truth
    if gt is None:
        raise ValueError(f"task {row.task_id} has no ground truth")
    gold, pred = gold_steps(gt), predicted_steps(messages)
    if level == "tool":
        ok = [
            i < len(pred)
            and (pred[i] is None) == (g is None)
            and (g is None or sorted(c.name for c in pred[i] or []) == sorted(c.name for c in g))
            for i, g in enumerate(gold)
        ]
    else:
        ok = _aligned(gold, pred, row.tools or None)
    return [float(ok[i]) if i < len(ok) else 0.0 for i in range(len(pred))]


def first_step_exact(row: Trajectory, messages: Sequence[Message]) -> float:
    """LoopTool's reward as its GRPO run scores it: one step against the gold, 1.0 when the
    episode's first assistant message makes the gold first step's calls as a multiset
    (arguments included), else 0.0. For one-turn rollouts (``max_steps`` 1) of single-call
    tasks, where :func:`score_episode` would also ask for the final answer; a GRPO
    ``reward_fn``."""
    from ..envs.verifiers import exact_multiset_reward

    gt = row.ground_truth
    if gt is None:
        raise ValueError(f"task {row.task_id} has no ground truth")
    gold = gold_steps(gt)[0]
    step = next((m for m in messages if m.role == "assistant"), None)
    pred = list(step.tool_calls) if step is not None and step.tool_calls else "text"
    return exact_multiset_reward(pred, gold if gold is not None else "text")


class EvalReport(BaseModel):
    """Scores overall and per capability (each a mean over the tasks carrying the tag)."""

    tasks: int
    overall: dict[str, float]
    by_capability: dict[str, dict[str, float]]
    by_domain: dict[str, dict[str, float]]
    counts: dict[str, int] = Field(default_factory=dict, description="Tasks per capability.")
    episodes: list[dict[str, Any]] = Field(default_factory=list)
    seconds: float = 0.0


def _mean(rows: list[dict[str, float]], key: str) -> float:
    values = [r[key] for r in rows if key in r]
    return sum(values) / len(values) if values else 0.0


def _aggregate(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = [k for k in (*METRICS, "mean_logprob", "perplexity", "steps", "format_errors")]
    return {k: _mean(rows, k) for k in keys if any(k in r for r in rows)}


def evaluate(
    rows: Sequence[Trajectory],
    player: Player,
    make_env: Callable[[Trajectory], Any],
    cfg: RolloutConfig | None = None,
    *,
    seed: int = 0,
    keep_episodes: bool = True,
    logprobs: bool = True,
) -> EvalReport:
    """Roll ``player`` out once on every task (greedy unless ``cfg`` says otherwise) and score
    each episode (module docstring); ``logprobs``: report the mean log-probability and the
    perplexity of the episodes whose generated tokens came with them."""
    import time

    cfg = cfg or RolloutConfig(temperature=0.0)
    t0 = time.perf_counter()
    episodes = run_rollouts(rows, player, make_env, cfg, samples=1, seed=seed)
    for ep in episodes:
        ep.scores.update(score_episode(ep.row, ep.messages, make_env))
        ep.scores["steps"] = float(ep.steps)
        ep.scores["format_errors"] = float(len(ep.format_errors))
        ep.success = bool(ep.scores["call_match"])
        if logprobs and ep.logprobs:
            mean = sum(ep.logprobs) / len(ep.logprobs)
            ep.scores["mean_logprob"] = mean
            ep.scores["perplexity"] = math.exp(-mean)
    per_cap: dict[str, list[dict[str, float]]] = defaultdict(list)
    per_domain: dict[str, list[dict[str, float]]] = defaultdict(list)
    for ep in episodes:
        for cap in ep.row.capabilities or ["untagged"]:
            per_cap[cap].append(ep.scores)
        per_domain[ep.row.domain or "?"].append(ep.scores)
    report = EvalReport(
        tasks=len(episodes),
        overall=_aggregate([ep.scores for ep in episodes]),
        by_capability={c: _aggregate(v) for c, v in sorted(per_cap.items())},
        by_domain={d: _aggregate(v) for d, v in sorted(per_domain.items())},
        counts={c: len(v) for c, v in sorted(per_cap.items())},
        seconds=time.perf_counter() - t0,
    )
    if keep_episodes:
        report.episodes = [
            {
                "task_id": ep.row.task_id,
                "capabilities": ep.row.capabilities,
                "scores": ep.scores,
                "messages": [m.model_dump(exclude_defaults=True) for m in ep.messages],
                "error": ep.error,
            }
            for ep in episodes
        ]
    return report

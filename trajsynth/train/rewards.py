"""The episode reward as a registry of named terms, composed with weights:

    R = Σ_k w_k · R_k − λ_eff · T / T_max − λ_fmt · 1[format error]

The terms (:data:`REWARD_TERMS`), each in [0, 1]:

- verifier terms (:func:`~trajsynth.train.eval.score_episode`): ``exact_match`` (LoopTool's
  binary reward), ``call_match`` (BFCL AST), ``state_match`` (tau-bench final state × the
  required outputs in the answer), ``tool_match`` (the right tools at every step),
  ``call_accuracy`` (the share of gold call steps matched: partial credit), ``answer_em`` /
  ``answer_f1`` (a QA task's final ``<answer>`` by exact match or token F1, Search-R1's
  reward; 0 for a task without accepted answers);
- ``agent_reward``: the three-part agent reward 0.5 · completion + 0.3 · process + 0.2 ·
  efficiency (:func:`trajsynth.quality.scores.score_conversation`, every weight in
  ``agent``), with completion = the episode's ``exact_match``;
- ``judge``: the judge's weighted dimensions Σ_d v_d · s_d (``judge.dimensions``, default
  completion 0.4, accuracy 0.3, structure 0.2, citations 0.1: the rubric of an LLM-as-judge
  reward), from the ``judge.role`` LLM asked for JSON scores in [0, 1] per dimension — the
  seeded simulator offline (``backend: sim``), any OpenAI-compatible endpoint online. An
  answer that cannot be read scores 0 and is counted.

The penalties are ``efficiency`` (λ_eff; T = assistant turns, T_max = the rollout's
``max_steps``) and ``format`` (λ_fmt: a parser format error, a turn cut at its token limit, an
episode that raised). With a task source's own reward (arena packages) every verifier term
reads that reward.

:class:`RewardConfig` is checked when it is built, before any rollout: a term that does not
exist, term weights that do not sum to the declared ``total``, judge dimension weights that do
not sum to ``judge.total``. Every term and penalty is averaged per update into the log
(``reward_<term>``, ``reward_efficiency``, ``reward_format``).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from ..core.config import StrictModel
from ..quality.scores import ScoreWeights, score_conversation

if TYPE_CHECKING:
    from ..core.schema import Trajectory
    from .rollout import Rollout

__all__ = [
    "JUDGE_DIMENSIONS",
    "REWARD_TERMS",
    "JudgeRewardConfig",
    "RewardConfig",
    "RewardTerm",
    "compose",
    "score_rewards",
]

#: the judge's rubric (an LLM-as-judge reward: completion, accuracy, structure, citations)
JUDGE_DIMENSIONS = {"completion": 0.4, "accuracy": 0.3, "structure": 0.2, "citations": 0.1}

JUDGE_PROMPT = """You grade an AI assistant's tool-using conversation against a rubric. \
Score each dimension from 0 to 1:
{dimensions}
Answer with one JSON object mapping each dimension to its score, nothing else."""

_DIMENSION_TEXT = {
    "completion": "did the assistant complete every request of the user",
    "accuracy": "are the tool calls and their arguments correct for the requests",
    "structure": "are the calls well-formed (valid JSON arguments, offered tools only)",
    "citations": "does the final answer report the values the tools returned",
}


@dataclass(frozen=True)
class RewardTerm:
    name: str
    description: str
    source: str  # verifier, quality, judge


REWARD_TERMS: dict[str, RewardTerm] = {
    t.name: t
    for t in (
        RewardTerm(
            "exact_match", "LoopTool's binary exact multiset match at every step", "verifier"
        ),
        RewardTerm("call_match", "BFCL AST match of every step", "verifier"),
        RewardTerm("state_match", "final state reached and required outputs given", "verifier"),
        RewardTerm("tool_match", "the right tools at every step, arguments aside", "verifier"),
        RewardTerm(
            "call_accuracy", "share of gold call steps matched (partial credit)", "verifier"
        ),
        RewardTerm("answer_em", "the final <answer> equals one of a QA task's answers", "verifier"),
        RewardTerm(
            "answer_f1", "token F1 of the final <answer> against a QA task's answers", "verifier"
        ),
        RewardTerm("agent_reward", "0.5 completion + 0.3 process + 0.2 efficiency", "quality"),
        RewardTerm("judge", "the judge's weighted rubric dimensions", "judge"),
    )
}


def _check_sum(weights: dict[str, float], total: float, what: str) -> None:
    s = sum(weights.values())
    if abs(s - total) > 1e-6:
        raise ValueError(f"{what} weights sum to {s:g}, not the declared total {total:g}")


class JudgeRewardConfig(StrictModel):
    """The ``judge`` term: which LLM grades and how its dimensions are weighted."""

    role: dict[str, Any] = Field(
        default_factory=lambda: {"backend": "sim"},
        description="The judge's LLM role (trajsynth.llm RoleConfig): the simulator offline "
        "(backend: sim), any OpenAI-compatible endpoint online (backend: openai, base_url, "
        "model).",
    )
    dimensions: dict[str, float] = Field(
        default_factory=lambda: dict(JUDGE_DIMENSIONS),
        description="Rubric dimension → weight.",
    )
    total: float = Field(default=1.0, gt=0, description="What the dimension weights sum to.")
    concurrency: int = Field(default=16, ge=1, description="Judge requests in flight.")

    @model_validator(mode="after")
    def _sums(self) -> JudgeRewardConfig:
        if not self.dimensions:
            raise ValueError("the judge needs at least one dimension")
        if any(w < 0 for w in self.dimensions.values()):
            raise ValueError("judge dimension weights must be ≥ 0")
        _check_sum(self.dimensions, self.total, "the judge's dimension")
        from ..llm.base import RoleConfig

        RoleConfig.model_validate({"cache": False, **self.role})  # a bad role fails here
        return self


class RewardConfig(StrictModel):
    """The training reward (module docstring). ``kind`` alone is the single term of earlier
    versions (``{kind: tool_match}`` = ``{terms: {tool_match: 1}}``)."""

    kind: str | None = Field(
        default=None, description="One term with weight 1 (the same as terms: {KIND: 1})."
    )
    terms: dict[str, float] | None = Field(
        default=None,
        description="Term → weight (default {exact_match: 1}); terms: exact_match, call_match, "
        "state_match, tool_match, call_accuracy, answer_em, answer_f1, agent_reward, judge.",
    )
    total: float = Field(default=1.0, gt=0, description="What the term weights sum to.")
    efficiency: float = Field(
        default=0.0, ge=0, description="λ_eff: R −= λ_eff · turns / max_turns (0: off)."
    )
    format: float = Field(
        default=0.0, ge=0, description="λ_format: R −= λ_format when a turn had a format error."
    )
    agent: ScoreWeights = Field(
        default_factory=ScoreWeights, description="Weights of the agent_reward term."
    )
    judge: JudgeRewardConfig = Field(
        default_factory=JudgeRewardConfig, description="The judge term's LLM and rubric."
    )

    @model_validator(mode="after")
    def _check(self) -> RewardConfig:
        if self.kind is not None and self.terms is not None:
            raise ValueError("give either kind or terms, not both")
        weights = self.weights()
        unknown = sorted(set(weights) - set(REWARD_TERMS))
        if unknown:
            raise ValueError(
                f"unknown reward term {', '.join(map(repr, unknown))}; terms: "
                + ", ".join(REWARD_TERMS)
            )
        if any(w < 0 for w in weights.values()):
            raise ValueError("reward term weights must be ≥ 0")
        _check_sum(weights, self.total, "the reward terms'")
        return self

    def weights(self) -> dict[str, float]:
        if self.terms is not None:
            return dict(self.terms)
        return {self.kind or "exact_match": self.total}

    def success_term(self) -> str:
        """The verifier term an episode's ``success`` reads (the first named, else
        exact_match; state_match reads call_match, as before)."""
        for name in self.weights():
            if REWARD_TERMS[name].source == "verifier":
                return "call_match" if name == "state_match" else name
        return "exact_match"


# --------------------------------------------------------------------------------------
# terms
# --------------------------------------------------------------------------------------


def compose(values: dict[str, float], weights: dict[str, float], penalties: float) -> float:
    """Σ_k w_k · R_k − penalties.

    >>> compose({"exact_match": 1.0, "agent_reward": 0.5}, {"exact_match": 0.7,
    ...          "agent_reward": 0.3}, 0.1)
    0.75
    """
    return round(sum(w * values[k] for k, w in weights.items()) - penalties, 12)


def _verifier_value(name: str, scores: dict[str, float]) -> float:
    if name == "state_match":
        return scores.get("state_match", 0.0) * scores.get("outputs_match", 0.0)
    return float(scores.get(name, 0.0))


def _agent_value(ep: Rollout, scores: dict[str, float], weights: ScoreWeights) -> float:
    parts = score_conversation(
        ep.messages,
        ep.row.tools,
        format_errors=ep.format_errors,
        components={"task": float(scores.get("exact_match", 0.0))},
        weights=weights,
    )
    return parts["agent_reward"]


def _judge_body(ep: Rollout) -> str:
    lines = []
    for m in ep.messages:
        if m.role == "assistant" and m.tool_calls:
            calls = "; ".join(f"{c.name}({c.arguments})" for c in m.tool_calls)
            lines.append(f"assistant calls: {calls}")
        elif m.role in ("user", "assistant", "tool"):
            lines.append(f"{m.role}: {(m.content or '')[:2000]}")
    return "\n".join(lines)


def _judge_meta(ep: Rollout, dimensions: Sequence[str]) -> dict[str, Any]:
    """What the simulator reads (an endpoint ignores it unless asked to send metadata)."""

    gt = ep.row.ground_truth
    calls = [
        {"name": c.name, "arguments": c.parsed_arguments()}
        for m in ep.messages
        if m.role == "assistant"
        for c in m.tool_calls
    ]
    answer = next(
        (m.content for m in reversed(ep.messages) if m.role == "assistant" and not m.tool_calls),
        None,
    )
    meta: dict[str, Any] = {
        "role": "judge",
        "mode": "rubric",
        "calls": [c if isinstance(c["arguments"], dict) else {**c, "arguments": {}} for c in calls],
        "answer": answer,
        "dimensions": list(dimensions),
        "format_errors": len(ep.format_errors),
    }
    if gt is not None:
        meta["reference"] = [
            c.model_dump(mode="json", include={"name", "arguments"}) for c in gt.flat_calls()
        ]
        meta["required_outputs"] = list(gt.required_outputs)
    return meta


def parse_rubric(text: str, dimensions: Sequence[str]) -> dict[str, float] | None:
    """The judge's JSON scores per dimension (clipped to [0, 1]; a 0-10 scale is divided by
    10), or None when they cannot be read.

    >>> parse_rubric('ok {"completion": 1, "accuracy": 0.5}', ["completion", "accuracy"])
    {'completion': 1.0, 'accuracy': 0.5}
    >>> parse_rubric('{"completion": 8}', ["completion"])
    {'completion': 0.8}
    """
    found = re.search(r"\{.*\}", text, re.S)
    if found is None:
        return None
    try:
        data = json.loads(found.group(0))
        values = {d: float(data[d]) for d in dimensions}
    except (ValueError, KeyError, TypeError):
        return None
    if any(v > 1.0 for v in values.values()):
        values = {d: v / 10.0 for d, v in values.items()}
    return {d: min(1.0, max(0.0, v)) for d, v in values.items()}


def judge_scores(
    episodes: Sequence[Rollout], cfg: JudgeRewardConfig, seed: int = 0
) -> list[dict[str, float] | None]:
    """The rubric scores of every episode from the judge role (None: unreadable)."""
    from ..core.schema import Message
    from ..llm.client import aclose, client_for_role

    client = client_for_role("judge", {"judge": {"cache": False, **cfg.role}})
    dims = list(cfg.dimensions)
    system = JUDGE_PROMPT.format(
        dimensions="\n".join(f"- {d}: {_DIMENSION_TEXT.get(d, d)}" for d in dims)
    )

    async def one(gate: asyncio.Semaphore, k: int, ep: Rollout) -> dict[str, float] | None:
        async with gate:
            reply = await client.chat(
                [
                    Message(role="system", content=system),
                    Message(role="user", content=_judge_body(ep)),
                ],
                None,
                temperature=0.0,
                seed=seed * 100_003 + k,
                metadata=_judge_meta(ep, dims),
            )
        if not reply.ok:
            reply.raise_for_infra()
            return None
        return parse_rubric(reply.choices[0].message.content or "", dims)

    async def main() -> list[dict[str, float] | None]:
        gate = asyncio.Semaphore(cfg.concurrency)
        try:
            return list(await asyncio.gather(*(one(gate, k, ep) for k, ep in enumerate(episodes))))
        finally:
            await aclose()

    return asyncio.run(main())


# --------------------------------------------------------------------------------------
# an update's episodes
# --------------------------------------------------------------------------------------


def score_rewards(
    episodes: Sequence[Rollout],
    make_env: Callable[[Trajectory], Any] | None,
    cfg: RewardConfig,
    max_turns: int,
    *,
    reward_fn: Callable[[Trajectory, list[Any]], float] | None = None,
    seed: int = 0,
) -> dict[str, float]:
    """Set every episode's ``reward``, ``scores`` (each term and penalty), ``success`` and
    ``step_rewards`` (the reward on the last turn); returns the per-term means for the log."""
    from .eval import METRICS, score_episode

    weights = cfg.weights()
    judged: list[dict[str, float] | None] = [None] * len(episodes)
    if "judge" in weights:
        judged = judge_scores(episodes, cfg.judge, seed)
    sums: dict[str, float] = {}
    unreadable = 0
    success_term = cfg.success_term()
    for ep, rubric in zip(episodes, judged, strict=True):
        if reward_fn is not None:  # the task source's own reward stands in for the verifier
            task = float(reward_fn(ep.row, ep.messages))
            scores = {m: task for m in METRICS} | {"outputs_match": 1.0}
        else:
            scores = score_episode(ep.row, ep.messages, make_env)
        ep.scores.update(scores)
        values: dict[str, float] = {}
        for name in weights:
            source = REWARD_TERMS[name].source
            if source == "verifier":
                values[name] = _verifier_value(name, scores)
            elif source == "quality":
                values[name] = _agent_value(ep, scores, cfg.agent)
            else:
                if rubric is None:
                    unreadable += 1
                    values[name] = 0.0
                else:
                    total = sum(cfg.judge.dimensions.values())
                    values[name] = (
                        sum(w * rubric[d] for d, w in cfg.judge.dimensions.items()) / total
                    )
                    for d, v in rubric.items():
                        ep.scores[f"judge_{d}"] = v
        eff = cfg.efficiency * ep.steps / max_turns
        fmt = cfg.format if (ep.format_errors or ep.truncated or ep.error) else 0.0
        ep.reward = compose(values, weights, eff + fmt)
        ep.success = bool(_verifier_value(success_term, scores) >= 1.0)
        ep.step_rewards = [0.0] * max(0, ep.steps - 1) + [ep.reward] if ep.steps else []
        for name, v in values.items():
            ep.scores[name] = v
        ep.scores["efficiency_penalty"] = eff
        ep.scores["format_penalty"] = fmt
        for name, v in (*values.items(), ("efficiency", -eff), ("format", -fmt)):
            sums[f"reward_{name}"] = sums.get(f"reward_{name}", 0.0) + v
    n = max(1, len(episodes))
    out = {k: v / n for k, v in sums.items()}
    if "judge" in weights:
        out["judge_unreadable"] = float(unreadable)
    return out

"""``tsr``: Trajectory-Search Rollouts (Djuhera et al. 2026, "Trajectory-Search Rollouts",
arXiv:2602.11767): at every turn several candidate actions are sampled from the policy, each is
tried from a snapshot of the environment and scored, and only the best one(s) are kept.

For each task row (its ground truth gives the gold state the scorer aims at):

1) the gold final state: the gold calls replayed once in a fresh environment (snapshot kept);
2) at each assistant step, ``n`` candidates (N) from the policy in one request;
3) each candidate is executed from the step's snapshot (the episode and the environment are
   restored before each) and scored deterministically by verifier progress toward the gold:
   ``0.5 · state + 0.5 · calls − penalties``, where ``state`` = 1 − (rows differing from the
   gold final state ÷ rows the gold changes), ``calls`` = the share of gold calls matched so
   far (BFCL semantics), and the penalties are 0.5 per format error, 0.25 per unexpected tool
   error, 0.5 for calling before asking on a clarify turn and 1 for ending a turn whose gold
   calls are not all made;
4) ``best_of_n``: the best candidate is kept and the search goes on from it; ``beam``: every
   kept prefix (at most B) is expanded with N candidates and the B best partial trajectories
   are kept; ``sample``: plain sampling (one candidate, for comparison);
5) the result is the kept trajectory — only executed actions enter it, the environment ends
   in its state — verified by the layered verifier. ``step_rewards`` hold the score of each
   kept step, ``extra["tsr"]`` the budget (candidates sampled, environment steps run, beams
   kept at most) and the log-probabilities of the executed actions when the backend reports
   them (``extra["logprobs"]``).

Deviations: no shallow lookahead and no instance filtering (both optional in the paper);
the scorer is the gold-progress one above (TSR's scorers are task-specific).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ...core.schema import Message, Trajectory
from ...core.task import GroundTruth
from ...envs.base import EnvSnapshot
from ...envs.episode import Episode, EpisodeSnapshot
from ...envs.verifiers.call_match import match_call
from ...envs.verifiers.episode import verify_episode
from ...envs.verifiers.final_state import replay
from ..common.policies import LLMPolicy, PolicyError
from ..common.rollouts import ROLLOUT_WRITES, RolloutLimits, RolloutStage, episode_row, make_env
from ..context import Context
from ..kinds import Emit, StageConfig
from ..registry import register

__all__ = ["TSR", "TSRConfig", "progress_score"]


class TSRConfig(StageConfig):
    role: str = Field("policy", description="LLM role whose actions are searched.")
    mode: Literal["best_of_n", "beam", "sample"] = Field(
        "best_of_n", description="best_of_n, beam (top-B partial trajectories), or plain sample."
    )
    n: int = Field(4, ge=1, le=64, description="Candidates per step (N).")
    beam: int = Field(2, ge=1, le=16, description="Partial trajectories kept (B), beam mode.")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature.")
    logprobs: bool = Field(True, description="Ask for log-probabilities of the actions.")
    limits: RolloutLimits = Field(default_factory=RolloutLimits, description="Episode limits.")


@dataclass
class _Beam:
    snap: EpisodeSnapshot
    score: float
    scores: list[float]
    logprobs: list[float | None]


@register
class TSR(RolloutStage[TSRConfig]):
    """Per-step search over policy samples scored by progress toward the gold state."""

    name = "tsr"
    writes = (*ROLLOUT_WRITES, "step_rewards")

    async def rollout(
        self, row: Trajectory, gt: GroundTruth, opening: list[Message], ctx: Context
    ) -> list[Trajectory | Emit]:
        cfg = self.config
        # 1) the gold final state
        gold_env = make_env(ctx, row, gt)
        gold_env.reset(gt)
        replay(gold_env, gt.flat_calls())
        gold = gold_env.snapshot()
        env = make_env(ctx, row, gt)
        env.reset(gt)
        base = len(env.diff(gold))
        scorer = _Scorer(gt, row.tools, gold, base)
        ep = Episode(gt, env, tools=row.tools, prefix=opening, limits=cfg.limits.limits())
        await ep.start()
        policy = LLMPolicy(
            ctx, cfg.role, task=gt, seed=ctx.row_seed(row.id, "tsr"),
            temperature=cfg.temperature, logprobs=cfg.logprobs,
        )  # fmt: skip
        n = 1 if cfg.mode == "sample" else cfg.n
        width = cfg.beam if cfg.mode == "beam" else 1
        budget = {"candidates": 0, "env_steps": 0, "requests": 0, "max_beams": 1}
        beams = [_Beam(ep.snapshot(), 0.0, [], [])]
        try:
            while any(not b.snap.state.end for b in beams):
                expanded: list[_Beam] = [b for b in beams if b.snap.state.end]
                for b in beams:
                    if b.snap.state.end:
                        continue
                    ep.restore(b.snap)
                    # 2) N candidates
                    cands = await policy.sample(ep.messages, row.tools, n)
                    budget["requests"] += 1
                    budget["candidates"] += len(cands)
                    for cand in cands:
                        # 3) execute from the snapshot and score
                        ep.restore(b.snap)
                        await ep.advance(cand)
                        budget["env_steps"] += 1 if cand.message.tool_calls else 0
                        score = scorer(ep)
                        expanded.append(
                            _Beam(ep.snapshot(), score, [*b.scores, score],
                                  [*b.logprobs, cand.logprob])
                        )  # fmt: skip
                # 4) keep the best (ties: the earlier candidate)
                expanded.sort(key=lambda x: -x.score)
                beams = expanded[:width]
                budget["max_beams"] = max(budget["max_beams"], len(beams))
        except PolicyError as exc:
            ctx.metrics.inc("rejected.generation")
            ctx.log.debug("tsr %s: %s", row.id, exc)
            return []
        # 5) the kept trajectory
        best = beams[0]
        ep.restore(best.snap)
        result = ep.result()
        verdict = verify_episode(result, gt, row.tools)
        ctx.metrics.inc("candidates", budget["candidates"])
        ctx.metrics.inc("env_steps", budget["env_steps"])
        ctx.metrics.inc("passed" if verdict.ok else f"rejected.{verdict.layer}")
        steps = sum(1 for m in result.messages if m.role == "assistant")
        opening_steps = sum(1 for m in opening if m.role == "assistant")
        scores = [None] * opening_steps + best.scores
        return [
            episode_row(
                ctx,
                row,
                result,
                verdict,
                method="tsr",
                key=cfg.mode,
                generator=ctx.llm(cfg.role).model,
                extra={
                    "tsr": {"mode": cfg.mode, "n": n, "beam": width, **budget},
                    "logprobs": best.logprobs,
                },
                step_rewards=scores[:steps] if len(scores) >= steps else [],
            )
        ]


class _Scorer:
    """Step 3's deterministic score of an episode's current state."""

    def __init__(
        self, gt: GroundTruth, tools: list[dict[str, Any]], gold: EnvSnapshot, base: int
    ) -> None:
        from ...envs.spec import Toolset

        self.gt = gt
        self.gold = gold
        self.base = base
        self.flat = gt.flat_calls()
        self.specs = {t.name: t for t in Toolset.from_openai(tools).tools}
        expected = gt.extra.get("expected_errors", [])
        self.expected = {
            (self.flat[i].name, repr(sorted(self.flat[i].arguments.items())))
            for i in expected
            if isinstance(i, int) and i < len(self.flat)
        }

    def __call__(self, ep: Episode) -> float:
        return progress_score(self, ep)


def progress_score(scorer: _Scorer, ep: Episode) -> float:
    """Verifier progress toward the gold (step 3 of the module docstring)."""
    diff = len(ep.env.diff(scorer.gold))
    if scorer.base:
        state = 1.0 - diff / scorer.base
    else:
        state = 1.0 if diff == 0 else -float(diff)
    res = ep.result()
    calls = res.calls
    used: set[int] = set()
    for g in scorer.flat:
        hit = next(
            (
                i
                for i, c in enumerate(calls)
                if i not in used and match_call(c, g, scorer.specs.get(g.name))
            ),
            None,
        )
        if hit is not None:
            used.add(hit)
    matched = len(used) / len(scorer.flat) if scorer.flat else 1.0
    penalty = 0.5 * len(res.format_errors)
    penalty += 0.25 * sum(
        1
        for e in res.tool_errors
        if (e["name"], repr(sorted((_args(res, e["call"]) or {}).items()))) not in scorer.expected
    )
    by_turn: dict[int, list[dict[str, Any]]] = {}
    for info in res.step_info:
        by_turn.setdefault(info["turn"], []).append(info)
    for t, turn in enumerate(scorer.gt.turns):
        steps = by_turn.get(t, [])
        if turn.kind == "clarify" and steps and steps[0]["calls"]:
            penalty += 0.5
        if t < ep.turn or ep.done:  # the turn is over: were its gold calls made?
            gold_n = sum(len(s) for s in turn.steps)
            made = sum(s["calls"] for s in steps)
            if gold_n and made < gold_n:
                penalty += 1.0
    return round(0.5 * state + 0.5 * matched - penalty, 6)


def _args(res: Any, call_id: str) -> dict[str, Any] | None:
    for c in res.calls:
        if c.id == call_id:
            return c.parsed_arguments()
    return None

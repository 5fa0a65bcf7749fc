"""``rejection_sampling``: N rollouts per task, each verified in APIGen's layered order; the
successes are kept, every failure is kept aside with the reason it was rejected, and every row
carries the task's pass@k counts (Liu et al. 2024, "APIGen: Automated Pipeline for Generating
Verifiable and Diverse Function-Calling Datasets", arXiv:2406.18518, §3.2; Prabhakar et al.
2025, "APIGen-MT: Agentic Pipeline for Multi-Turn Data Generation via Simulated Agent-Human
Interplay", arXiv:2504.03601, phase 2).

For each task row:

1) ``n`` rollouts (N, default 8) of the ``role`` policy (the teacher by default) through the
   shared episode runner, each in a fresh environment of the task's domain and state. The
   rollouts share their prompt, so their first assistant step is one request with ``n = N``
   (``first_step_n``); each then goes on with its own seed;
2) each rollout is verified, stopping at the first layer that fails
   (:func:`~trajsynth.envs.verifiers.verify_episode`): ``format`` (the output parsed; calls fit
   the offered tools' schemas) → ``execution`` (no call returned an error the task does not
   expect) → ``final_state`` (the gold state hash) → ``outputs`` (required outputs in the
   answer) → ``call_match`` (every gold call matched, BFCL semantics; clarify and no-tool turns
   shaped as the gold) → ``judge`` (optional: APIGen's semantic checker, ``judge`` role). A
   request that the endpoint refused (a 4xx, no choices) is a rejection at the ``generation``
   layer; a rollout whose request failed because of the endpoint (retries exhausted, 429s,
   circuit open: :class:`~trajsynth.core.errors.InfraError`) is no outcome of the model: it is
   dropped, counted in ``infra.lost`` (of ``infra.units``, the N per task), and appears
   neither in ``failed`` nor in the counts below. When the shared first step fails that way,
   all N rollouts of the task are lost;
3) rows: a successful rollout goes to the main output; a failed one, with ``failure_layer``
   and ``failure_reason``, to the ``failed`` side output (for repair stages: ECHO, STeCa,
   JGLV). Every row of the task carries ``rollouts_total = N`` (less the rollouts lost to the
   endpoint) and ``rollouts_passed = c``, the difficulty signal later stages and
   ``trajsynth stats`` (pass@1, pass@k per capability) read. Read both outputs together for
   unbiased pass@k: ``trajsynth stats 'runs/x/rollouts/**/*.parquet'``. Above the run's
   ``max_infra_error_rate`` of lost rollouts the runner fails the stage, so that a rerun
   plays the affected units again (see ``trajsynth.pipeline.runner``).

Scheduling: tasks start longest expected episode first and at most ``episodes_in_flight``
episodes play at once (twice the role's endpoint concurrency by default), so long episodes
are not left for last with the endpoint half empty (``bench/generation.py``).

Metrics: ``tasks``, ``tasks_solved``, ``rollouts`` (played to a verdict), ``passed``,
``rejected.<layer>``, ``infra.units`` (rollouts tried), ``infra.lost``, and per domain
``domain.<name>.tasks`` and ``domain.<name>.solved``: a domain with tasks and none solved is a
finding of the stage (``trajsynth run`` prints it), since no row of it reaches training.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from pydantic import Field

from ...core.errors import InfraError
from ...core.schema import Message, Trajectory
from ...core.task import GroundTruth
from ...envs.episode import Episode, PolicyStep
from ...envs.verifiers.episode import EpisodeVerdict, verify_episode
from ..common.policies import LLMPolicy, PolicyError
from ..common.rollouts import (
    ROLLOUT_WRITES,
    RolloutLimits,
    RolloutStage,
    episode_row,
    judge_episode,
    make_env,
    play_policy,
)
from ..context import Context
from ..kinds import Emit, StageConfig
from ..registry import register

__all__ = ["RejectionSampling", "RejectionSamplingConfig"]


class RejectionSamplingConfig(StageConfig):
    role: str = Field("teacher", description="LLM role that rolls out (teacher, policy, ...).")
    n: int = Field(8, ge=1, le=64, description="Rollouts per task (N; pass@k up to k = N).")
    temperature: float = Field(0.7, ge=0, description="Sampling temperature.")
    first_step_n: bool = Field(
        True, description="Sample the shared first step of all N rollouts in one request."
    )
    call_match: Literal["contains", "exact", "off"] = Field(
        "contains",
        description="Layer call_match: every gold call matched (contains), and no other call "
        "(exact), or off.",
    )
    judge: bool = Field(False, description="Add APIGen's semantic checker (judge role) last.")
    judge_role: str = Field("judge", description="LLM role of the semantic checker.")
    keep: Literal["all", "first"] = Field(
        "all", description="Keep every successful rollout of a task, or only the first."
    )
    episodes_in_flight: int | None = Field(
        None,
        ge=1,
        description="Episodes played at once (default: twice the role's max_concurrency), "
        "longest tasks first, so that the endpoint stays full to the end of a batch.",
    )
    limits: RolloutLimits = Field(default_factory=RolloutLimits, description="Episode limits.")


#: the metrics' prefix of the per-domain counts
_DOMAIN = "domain."


@register
class RejectionSampling(RolloutStage[RejectionSamplingConfig]):
    """N rollouts per task, verified format → execution → state/calls → judge; failures kept."""

    name = "rejection_sampling"
    writes = (*ROLLOUT_WRITES, "rollouts_total", "rollouts_passed", "judge")
    outputs = ("main", "failed")

    def setup(self, ctx: Context) -> None:
        self._slots: dict[Any, asyncio.Semaphore] = {}

    def findings(self, metrics: dict[str, Any]) -> list[str]:
        """The domains whose tasks were all failed (one line naming them all)."""
        counts: dict[str, dict[str, float]] = {}
        for key, n in metrics.get("counters", {}).items():
            if key.startswith(_DOMAIN):
                domain, _, what = key[len(_DOMAIN) :].rpartition(".")
                counts.setdefault(domain, {})[what] = n
        unsolved = sorted(
            (d, int(c.get("tasks", 0)))
            for d, c in counts.items()
            if c.get("tasks", 0) and not c.get("solved", 0)
        )
        if not unsolved:
            return []
        named = ", ".join(f"{d} ({n} task{'s' if n != 1 else ''})" for d, n in unsolved)
        some, its = ("1", "its") if len(unsolved) == 1 else (str(len(unsolved)), "their")
        return [
            f"{some} of {len(counts)} domains had no task solved in {self.config.n} rollouts "
            f"each, so none of {its} rows reaches the output: {named} (the failed side output "
            "says why)"
        ]

    def _episode_slots(self, ctx: Context) -> asyncio.Semaphore:
        """One semaphore per event loop bounding the episodes in flight."""
        cfg = self.config
        if not hasattr(self, "_slots"):
            self._slots = {}
        loop = asyncio.get_running_loop()
        if loop not in self._slots:
            n = cfg.episodes_in_flight or 2 * ctx.llm(cfg.role).config.max_concurrency
            self._slots[loop] = asyncio.Semaphore(n)
        return self._slots[loop]

    async def rollout(
        self, row: Trajectory, gt: GroundTruth, opening: list[Message], ctx: Context
    ) -> list[Trajectory | Emit]:
        cfg = self.config
        # 1) N rollouts
        first: list[PolicyStep | None] = [None] * cfg.n
        first_error: str | None = None
        ctx.metrics.inc("infra.units", cfg.n)
        if cfg.first_step_n and cfg.n > 1:
            shared = LLMPolicy(
                ctx, cfg.role, task=gt, seed=ctx.row_seed(row.id, "first"),
                temperature=cfg.temperature,
            )  # fmt: skip
            try:
                first = list(await shared.sample(opening, row.tools, cfg.n))
            except PolicyError as exc:
                first_error = str(exc)
            except InfraError as exc:
                ctx.lost_to_infra(exc, cfg.n, unit="rollouts")
                return []
        played = await asyncio.gather(
            *(self._rollout(ctx, row, gt, opening, r, first[r], first_error) for r in range(cfg.n))
        )
        # 3) rows (a rollout lost to the endpoint is none: not failed, not in rollouts_total)
        outcomes = [(r, o) for r, o in enumerate(played) if o is not None]
        total = len(outcomes)
        passed = sum(1 for _, (_, v, _) in outcomes if v.ok)
        ctx.metrics.inc("rollouts", total)
        ctx.metrics.inc("passed", passed)
        ctx.metrics.inc("tasks_solved", 1 if passed else 0)
        ctx.metrics.inc(f"{_DOMAIN}{row.domain}.tasks")
        ctx.metrics.inc(f"{_DOMAIN}{row.domain}.solved", 1 if passed else 0)
        out: list[Trajectory | Emit] = []
        kept = 0
        for r, (result, verdict, judge) in outcomes:
            if not verdict.ok:
                ctx.metrics.inc(f"rejected.{verdict.layer}")
            traj = episode_row(
                ctx,
                row,
                result,
                verdict,
                method="rejection_sampling",
                key=r,
                generator=ctx.llm(cfg.role).model,
                extra={"rollout": r},
                rollouts_total=total,
                rollouts_passed=passed,
                judge=judge,
            )
            if verdict.ok and (cfg.keep == "all" or kept == 0):
                out.append(traj)
                kept += 1
            elif not verdict.ok:
                out.append(Emit("failed", [traj]))
        return out

    async def _rollout(
        self,
        ctx: Context,
        row: Trajectory,
        gt: Any,
        opening: list[Any],
        r: int,
        first: PolicyStep | None,
        first_error: str | None,
    ) -> tuple[Any, EpisodeVerdict, Any] | None:
        cfg = self.config
        async with self._episode_slots(ctx):
            ep = Episode(gt, make_env(ctx, row, gt), tools=row.tools, prefix=opening,
                         limits=cfg.limits.limits())  # fmt: skip
            policy = LLMPolicy(
                ctx, cfg.role, task=gt, seed=ctx.row_seed(row.id, r), temperature=cfg.temperature
            )
            played = await play_policy(
                ctx, ep, policy, unit="rollouts", first=first, first_error=first_error
            )
            if played is None:  # lost to the endpoint: no outcome
                return None
            if played.failed is not None:
                return played.result, played.failed, None
            try:
                return await self._verdict(ctx, row, gt, r, played.result)
            except InfraError as exc:  # the judge's endpoint failed: no outcome either
                ctx.lost_to_infra(exc, unit="rollouts")
                return None

    async def _verdict(
        self, ctx: Context, row: Trajectory, gt: Any, r: int, result: Any
    ) -> tuple[Any, EpisodeVerdict, Any]:
        """The layers (and the judge) on a rollout the policy played to its end."""
        cfg = self.config
        # 2) the layers
        verdict = verify_episode(result, gt, row.tools, call_match=cfg.call_match)
        judge = None
        if verdict.ok and cfg.judge:
            judge = await judge_episode(
                ctx, cfg.judge_role, result, gt, ctx.row_seed(row.id, r, "judge")
            )
            comps = {**verdict.components, "judge": 1.0 if judge.verdict != "fail" else 0.0}
            if judge.verdict == "fail":
                verdict = EpisodeVerdict(
                    False, "judge", judge.rationale or "the judge said no", comps
                )
            else:
                verdict = EpisodeVerdict(True, None, None, comps)
        return result, verdict, judge

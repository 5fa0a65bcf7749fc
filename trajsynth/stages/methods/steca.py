"""``steca``: STeCa step-level trajectory calibration (Wang, Wang, Leong, Li 2025, "STeCa:
Step-level Trajectory Calibration for LLM Agent Learning", arXiv:2502.14276, ACL Findings;
code ``WangHanLinHenry/STeCa``: ``sampling/alfworld/monte_carlo_sample_alfworld.py``,
``data_collection/data_cali_alfworld.py``, ``data_collection/data_explored_alfworld.py``).

A failed trajectory went wrong somewhere. STeCa finds the step where it deviated from an
expert by Monte Carlo step values, and builds a calibrated trajectory: the expert's prefix,
the deviated step with what it caused, a reflection that notices the mistake, and the
expert's continuation. For the rollouts of a run (both outputs of ``rejection_sampling``),
task by task:

1) the expert: the task's shortest successful rollout (``expert: rollout``), or the task's
   gold calls played through the episode runner (``gold``; ``auto``: a rollout when there is
   one). STeCa's explored steps are the agent acting from an expert prefix; a failed rollout
   *is* the agent acting from the expert prefix up to its first step that differs from the
   expert's — that step, ``t``, is its explored step. Steps before it are the expert's
   actions (identical actions are never flagged); a rollout with no differing step, or
   whose differing step is a premature final answer (the conversation moved on), has
   nothing to calibrate; a step another failed rollout of the task already explored is
   calibrated once;
2) the calibrated trajectory — expert prefix, deviated step, its observation, the expert's
   continuation (the action forced back to the expert's) — is played through the episode
   runner and verified by the layered verifier, the deviated step's own errors excepted. A
   deviation whose effects the expert's continuation cannot undo fails here and is dropped.
   This runs before anything is paid for: the reflection (step 5) only changes the
   reasoning, not what the trajectory does;
3) step values by Monte Carlo: the value of a prefix is the mean outcome of ``n`` (N,
   STeCa's ``sample_num = 5``) rollouts of the ``role`` policy from it to the end, each
   verified like a rejection-sampling rollout. Two prefixes are valued: the one the agent
   acted from (the expert's value at step t−1, ``V(t−1)``) and that prefix plus the agent's
   step t and its observation (``V_agent(t)``). Rollouts branch from an environment snapshot
   of the prefix; sampled messages that are the same (call ids aside) continue as one branch
   whose next step is one request with ``n`` = the branch's rollouts (independent samples,
   as separate requests would be). Other rollouts of the task that took the same steps are
   themselves rollouts from that prefix: with ``reuse_siblings`` they count as samples
   (never the expert or the failed rollout itself, which were selected by their outcome) and
   fresh rollouts make up the rest of N. A prefix that already fails a layer no continuation
   can repair (a format error, an unexpected tool error) has value 0 exactly, without
   rollouts. ``horizon: turn`` ends each rollout with the turn the step is in and judges it
   by that turn (its gold calls made, the gold state of the conversation at that point);
   ``episode`` (STeCa's) plays to the end;
4) deviation (STeCa's rule): step t is *deviated* iff ``V_agent(t) ≤ V(t−1)``, the rollout
   failed, and its action differs from the expert's (exact call equality; for text steps,
   question vs answer) — the last two hold by construction;
5) reflection: the ``reflector`` role reads the history up to the deviated step and its
   observation and writes the thought that notices the mistake and leads to the expert's
   next action (STeCa's GPT-4o prompt); it becomes the reasoning of the first expert step
   after the deviation. No row without one: an empty reflection is
   ``rejected.no_reflection``, a request the endpoint refused ``rejected.reflector_failed``,
   and one lost to the endpoint (retries exhausted, 429s, circuit open) loses the task,
   counted as lost to the endpoint like its rollouts;
6) rows: ``step_rewards`` hold ``V(t−1)`` (on step t−1) and ``V_agent(t)`` (on step t),
   ``step_flags`` ``deviated`` on step t and ``calibrated`` on step t+1. ``extra["steca"]``
   has STeCa's record: ``prompt_len`` (messages through the deviated step's observation),
   ``chosen_len`` (the calibrated continuation), ``rejected`` (the agent's own
   continuation), ``deviation`` (nDTW of the chosen and rejected actions,
   :mod:`trajsynth.quality.ndtw`) and ``reward = 1 + 0.01 · deviation`` (its training
   weight); ``extra["dpo"]`` the same pair for ``trajsynth export --format dpo``, and
   ``trajsynth export --format steca`` writes STeCa's own layout. ``parent_ids``: the failed
   rollout and the expert rollout; ``method``: ``steca``.

Deviations from STeCa: one explored step per failed rollout (its first deviation from the
expert), where STeCa explores every step index of every expert trajectory; action equality
is exact instead of BERT similarity; explored successes (STeCa's RFT data) are not emitted
(the successful rollouts are already rejection sampling's output); the optional ``turn``
horizon for multi-turn conversations.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
from pydantic import Field

from ...core.batch import to_batch, to_records
from ...core.errors import InfraError
from ...core.extras import DpoPair, with_
from ...core.ids import canonical_json
from ...core.schema import Message, Trajectory
from ...core.task import GoldCall, GroundTruth
from ...envs.episode import Episode, EpisodeResult, EpisodeSnapshot, PolicyStep
from ...envs.verifiers.episode import verify_episode
from ...envs.verifiers.final_state import replay
from ...quality.ndtw import action_key, ndtw_deviation, steca_weight
from ..common.policies import LLMPolicy, PolicyError
from ..common.replay import (
    advance_steps,
    gold_messages,
    message_key,
    play_steps,
    step_slices,
)
from ..common.rollouts import RolloutLimits, episode_row, make_env, task_of
from ..context import Context
from ..kinds import GlobalStage, Output, StageConfig
from ..registry import register

__all__ = ["REFLECT_PROMPT", "Steca", "StecaConfig"]


#: STeCa's calibration-thought prompt (``data_cali_alfworld.py``), for tool calls
REFLECT_PROMPT = """{history}

Above is the interaction history. However, the last step is not optimal and may lead to a \
wrong direction. The next step ground truth action is: {action}. Please provide the thought \
which would lead the agent to generate the ground truth action and be aware of the last \
non-optimal action. Answer with the thought only."""


class StecaConfig(StageConfig):
    role: str = Field(
        "teacher",
        description="Policy whose Monte Carlo rollouts value the steps (STeCa: the SFT agent; "
        "the policy that made the rollouts, for reuse_siblings).",
    )
    reflector_role: str = Field("reflector", description="LLM role of the reflection thought.")
    n: int = Field(5, ge=1, le=64, description="Monte Carlo rollouts per prefix (STeCa: 5).")
    temperature: float = Field(0.7, ge=0, description="Sampling temperature of the rollouts.")
    horizon: Literal["episode", "turn"] = Field(
        "episode",
        description="Rollouts play to the end (STeCa) or to the end of the step's turn, "
        "judged by that turn.",
    )
    expert: Literal["auto", "rollout", "gold"] = Field(
        "auto", description="Expert: a successful rollout, the gold calls, or auto."
    )
    reuse_siblings: bool = Field(
        True, description="Count the task's other rollouts through the same steps as samples."
    )
    group_requests: bool = Field(
        True, description="Identical branches share one request with n = their rollouts."
    )
    decide_early: bool = Field(
        False,
        description="Sample the agent step's rollouts in rounds and stop once the deviation "
        "rule is decided (its value is then the mean of the rollouts taken).",
    )
    concurrency: int = Field(16, ge=1, description="Tasks worked on at once.")
    limits: RolloutLimits = Field(default_factory=RolloutLimits, description="Episode limits.")


@dataclass
class _Expert:
    messages: list[Message]
    opening: list[Message]
    steps: list[tuple[int, int]]  # step_slices of messages
    row_id: str | None  # None: the gold


@dataclass
class _Value:
    value: float
    siblings: int
    fresh: int
    exact: bool = False  # known without rollouts (a broken prefix, or one that ended)


@dataclass
class _Root:
    """A prefix played out: where its rollouts start, or why none are needed."""

    snap: EpisodeSnapshot | None
    turn: int
    outcome: bool | None  # known outcome (the prefix is broken, or the episode ended)


@dataclass
class _Task:
    """What the Monte Carlo values of one task need."""

    row: Trajectory  # any rollout of the task (domain, tools, ground truth)
    gt: GroundTruth
    expert: _Expert
    siblings: list[Trajectory]
    fresh: dict[str, list[bool]] = field(default_factory=dict)  # prefix key → outcomes
    roots: dict[str, _Root] = field(default_factory=dict)
    turn_gt: dict[int, GroundTruth] = field(default_factory=dict)
    sibling_turn: dict[tuple[str, int], bool] = field(default_factory=dict)
    locks: dict[str, asyncio.Lock] = field(default_factory=lambda: defaultdict(asyncio.Lock))
    calibrated: set[str] = field(default_factory=set)  # explored prefixes already calibrated


def _steps(messages: Sequence[Message]) -> list[Message]:
    return [m for m in messages if m.role == "assistant"]


def _prefix_key(steps: Sequence[Message]) -> str:
    return canonical_json([list(map(str, action_key(m))) for m in steps])


def _as_calls(message: Message) -> list[dict[str, Any]] | str:
    """A step as the reflector's payload reads it: its calls, or its text."""
    if not message.tool_calls:
        return message.content or ""
    return [
        GoldCall(name=c.name, arguments=c.parsed_arguments() or {}).model_dump(mode="json")
        for c in message.tool_calls
    ]


def _history(messages: Sequence[Message]) -> str:
    lines = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "tool":
            lines.append(f"Observation ({m.name}): {m.content or ''}")
            continue
        text = m.content or ""
        calls = "; ".join(f"{c.name}({c.arguments})" for c in m.tool_calls)
        if m.role == "assistant":
            thought = f"Thought: {m.reasoning}\n" if m.reasoning else ""
            lines.append(f"{thought}Action: {calls or text}")
        else:
            lines.append(f"{m.role.capitalize()}: {text}")
    return "\n\n".join(lines)


@dataclass
class _View:
    """An episode seen without one step (the deviated one), for verification."""

    calls: list[Any]
    format_errors: list[str]
    results: list[Any]
    final_state_hash: str
    messages: list[Message]
    step_info: list[dict[str, Any]]


def _without_step(result: EpisodeResult, t: int) -> _View:
    calls, results, info = [], [], []
    pos = 0
    steps = [m for m in result.messages if m.role == "assistant"]
    for i, (m, si) in enumerate(zip(steps, result.step_info, strict=False)):
        n = len(m.tool_calls)
        if i != t:
            calls += m.tool_calls
            results += result.results[pos : pos + n]
            info.append(si)
        pos += n
    errors = [e for e in result.format_errors if not e.startswith(f"step {t}:")]
    return _View(calls, errors, results, result.final_state_hash, result.messages, info)


def _broken(result: EpisodeResult, gt: GroundTruth) -> bool:
    """The episode already fails a layer no continuation can repair: a format error, or a
    tool error the task does not expect (step 3's exact zero)."""
    if result.format_errors:
        return True
    flat = gt.flat_calls()
    expected = {
        canonical_json([flat[i].name, flat[i].arguments])
        for i in gt.extra.get("expected_errors", [])
        if isinstance(i, int) and i < len(flat)
    }
    return any(
        r.error is not None and canonical_json([r.name, r.arguments]) not in expected
        for r in result.results
    )


@register
class Steca(GlobalStage[StecaConfig]):
    """STeCa: Monte Carlo step values find the deviated step; reflect, calibrate, verify."""

    name = "steca"
    writes = (
        "success",
        "reward",
        "reward_components",
        "step_rewards",
        "step_flags",
        "failure_layer",
        "failure_reason",
    )
    io_bound = True

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        by_task: dict[str, list[Trajectory]] = defaultdict(list)
        for b in batches:
            for r in to_records(b):
                by_task[r.task_id].append(r)
        out = ctx.run(self._run(by_task, ctx))
        if out:
            yield to_batch(out)

    async def _run(self, by_task: dict[str, list[Trajectory]], ctx: Context) -> list[Trajectory]:
        cfg = self.config
        sem = asyncio.Semaphore(cfg.concurrency)

        async def one(task_id: str) -> list[Trajectory]:
            async with sem:
                ctx.metrics.inc("infra.units")
                try:
                    return await self._task(ctx, sorted(by_task[task_id], key=lambda r: r.id))
                except PolicyError as exc:
                    ctx.metrics.inc("rejected.generation")
                    ctx.log.debug("steca %s: %s", task_id, exc)
                    return []
                except InfraError as exc:  # the endpoint's failure: counted, not a rejection
                    ctx.lost_to_infra(exc, unit="tasks")
                    return []

        results = await asyncio.gather(*(one(t) for t in sorted(by_task)))
        return [r for rs in results for r in rs]

    # -- one task --------------------------------------------------------------------------
    async def _task(self, ctx: Context, rows: list[Trajectory]) -> list[Trajectory]:
        cfg = self.config
        ctx.metrics.inc("tasks")
        failed = [r for r in rows if r.success is False and r.messages]
        ctx.metrics.inc("failed_rollouts", len(failed))
        gt = rows[0].ground_truth
        if not failed or gt is None or rows[0].domain not in ctx.envs.domains():
            ctx.metrics.inc("skipped.tasks")
            return []
        # 1) the expert
        expert = await self._expert(ctx, rows, gt)
        if expert is None:
            ctx.metrics.inc("skipped.no_expert")
            return []
        total = max((r.rollouts_total or 0) for r in rows)
        complete = total > 0 and len(rows) >= total
        task = _Task(rows[0], gt, expert, rows if (cfg.reuse_siblings and complete) else [])
        out = []
        for a in failed:
            row = await self._calibrate(ctx, task, a)
            if row is not None:
                out.append(row)
        return out

    async def _expert(
        self, ctx: Context, rows: list[Trajectory], gt: GroundTruth
    ) -> _Expert | None:
        cfg = self.config
        wins = [r for r in rows if r.success and r.messages]
        if cfg.expert != "gold" and wins:
            e = min(wins, key=lambda r: (r.num_turns, r.id))
            first = next(i for i, m in enumerate(e.messages) if m.role == "assistant")
            return _Expert(list(e.messages), e.messages[:first], step_slices(e.messages), e.id)
        if cfg.expert == "rollout":
            return None
        _, opening = task_of(rows[0])
        env = make_env(ctx, rows[0], gt)
        result, _ = await play_steps(
            gt, env, opening, gold_messages(gt), tools=rows[0].tools, limits=cfg.limits.limits()
        )
        if not verify_episode(result, gt, rows[0].tools).ok:
            return None
        return _Expert(result.messages, opening, step_slices(result.messages), None)

    # -- one failed rollout ------------------------------------------------------------------
    async def _calibrate(self, ctx: Context, task: _Task, a: Trajectory) -> Trajectory | None:
        cfg = self.config
        e = task.expert
        e_steps, a_steps = _steps(e.messages), _steps(a.messages)
        # 1) the explored step: the first that differs from the expert's
        t = next(
            (
                k
                for k in range(min(len(e_steps), len(a_steps)))
                if action_key(e_steps[k]) != action_key(a_steps[k])
            ),
            None,
        )
        if t is None:
            ctx.metrics.inc("skipped.no_deviation")
            return None
        a_i, a_end = step_slices(a.messages)[t]
        deviated = a.messages[a_i]
        if not deviated.tool_calls and action_key(deviated)[1] == "answer":
            # a premature answer ends the turn (or the conversation): the expert's
            # continuation no longer follows from it
            ctx.metrics.inc("skipped.answer_deviation")
            return None
        prefix = e_steps[:t]
        explored = _prefix_key([*prefix, deviated])
        if explored in task.calibrated:  # another failed rollout made the same step
            ctx.metrics.inc("skipped.same_deviation")
            return None
        task.calibrated.add(explored)
        # 2) the calibrated trajectory, played and verified
        steps = [*prefix, deviated, *e_steps[t:]]
        env = make_env(ctx, task.row, task.gt)
        result, played = await play_steps(
            task.gt, env, e.opening, steps, tools=task.row.tools, limits=cfg.limits.limits()
        )
        if played < len(steps) or result.end == "running" or played <= t + 1:
            ctx.metrics.inc("rejected.continuation_cut")
            return None
        verdict = verify_episode(_without_step(result, t), task.gt, task.row.tools)
        if not verdict.ok:
            ctx.metrics.inc(f"rejected.{verdict.layer}")
            return None
        # 3) Monte Carlo values of the two prefixes
        exclude = {a.id} | ({e.row_id} if e.row_id else set())
        v_prev = await self._value(ctx, task, prefix, exclude)
        v_agent = await self._value(
            ctx,
            task,
            [*prefix, deviated],
            exclude,
            threshold=v_prev.value if cfg.decide_early else None,
        )
        ctx.metrics.inc("values", 2)
        # 4) STeCa's deviation rule
        if v_agent.value > v_prev.value:
            ctx.metrics.inc("not_deviated")
            return None
        ctx.metrics.inc("deviated")
        # 5) the reflection becomes the reasoning of the first expert step after it
        history = [*e.messages[: e.steps[t][0]], *a.messages[a_i:a_end]]
        thought = await self._reflect(ctx, a, history, deviated, e_steps[t])
        if thought is None:
            return None
        slices = step_slices(result.messages)
        messages = list(result.messages)
        c_i = slices[t + 1][0]
        messages[c_i] = messages[c_i].model_copy(update={"reasoning": thought})
        # 6) the row
        prompt_len = slices[t][1]
        rejected = list(a.messages[a_end:])
        chosen = messages[prompt_len:]
        deviation = ndtw_deviation(_steps(chosen), _steps(rejected))
        n_steps = len(slices)
        rewards: list[float | None] = [None] * n_steps
        flags: list[list[str]] = [[] for _ in range(n_steps)]
        if t >= 1:
            rewards[t - 1] = v_prev.value
        rewards[t] = v_agent.value
        flags[t].append("deviated")
        flags[t + 1].append("calibrated")
        pair = DpoPair(prompt_len=prompt_len, chosen_len=len(chosen), rejected=rejected)
        ctx.metrics.inc("kept")
        parents = [a.id] + ([e.row_id] if e.row_id else [])
        extra: dict[str, Any] = {
            "steca": {
                "t": t,
                "values": {"previous": v_prev.value, "agent": v_agent.value},
                "samples": {
                    name: {"siblings": v.siblings, "fresh": v.fresh, "exact": v.exact}
                    for name, v in (("previous", v_prev), ("agent", v_agent))
                },
                "horizon": cfg.horizon,
                "expert": e.row_id or "gold",
                "deviation": deviation,
                "reward": steca_weight(deviation, "calibration"),
                **pair.to_json(),
            },
        }
        if rejected:
            extra = with_(extra, pair)
        return episode_row(
            ctx,
            a,
            result,
            verdict,
            method="steca",
            key=t,
            generator=ctx.llm(cfg.reflector_role).model,
            extra=extra,
            capabilities=sorted({*a.capabilities, "error_recovery"}),
            messages=messages,
            step_rewards=rewards,
            step_flags=flags,
            format_errors=[],  # the deviated step's, if any: it is context, not a target
            rollouts_total=a.rollouts_total,
            rollouts_passed=a.rollouts_passed,
            parent_ids=parents,
        )

    async def _reflect(
        self,
        ctx: Context,
        a: Trajectory,
        history: list[Message],
        deviated: Message,
        expert: Message,
    ) -> str | None:
        """Step 5: STeCa's reflection prompt (reflector role)."""
        cfg = self.config
        if expert.tool_calls:
            action = "; ".join(f"{c.name}({c.arguments})" for c in expert.tool_calls)
        else:
            action = expert.content or ""
        expert_calls = _as_calls(expert)
        result = await ctx.llm(cfg.reflector_role).chat(
            [
                Message(
                    role="user",
                    content=REFLECT_PROMPT.format(history=_history(history), action=action),
                )
            ],
            None,
            temperature=0.0,
            seed=ctx.row_seed(a.id, "reflect"),
            metadata={
                "role": cfg.reflector_role,
                "expert_action": [] if isinstance(expert_calls, str) else expert_calls,
                "deviated_action": _as_calls(deviated),
                "goal": a.goal,
            },
        )
        result.raise_for_infra()  # the endpoint's failure: the task is lost (step 5)
        if not result.ok:
            ctx.metrics.inc("rejected.reflector_failed")
            return None
        text = (result.choices[0].message.content or "").strip()
        if not text:
            ctx.metrics.inc("rejected.no_reflection")
            return None
        return text

    # -- 3) Monte Carlo values ---------------------------------------------------------------
    def _turn_gt(self, ctx: Context, task: _Task, turn: int) -> GroundTruth:
        """The task cut after ``turn``: its gold calls, and the gold state at that point."""
        if turn >= len(task.gt.turns) - 1:
            return task.gt
        if turn not in task.turn_gt:
            cut = task.gt.turns[: turn + 1]
            env = make_env(ctx, task.row, task.gt)
            env.reset(task.gt)
            replay(env, [c for t in cut for s in t.steps for c in s])
            task.turn_gt[turn] = task.gt.model_copy(
                update={"turns": cut, "final_state_hash": env.state_hash(), "required_outputs": []}
            )
        return task.turn_gt[turn]

    def _outcome(self, ctx: Context, result: EpisodeResult, task: _Task, turn: int) -> bool:
        """A rollout's outcome at the horizon, verified like a rejection-sampling rollout."""
        cfg = self.config
        gt = task.gt if cfg.horizon == "episode" else self._turn_gt(ctx, task, turn)
        return verify_episode(result, gt, task.row.tools).ok

    async def _root(self, ctx: Context, task: _Task, prefix: list[Message]) -> _Root:
        """A prefix played out (no LLM): where rollouts start, or its known outcome."""
        cfg = self.config
        key = _prefix_key(prefix)
        if key not in task.roots:
            ep = Episode(
                task.gt,
                make_env(ctx, task.row, task.gt),
                tools=task.row.tools,
                prefix=task.expert.opening,
                limits=cfg.limits.limits(),
            )
            await advance_steps(ep, prefix)
            res = ep.result()
            if _broken(res, task.gt):
                task.roots[key] = _Root(None, ep.turn, False)
            elif ep.done:
                task.roots[key] = _Root(None, ep.turn, self._outcome(ctx, res, task, ep.turn))
            else:
                task.roots[key] = _Root(ep.snapshot(), ep.turn, None)
        return task.roots[key]

    async def _sibling_outcome(self, ctx: Context, task: _Task, row: Trajectory, turn: int) -> bool:
        """A sibling's outcome at the horizon: its episode's, or its turn's (replayed)."""
        cfg = self.config
        if cfg.horizon == "episode":
            return bool(row.success)
        key = (row.id, turn)
        if key not in task.sibling_turn:
            result, _ = await play_steps(
                task.gt, make_env(ctx, task.row, task.gt), task.expert.opening,
                _steps(row.messages), tools=task.row.tools, limits=cfg.limits.limits(),
                stop_after_turn=turn,
            )  # fmt: skip
            task.sibling_turn[key] = self._outcome(ctx, result, task, turn)
        return task.sibling_turn[key]

    async def _value(
        self,
        ctx: Context,
        task: _Task,
        prefix: list[Message],
        exclude: set[str],
        *,
        threshold: float | None = None,
    ) -> _Value:
        """The Monte Carlo value of ``prefix``: siblings through the same steps, then fresh
        rollouts up to N. With ``threshold`` (``decide_early``), fresh rollouts come in
        rounds, each as large as the fewest that could decide ``value ≤ threshold``."""
        cfg = self.config
        root = await self._root(ctx, task, prefix)
        if root.outcome is not None:
            return _Value(float(root.outcome), 0, 0, exact=True)
        key = _prefix_key(prefix)
        k = len(prefix)
        sib = [
            await self._sibling_outcome(ctx, task, r, root.turn)
            for r in task.siblings
            if r.id not in exclude
            and r.success is not None
            and len(s := _steps(r.messages)) >= k
            and _prefix_key(s[:k]) == key
        ]
        n_total = max(cfg.n, len(sib))
        need = n_total - len(sib)
        taken = need
        async with task.locks[key]:
            have = task.fresh.setdefault(key, [])
            if threshold is None:
                if len(have) < need:
                    have += await self._rollouts(ctx, task, root, key, need - len(have), len(have))
            else:
                limit = threshold * n_total + 1e-9  # deviated iff successes ≤ limit
                taken = 0
                while taken < need:
                    wins = sum(sib) + sum(have[:taken])
                    left = need - taken
                    if (sib or taken) and (wins > limit or wins + left <= limit):
                        break  # decided either way (on one sample at least)
                    # the fewest more failures that would decide "deviated"
                    step = max(1, min(left, left - int(limit - wins)))
                    if len(have) < taken + step:
                        have += await self._rollouts(
                            ctx, task, root, key, taken + step - len(have), len(have)
                        )
                    taken += step
        outcomes = sib + task.fresh[key][:taken]
        return _Value(sum(outcomes) / len(outcomes), len(sib), taken)

    async def _rollouts(
        self, ctx: Context, task: _Task, root: _Root, pkey: str, k: int, first: int
    ) -> list[bool]:
        """``k`` rollouts of the policy from ``root`` (step 3: branches of identical
        messages share one request)."""
        cfg = self.config
        assert root.snap is not None
        outcomes: list[bool] = []
        frontier: list[tuple[EpisodeSnapshot, int, tuple[int, ...]]]
        if cfg.group_requests:
            frontier = [(root.snap, k, (first,))]
        else:
            frontier = [(root.snap, 1, (first + i,)) for i in range(k)]
        while frontier:
            expanded = await asyncio.gather(
                *(self._expand(ctx, task, root, snap, m, path, pkey) for snap, m, path in frontier)
            )
            frontier = []
            for done, more in expanded:
                outcomes += done
                frontier += more
        return outcomes

    async def _expand(
        self,
        ctx: Context,
        task: _Task,
        root: _Root,
        snap: EpisodeSnapshot,
        k: int,
        path: tuple[int, ...],
        pkey: str,
    ) -> tuple[list[bool], list[tuple[EpisodeSnapshot, int, tuple[int, ...]]]]:
        """One request for a branch of ``k`` rollouts; its choices grouped by message."""
        cfg = self.config
        row, gt = task.row, task.gt
        ep = Episode(
            gt,
            make_env(ctx, row, gt),
            tools=row.tools,
            limits=cfg.limits.limits(),
            stop_after_turn=root.turn if cfg.horizon == "turn" else None,
        )
        ep.restore(snap)
        policy = LLMPolicy(
            ctx,
            cfg.role,
            task=gt,
            seed=ctx.row_seed(row.task_id, "mc", pkey, path),
            temperature=cfg.temperature,
        )
        choices = await policy.sample(ep.messages, row.tools, k)
        ctx.metrics.inc("mc_requests")
        groups: dict[str, list[PolicyStep]] = {}
        for c in choices:
            groups.setdefault(message_key(c.message), []).append(c)
        done: list[bool] = []
        more: list[tuple[EpisodeSnapshot, int, tuple[int, ...]]] = []
        for g, same in enumerate(groups.values()):
            ep.restore(snap)
            await ep.advance(same[0])
            if ep.done:
                done += [self._outcome(ctx, ep.result(), task, root.turn)] * len(same)
            else:
                more.append((ep.snapshot(), len(same), (*path, g)))
        return done, more

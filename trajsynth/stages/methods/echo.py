"""``echo``: ECHO hindsight trajectory rewriting, with every rewrite replayed before it is kept
(Hu, Van Durme, Andreas et al. 2025, "Sample-Efficient Online Learning in LM Agents via
Hindsight Trajectory Rewriting", arXiv:2510.10304; code ``michahu/echo``,
``peoplejoin/src/experimentation/offline_compute.py``).

A failed trajectory did not do what the user asked, but its calls may have achieved something
else. ECHO relabels it: that other goal, a request for it, and the shortest trajectory that
reaches it. For the failed trajectories of a run (rejection sampling's ``failed`` output):

1) evidence: the trajectory's calls are replayed one by one in a fresh environment of its
   task; each call that succeeds leaves its evidence — the state changes it made (the
   environment's diff) and the output it returned. Failed calls achieved nothing. A row whose
   recorded results the replay does not reproduce is skipped (its evidence is not trusted);
2) goals, from the evidence only: each successful call that no later successful call builds
   on (a *sink*), together with the calls it builds on (their outputs feed its arguments, or
   it works on records they changed), and all the achieved calls together; at most
   ``max_goals`` per trajectory. A goal's *target* is what its calls reach when replayed
   alone: the final state (for a goal that changes something) and the outputs of its reading
   sinks (for a goal that finds something out). Goals are keyed by their target, so the same
   goal reached by two trajectories is one goal;
3) rewrite (``rewriter`` role, ECHO's PeopleJoin prompt): for a goal, the request a user
   would make, the shortest workflow from the start, the final answer and the workflow's
   calls — or an abstention (empty strings) when the goal or the answer is unclear;
4) replay (trajsynth's addition; ECHO itself does not check): the rewritten calls run in a
   fresh environment, and the rewrite is kept only when every call succeeds, the state
   reached is the goal's target, the outputs the goal observed are observed again, and it
   makes no more calls than the goal's evidence did;
5) memory (ECHO's update rule): goal → rewrite, inserted when new and replaced only by a
   shorter one (fewer calls, then a shorter workflow text: ECHO's ``len(workflow) <``).
   ``ask: every`` asks for a rewrite of every trajectory's goals, as ECHO does;
   ``ask: shortest_first`` (default) asks once per goal, starting from the trajectory with
   the least evidence, and moves to the next only when a rewrite is abstained or rejected
   (at most ``tries``) — the rewrites the memory would discard are never requested. A
   request lost to the endpoint (retries exhausted, 429s, circuit open) is neither: the goal
   is lost, counted (``infra.lost`` of ``infra.units``, the rewrites asked), and no other
   trajectory is asked in its place; a request the endpoint refused is
   ``rejected.request_failed``, an unreadable answer ``rejected.unreadable``;
6) rows: the kept rewrite of each goal is played through the episode runner (tool messages
   as the tools return them now, the rewrite's workflow steps as the reasoning) and
   verified by the layered verifier against its new ground truth (the rewrite's calls with
   their outputs, the target state's hash). ``parent_ids`` is the failed trajectory,
   ``method`` is ``echo``; ``extra["echo"]`` holds the goal, its evidence and the workflow.

Deviations from ECHO: goals come from the environment's state diff and the observed outputs
instead of an LLM's summary and goal list (an LLM could list a goal never reached; here none
is possible), and the rewrite is verified by replay (step 4).
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ...core.ids import canonical_json, stable_hash
from ...core.jsonvalues import json_leaves
from ...core.prompts import conversation_text, system_prompt
from ...core.schema import Message, ToolCall, Trajectory
from ...core.task import GoldCall, GoldTurn, GroundTruth
from ...envs.verifiers.episode import verify_episode
from ...envs.verifiers.schema import check_call
from ..common.replay import calls_message, play_steps
from ..common.rollouts import episode_row
from ..context import Context
from ..kinds import RowsGlobalStage, StageConfig
from ..registry import register

__all__ = ["ECHO_PROMPT", "Echo", "EchoConfig", "GoalMemory"]


#: ECHO's PeopleJoin rewrite prompt ("write a simplified counterfactual workflow and final
#: answer ... If the correct final answer is unclear, do not generate"), for tool calls
ECHO_PROMPT = """Below is a conversation in which an AI assistant used tools but did not \
complete what the user asked. Some of its calls did achieve something; it is listed under \
"Achieved". Write a simplified counterfactual for that achievement: the request a user would \
have made for exactly it, the shortest workflow that achieves it from the start of the \
conversation, the final answer, and the exact calls of that workflow. Use only tools and \
values that appear in the conversation. If the trajectory is already efficient, keep its \
calls. If the goal or the correct final answer is unclear, do not generate: answer with empty \
strings and an empty list. Answer with JSON only: {"query": "...", "workflow": \
"Step 1: ... Step 2: ...", "final_answer": "...", "calls": [{"name": "...", "arguments": \
{...}}]}."""

_STEP = re.compile(r"\bStep\s*\d+\s*[:.)-]\s*", re.I)


class EchoConfig(StageConfig):
    role: str = Field("rewriter", description="LLM role that writes the rewrites.")
    temperature: float = Field(0.7, ge=0, description="Sampling temperature (ECHO: 0.7).")
    max_goals: int = Field(4, ge=1, le=32, description="Goals taken per failed trajectory.")
    ask: Literal["shortest_first", "every"] = Field(
        "shortest_first",
        description="every: rewrite every trajectory's goals (ECHO); shortest_first: one "
        "rewrite per goal, from the least evidence first, next only on abstention/rejection.",
    )
    tries: int = Field(2, ge=1, le=16, description="shortest_first: rewrites asked per goal.")
    concurrency: int = Field(64, ge=1, description="Rewrite requests in flight.")
    max_transcript_chars: int = Field(
        8000, ge=500, description="Longest transcript of the failed trajectory in the prompt."
    )


# --------------------------------------------------------------------------------------
# 1-2) evidence and goals
# --------------------------------------------------------------------------------------


@dataclass
class _Effect:
    """One replayed call of the failed trajectory."""

    index: int
    call: ToolCall
    ok: bool
    output: Any
    changes: list[str]  # describe() of the state changes it made
    touched: set[str]  # record keys it changed


@dataclass
class _Goal:
    row: Trajectory
    gt: GroundTruth
    order: int  # position among the row's goals
    calls: list[_Effect]
    key: str
    kind: str  # "state" | "info"
    target_hash: str
    changes: list[str]
    observed: list[Any]  # outputs of its reading sinks
    evidence: list[Message]  # the sub-trajectory shown to the rewriter's simulator


@dataclass
class _Rewrite:
    goal: _Goal
    query: str
    workflow: str
    final_answer: str
    calls: list[GoldCall]
    attempt: int

    @property
    def length(self) -> tuple[int, int]:
        return len(self.calls), len(self.workflow)


class GoalMemory:
    """ECHO's update rule (step 5): goal → rewrite; insert if new, replace only if shorter.

    >>> m = GoalMemory()
    >>> m.offer("g", "short", (1, 10)), m.offer("g", "longer", (2, 30)), m.get("g")
    (True, False, 'short')
    """

    def __init__(self) -> None:
        self._items: dict[str, tuple[Any, tuple[int, int]]] = {}
        self.replaced = 0

    def offer(self, key: str, value: Any, length: tuple[int, int]) -> bool:
        old = self._items.get(key)
        if old is None:
            self._items[key] = (value, length)
            return True
        if length < old[1]:
            self._items[key] = (value, length)
            self.replaced += 1
            return True
        return False

    def get(self, key: str) -> Any:
        item = self._items.get(key)
        return None if item is None else item[0]

    def items(self) -> list[tuple[str, Any]]:
        return [(k, v) for k, (v, _) in self._items.items()]


def _leaves(value: Any, out: set[str]) -> set[str]:
    """Scalar values of a JSON value that can identify something (strings of 2+ characters,
    numbers other than 0-9), as canonical JSON."""
    for v in json_leaves(value):
        if isinstance(v, str):
            if len(v.strip()) >= 2:
                out.add(canonical_json(v.strip()))
        elif (
            isinstance(v, (int, float))
            and not isinstance(v, bool)
            and not (isinstance(v, int) and 0 <= v <= 9)
        ):
            out.add(canonical_json(v))
    return out


def _answered(row: Trajectory) -> list[tuple[ToolCall, Message | None]]:
    """Each call, in order, with the tool message answering it: one of the tool messages
    that follow its assistant message, matched by id there (ids may repeat across steps),
    else by position."""
    out: list[tuple[ToolCall, Message | None]] = []
    msgs = row.messages
    for i, m in enumerate(msgs):
        if m.role != "assistant" or not m.tool_calls:
            continue
        answers = []
        for t in msgs[i + 1 :]:
            if t.role != "tool":
                break
            answers.append(t)
        by_id = {t.tool_call_id: t for t in answers}
        for j, c in enumerate(m.tool_calls):
            out.append((c, by_id.get(c.id) or (answers[j] if j < len(answers) else None)))
    return out


def _same(recorded: str, content: str) -> bool:
    if recorded.strip() == content.strip() or recorded.rstrip().endswith("more characters]"):
        return True
    try:
        return json.loads(recorded) == json.loads(content)
    except ValueError:
        return False


def evidence(ctx: Context, row: Trajectory, gt: GroundTruth) -> list[_Effect] | None:
    """Step 1: every call of ``row`` replayed with its state changes (None: the replay does
    not reproduce the recorded results)."""
    env = ctx.envs.make(row.domain, seed=gt.env_seed, initial_state=gt.initial_state)
    env.reset(gt)
    out: list[_Effect] = []
    for i, (call, answer) in enumerate(_answered(row)):
        before = env.snapshot()
        result = env.execute(call)
        seen = answer.content if answer is not None else None
        if seen is not None and not _same(seen, result.content(env.max_observation_chars)):
            return None
        diff = env.diff(before)
        out.append(
            _Effect(
                i,
                call,
                result.ok,
                result.output,
                diff.describe(),
                {f"{c.table}/{c.key}" for c in diff} | {c.key for c in diff},
            )
        )
    return out


def _depends(later: _Effect, earlier: _Effect, stated: set[str]) -> bool:
    """``later`` builds on ``earlier``: an argument value it passes came from ``earlier``'s
    output (and not from the user), or it works on a record ``earlier`` changed."""
    args = later.call.parsed_arguments() or {}
    values = _leaves(args, set())
    if (values - stated) & _leaves(earlier.output, set()):
        return True
    if earlier.touched:
        raw = {json.loads(v) for v in values if v.startswith('"')}
        if raw & earlier.touched:
            return True
    return bool(later.touched & earlier.touched)


def goals_of(
    ctx: Context, row: Trajectory, gt: GroundTruth, effects: list[_Effect], max_goals: int
) -> list[_Goal]:
    """Step 2: the achieved goals of one failed trajectory, with their targets."""
    ok = [e for e in effects if e.ok]
    if not ok:
        return []
    stated: set[str] = set()
    for m in row.messages:
        if m.role == "user" and m.content:
            stated |= {canonical_json(w) for w in re.findall(r"[^\s,;:]+", m.content)}
            stated |= {canonical_json(m.content.strip())}
    deps: dict[int, set[int]] = {e.index: set() for e in ok}
    for j, later in enumerate(ok):
        for earlier in ok[:j]:
            if _depends(later, earlier, stated):
                deps[later.index].add(earlier.index)
    used = {i for d in deps.values() for i in d}
    sinks = [e for e in ok if e.index not in used]

    def closure(i: int) -> set[int]:
        out, todo = {i}, [i]
        while todo:
            for d in deps[todo.pop()]:
                if d not in out:
                    out.add(d)
                    todo.append(d)
        return out

    sets: list[tuple[list[int], list[int]]] = []  # (call indices, reading sinks)
    if len(sinks) > 1:
        sets.append(([e.index for e in ok], [e.index for e in sinks if not e.changes]))
    for s in reversed(sinks):
        sets.append((sorted(closure(s.index)), [] if s.changes else [s.index]))
    by_index = {e.index: e for e in ok}
    goals: list[_Goal] = []
    seen: set[str] = set()
    for calls, readers in sets:
        if len(goals) >= max_goals:
            break
        goal = _target(ctx, row, gt, [by_index[i] for i in calls], readers, len(goals))
        if goal is not None and goal.key not in seen:
            seen.add(goal.key)
            goals.append(goal)
    return goals


def _target(
    ctx: Context,
    row: Trajectory,
    gt: GroundTruth,
    calls: list[_Effect],
    readers: list[int],
    order: int,
) -> _Goal | None:
    """Replay a goal's calls alone: they must succeed as they did; the state they reach and
    the outputs of its reading sinks are the goal's target."""
    env = ctx.envs.make(row.domain, seed=gt.env_seed, initial_state=gt.initial_state)
    env.reset(gt)
    start = env.snapshot()
    for e in calls:
        r = env.execute(e.call)
        if not r.ok or canonical_json(r.output) != canonical_json(e.output):
            return None
    changes = env.diff(start).describe()
    target = env.state_hash()
    observed = [e.output for e in calls if e.index in readers]
    if not changes and not observed:
        return None
    key = stable_hash(
        [row.domain, gt.env_seed, gt.initial_state, target, sorted(map(canonical_json, observed))]
    )
    # the sub-trajectory the goal's evidence lives in (what the simulator reads)
    answered = _answered(row)
    sub: list[Message] = [m for m in row.messages if m.role in ("system", "user")][:2]
    for e in calls:
        call, answer = answered[e.index]
        sub.append(Message(role="assistant", tool_calls=[call]))
        if answer is not None:
            sub.append(answer)
    return _Goal(
        row, gt, order, calls, key, "state" if changes else "info", target, changes,
        observed, sub,
    )  # fmt: skip


# --------------------------------------------------------------------------------------
# 3) rewrite
# --------------------------------------------------------------------------------------


def _achieved_text(goal: _Goal) -> str:
    lines = [
        f"- calls that achieved it: {[f'{e.call.name}({e.call.arguments})' for e in goal.calls]}"
    ]
    lines += [f"- state change: {c}" for c in goal.changes[:20]]
    lines += [f"- found out: {json.dumps(o, ensure_ascii=False)[:400]}" for o in goal.observed[:5]]
    return "\n".join(lines)


def _parse(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        import json_repair

        value = json_repair.loads(text)
    except Exception:  # json-repair gives up only on hopeless text
        return None
    return value if isinstance(value, dict) else None


def _calls(value: Any) -> list[GoldCall] | None:
    if not isinstance(value, list):
        return None
    out = []
    for c in value:
        if not isinstance(c, dict):
            return None
        fn = c["function"] if isinstance(c.get("function"), dict) else c
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                return None
        if not isinstance(args, dict) or not isinstance(fn.get("name"), str):
            return None
        out.append(GoldCall(name=fn["name"], arguments=args))
    return out


# --------------------------------------------------------------------------------------
# the stage
# --------------------------------------------------------------------------------------


#: what :meth:`Echo._attempt` returns for a request lost to the endpoint
_LOST = object()


@register
class Echo(RowsGlobalStage[EchoConfig]):
    """ECHO hindsight relabelling of failed trajectories; each rewrite replayed to its goal."""

    name = "echo"
    writes = ("success", "reward", "reward_components", "failure_layer", "failure_reason")

    async def aprocess_rows(self, rows: list[Trajectory], ctx: Context) -> list[Trajectory]:
        cfg = self.config
        # 1-2) evidence and goals
        candidates: dict[str, list[_Goal]] = {}
        for row in rows:
            ctx.metrics.inc("rows")
            gt = row.ground_truth
            if gt is None or row.domain not in ctx.envs.domains():
                ctx.metrics.inc("skipped.no_environment")
                continue
            if row.success:
                ctx.metrics.inc("skipped.succeeded")
                continue
            effects = evidence(ctx, row, gt)
            if effects is None:
                ctx.metrics.inc("skipped.unreproducible")
                continue
            goals = goals_of(ctx, row, gt, effects, cfg.max_goals)
            if not goals:
                ctx.metrics.inc("skipped.nothing_achieved")
                continue
            ctx.metrics.inc("goals", len(goals))
            for g in goals:
                candidates.setdefault(g.key, []).append(g)
        ctx.metrics.inc("goal_keys", len(candidates))
        # 3-4) rewrites, replayed
        sem = asyncio.Semaphore(cfg.concurrency)
        memory = GoalMemory()

        async def one_goal(key: str, goals: list[_Goal]) -> list[_Rewrite]:
            goals = sorted(goals, key=lambda g: (len(g.calls), g.row.id, g.order))
            if cfg.ask == "every":
                got = await asyncio.gather(*(self._attempt(ctx, g, 0, sem) for g in goals))
                return [r for r in got if isinstance(r, _Rewrite)]
            for attempt, g in enumerate(goals[: cfg.tries]):
                r = await self._attempt(ctx, g, attempt, sem)
                if r is _LOST:  # the endpoint's failure: not a reason to ask another one
                    return []
                if isinstance(r, _Rewrite):  # else None: ask the next goal
                    return [r]
            return []

        keys = sorted(candidates)
        results = await asyncio.gather(*(one_goal(k, candidates[k]) for k in keys))
        # 5) memory: in a fixed order (row id, goal order), so reruns keep the same rewrite
        kept = sorted(
            (r for rs in results for r in rs), key=lambda r: (r.goal.row.id, r.goal.order)
        )
        for r in kept:
            memory.offer(r.goal.key, r, r.length)
        ctx.metrics.inc("replaced", memory.replaced)
        # 6) rows
        out: list[Trajectory] = []
        for _key, rewrite in sorted(memory.items(), key=lambda kv: kv[0]):
            made = await self._row(ctx, rewrite)
            if made is not None:
                out.append(made)
        ctx.metrics.inc("kept", len(out))
        return out

    async def _attempt(
        self, ctx: Context, goal: _Goal, attempt: int, sem: asyncio.Semaphore
    ) -> _Rewrite | object | None:
        """Steps 3-4 for one goal: ask, parse, replay; :data:`_LOST` when the request was lost
        to the endpoint."""
        cfg = self.config
        row = goal.row
        prompt = (
            f"Conversation:\n{conversation_text(row, cfg.max_transcript_chars)}\n\n"
            f"Achieved:\n{_achieved_text(goal)}"
        )
        async with sem:
            ctx.metrics.inc("rewrite_requests")
            ctx.metrics.inc("infra.units")
            result = await ctx.llm(cfg.role).chat(
                [Message(role="system", content=ECHO_PROMPT), Message(role="user", content=prompt)],
                row.tools or None,
                temperature=cfg.temperature,
                seed=ctx.row_seed(row.id, goal.key, "rewrite"),
                metadata={
                    "role": cfg.role,
                    "mode": "rewrite",
                    "attempt": attempt,
                    "trajectory": [m.model_dump(mode="json") for m in goal.evidence],
                    "tools": row.tools,
                },
            )
        if not result.ok:
            if result.infra:  # the endpoint's failure: counted, not a rejection
                ctx.lost_to_infra(RuntimeError(result.error), unit="rewrites")
                return _LOST
            ctx.metrics.inc("rejected.request_failed")
            return None
        data = _parse(result.choices[0].message.content)
        if data is None:
            ctx.metrics.inc("rejected.unreadable")
            return None
        query = str(data.get("query") or "").strip()
        workflow = str(data.get("workflow") or "").strip()
        final = str(data.get("final_answer") or "").strip().rstrip("?").strip()
        calls = _calls(data.get("calls"))
        if not (query and workflow and final) or not calls:
            ctx.metrics.inc("abstained")  # ECHO stores a rewrite only when all are given
            return None
        why = self._replay_check(ctx, goal, calls)
        if why is not None:
            ctx.metrics.inc(f"rejected.{why}")
            return None
        return _Rewrite(goal, query, workflow, final, calls, attempt)

    @staticmethod
    def _replay_check(ctx: Context, goal: _Goal, calls: list[GoldCall]) -> str | None:
        """Step 4: None when the rewritten calls reach the goal's target, else the reason."""
        row, gt = goal.row, goal.gt
        if len(calls) > len(goal.calls):
            return "longer_than_evidence"
        for c in calls:
            if check_call((c.name, c.arguments), row.tools or []):
                return "invalid_call"
        env = ctx.envs.make(row.domain, seed=gt.env_seed, initial_state=gt.initial_state)
        env.reset(gt)
        outputs = []
        for c in calls:
            r = env.call(c.name, c.arguments)
            if not r.ok:
                return "call_failed"
            c.output = r.output
            outputs.append(canonical_json(r.output))
        if env.state_hash() != goal.target_hash:
            return "wrong_target"
        if any(canonical_json(o) not in outputs for o in goal.observed):
            return "not_observed"
        return None

    async def _row(self, ctx: Context, rw: _Rewrite) -> Trajectory | None:
        """Step 6: the rewrite as a played, verified trajectory."""
        cfg = self.config
        goal, row = rw.goal, rw.goal.row
        generator = ctx.llm(cfg.role).model
        gt = GroundTruth(
            turns=[
                GoldTurn(request=rw.query, steps=[[c] for c in rw.calls], answer=rw.final_answer)
            ],
            env_seed=goal.gt.env_seed,
            initial_state=goal.gt.initial_state,
            final_state_hash=goal.target_hash,
            extra={"echo_goal": goal.key},
        )
        system = (
            next((m.content for m in row.messages if m.role == "system" and m.content), None)
            or system_prompt()
        )
        opening = [Message(role="system", content=system), Message(role="user", content=rw.query)]
        parts = [p.strip() for p in _STEP.split(rw.workflow) if p.strip()]
        thoughts = parts if len(parts) == len(rw.calls) else [rw.workflow] + [None] * len(rw.calls)
        steps = [
            calls_message([c], reasoning=thoughts[i], key=[goal.key, i])
            for i, c in enumerate(rw.calls)
        ]
        steps.append(Message(role="assistant", content=rw.final_answer))
        env = ctx.envs.make(row.domain, seed=gt.env_seed, initial_state=gt.initial_state)
        result, _ = await play_steps(gt, env, opening, steps, tools=row.tools)
        verdict = verify_episode(result, gt, row.tools, call_match="exact")
        if not verdict.ok:
            ctx.metrics.inc(f"rejected.verify_{verdict.layer}")
            return None
        outputs = [_leaves(c.output, set()) for c in rw.calls]
        dependent = any(
            _leaves(c.arguments, set()) & set().union(*outputs[:i])
            for i, c in enumerate(rw.calls)
            if i
        )
        caps = ["single_call" if len(rw.calls) == 1 else "multi_call"]
        if dependent:
            caps.append("dependent_calls")
        return episode_row(
            ctx,
            row,
            result,
            verdict,
            method="echo",
            key=goal.key,
            generator=generator,
            task_id=f"echo-{goal.key[:16]}",
            goal=rw.query,
            capabilities=caps,
            ground_truth=gt,
            difficulty=None,  # a new task: the parent's difficulty is not its own
            extra={
                "echo": {
                    "goal": goal.key,
                    "kind": goal.kind,
                    "changes": goal.changes,
                    "observed": goal.observed,
                    "workflow": rw.workflow,
                    "evidence_calls": [e.index for e in goal.calls],
                    "original_calls": len(row.calls()),
                    "rewrite_calls": len(rw.calls),
                    "attempt": rw.attempt,
                },
            },
        )

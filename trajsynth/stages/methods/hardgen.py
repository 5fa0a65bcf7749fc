"""``hardgen``: hard samples aimed at the tools models fail on (Hao et al. 2026, "From Failure
to Mastery: Generating Hard Samples for Tool-use Agents", arXiv:2601.01498; no public code).

From probe tasks (rows with ground truth, e.g. ``magnet_tasks``), one run makes hard,
verified trajectories:

1) failure-driven self-evaluation: every probe policy (``probe_roles``, at least two: e.g.
   the student being trained and the teacher) plays each task ``probe_rollouts`` times; a
   gold call counts as failed for its tool when no call of the rollout matches it (BFCL
   semantics) with a result that is not an error. A tool is a *failure API* when every probe
   fails it at a rate of at least ``min_failure_rate`` over at least ``min_attempts`` calls
   (HardGen: "both produce wrong execution results"). With ``checkpoint_role``, that probe
   is the checkpoint of the stage named in ``needs:`` (in a LoopTool round: the student
   just trained), played by the ``local`` backend;
2) the dynamic API graph: the function-signature graph of each domain's tools
   (:func:`~trajsynth.graph.build_graph`: typed data-flow edges, prerequisite edges for
   required ids; parameter types from the schemas), refined by execution feedback — a feed
   whose traces failed ``prune_after`` times and never worked is removed;
3) legality-constrained sampling biased toward failure tools: a target failure API is drawn
   in proportion to its failure rate, and a trace is built toward it, along a shortest
   route from a tool up to ``max_hops`` away (greedy by graph distance) or straight to it.
   Each tool is placed only after calls that produce its prerequisites: a prerequisite no
   earlier call produces gets a producer first, drawn among those standing on fewer
   prerequisite layers (so the construction always ends), and every prerequisite is bound
   to an earlier call. The trace must also be legal in Magnet's sense, with
   ``min_calls``–``max_calls`` calls (HardGen: 1–8). It is then executed, values grounded in
   the environment (:mod:`.grounding`): the gold trace, with every output, is the oracle;
4) advanced-tool abstraction: the trace is wrapped into one composite tool,
   ``<target>_adv``, whose parameters are the values the user must give (the ones no
   earlier call produces) — ``get_zipcode(A) → get_zipcode(B) → buy_tickets`` ⇒
   ``buy_tickets_adv(cityA, cityB)``;
5) hard query: the ``query_writer`` role writes the request at the advanced-tool level — it
   must carry every user value and name no function, so the intermediate calls stay
   implicit (a refused request: ``dropped.query_request_failed``; no usable phrasing:
   ``dropped.no_valid_query``);
6) verifiable reasoning: the ``reasoner`` role solves the task with the domain's tools; the
   attempt is checked against the gold trace by the layered verifier (format, execution,
   final state, calls). On a mismatch the ``verifier`` role compares the attempt with the
   gold trace and writes a corrective hint; any gold argument value in the hint is redacted
   before the next attempt sees it (hints never reveal the answer). A refused request
   (``hints.request_failed``) gives a generic hint, an answer that is not the asked JSON
   (``hints.unparsed``) its text. At most ``max_attempts`` (K_max = 3) attempts; a task
   still failing is discarded;
7) rows: the successful attempt, recorded without the hints (the request as the user wrote
   it), with the hard task's ground truth (``extra``: the advanced tool, the target, the
   trace), ``method`` ``hardgen``, ``parent_ids`` the probe tasks whose failures marked the
   target, and ``extra["hardgen"]`` (attempts, the hints given, the failure rates).

Endpoint failures are not the model's: a probe, a query, a reasoner's attempt or a hint whose
request failed for good because of the endpoint (retries exhausted, 429s, circuit open) loses
what it was for — the probe's evidence, the hard task — counted as lost to the endpoint
(``infra.lost`` of ``infra.units``), never replaced by a fallback (no generic hint, no
phrasing counted as unusable).

Deviations: HardGen's Tool Maker (turning real APIs into executable tools) is not needed —
the domains' tools execute; values are grounded in the environment instead of written by
an LLM; the hint check is trajsynth's (HardGen states the rule, not how it is enforced).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
from pydantic import Field, field_validator, model_validator

from ...core.errors import ConfigError, InfraError
from ...core.ids import stable_id
from ...core.prompts import system_prompt
from ...core.schema import Message, Trajectory
from ...core.task import GoldCall, GoldTurn, GroundTruth
from ...envs.domains import domain_policy
from ...envs.episode import Episode, PolicyStep
from ...envs.verifiers.call_match import match_call
from ...envs.verifiers.episode import verify_episode
from ...graph import GraphConfig, OperationError, SignatureGraph, build_graph
from ...graph.ops import Binding, PathCall, problems
from ..common.grounding import FeedFeedback, PlanFailed, PlannedCall, ValuePool, execute_plan
from ..common.policies import LLMPolicy, PolicyError, sim_task
from ..common.queries import first_usable_query
from ..common.rollouts import RolloutLimits, make_env, passed_columns, play_policy, task_of
from ..context import Context
from ..kinds import RowsGlobalStage, StageConfig
from ..registry import register

__all__ = [
    "QUERY_PROMPT",
    "VERIFIER_PROMPT",
    "FailureStats",
    "HardGen",
    "HardGenConfig",
    "gold_values",
    "legal_trace",
    "prerequisite_levels",
    "redact_hint",
    "sample_trace",
]


QUERY_PROMPT = """You write what a user types to an AI assistant. The user wants what the \
tool below does, in one request, stating every value listed under "the user states" in \
natural words. Never name a function or mention intermediate steps; the assistant must work \
them out. Answer with JSON only: {{"queries": ["...", ...]}} ({n} different phrasings)."""

VERIFIER_PROMPT = """You check an AI assistant's attempt at a task against the reference \
solution. If the attempt's calls do what the reference does, answer {"correct": true, \
"hint": ""}. Otherwise give one corrective hint that says what kind of mistake it is and \
where (which call, which argument, a missing or extra step), WITHOUT revealing any value \
from the reference: {"correct": false, "hint": "..."}. Answer with JSON only."""

GENERIC_HINT = "Recheck the calls against every detail of the request."


class HardGenConfig(StageConfig):
    probe_roles: list[str] = Field(
        default_factory=lambda: ["student", "teacher"],
        description="Probe policies (at least two), e.g. the current student and the teacher.",
    )
    checkpoint_role: str | None = Field(
        None,
        description="A probe role played by the checkpoint of the stage named in `needs:` "
        "(e.g. the student a LoopTool round just trained) instead of its `llm:` settings.",
    )
    checkpoint_max_tokens: int = Field(
        128, ge=1, description="checkpoint_role: tokens generated per turn at most."
    )
    probe_rollouts: int = Field(1, ge=1, le=16, description="Rollouts per task per probe.")
    min_failure_rate: float = Field(
        0.5, ge=0, le=1, description="A failure API: every probe fails it at least this often."
    )
    min_attempts: int = Field(1, ge=1, description="Gold calls of a tool needed to rate it.")
    tasks: int = Field(20, ge=1, description="Hard tasks to make (kept or discarded).")
    max_candidates: int | None = Field(
        None, ge=1, description="Traces sampled at most (default 8 × tasks)."
    )
    min_calls: int = Field(2, ge=1, le=8, description="Calls per trace at least.")
    max_calls: int = Field(8, ge=1, le=16, description="Calls per trace at most (HardGen: 8).")
    max_hops: int = Field(3, ge=1, le=8, description="Route length toward a target, at most.")
    graph: GraphConfig = Field(
        default_factory=lambda: GraphConfig(similarity="lexical"), description="Graph building."
    )
    prune_after: int = Field(3, ge=1, description="Failed executions before a feed is removed.")
    attempts_per_call: int = Field(8, ge=1, description="Value draws per call when executing.")
    env_seeds: list[int] = Field(default_factory=lambda: [0], description="Environment seeds.")
    query_role: str = Field("query_writer", description="LLM role of the hard query.")
    n_queries: int = Field(3, ge=1, le=10, description="Phrasings asked per query.")
    reasoner_role: str = Field("teacher", description="LLM role that solves the hard tasks.")
    verifier_role: str = Field("verifier", description="LLM role of the corrective hints.")
    max_attempts: int = Field(3, ge=1, le=10, description="K_max: attempts per hard task.")
    temperature: float = Field(0.7, ge=0, description="Sampling temperature of the policies.")
    concurrency: int = Field(32, ge=1, description="Episodes in flight.")
    limits: RolloutLimits = Field(default_factory=RolloutLimits, description="Episode limits.")

    @field_validator("probe_roles")
    @classmethod
    def _two_probes(cls, v: list[str]) -> list[str]:
        if len(set(v)) < 2:
            raise ValueError("HardGen needs at least two different probe roles")
        return v

    @model_validator(mode="after")
    def _checkpoint_probes(self) -> HardGenConfig:
        if self.checkpoint_role is not None and self.checkpoint_role not in self.probe_roles:
            raise ValueError(
                f"checkpoint_role {self.checkpoint_role!r} is not one of probe_roles "
                f"{self.probe_roles}"
            )
        return self


# --------------------------------------------------------------------------------------
# 1) failure statistics
# --------------------------------------------------------------------------------------


@dataclass
class FailureStats:
    """Per probe and (domain, tool): gold calls seen and gold calls failed."""

    attempts: dict[str, dict[tuple[str, str], int]] = field(default_factory=dict)
    failures: dict[str, dict[tuple[str, str], int]] = field(default_factory=dict)
    evidence: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))

    def add(self, probe: str, domain: str, tool: str, failed: bool, row_id: str) -> None:
        key = (domain, tool)
        a = self.attempts.setdefault(probe, {})
        f = self.failures.setdefault(probe, {})
        a[key] = a.get(key, 0) + 1
        f[key] = f.get(key, 0) + int(failed)
        if failed:
            self.evidence[key].add(row_id)

    def rate(self, probe: str, key: tuple[str, str]) -> float:
        n = self.attempts.get(probe, {}).get(key, 0)
        return self.failures.get(probe, {}).get(key, 0) / n if n else 0.0

    def failure_apis(self, min_rate: float, min_attempts: int) -> dict[tuple[str, str], float]:
        """Tools every probe fails at ``min_rate`` or more: (domain, tool) → mean rate."""
        probes = list(self.attempts)
        keys = set().union(*(self.attempts[p] for p in probes)) if probes else set()
        out = {}
        for key in sorted(keys):
            if all(
                self.attempts[p].get(key, 0) >= min_attempts and self.rate(p, key) >= min_rate
                for p in probes
            ):
                out[key] = sum(self.rate(p, key) for p in probes) / len(probes)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            p: {f"{d}.{t}": [self.failures[p].get((d, t), 0), n] for (d, t), n in a.items()}
            for p, a in self.attempts.items()
        }


def call_failures(result: Any, gt: GroundTruth, tools: list[dict[str, Any]]) -> list[bool]:
    """Per gold call of the task: True when no call of the episode matches it (BFCL
    semantics) with a result that is not an error."""
    specs = {t.get("function", t)["name"]: t.get("function", t) for t in tools}
    ok_calls = [c for c, r in zip(result.calls, result.results, strict=False) if r.error is None]
    used: set[int] = set()
    out = []
    for g in gt.flat_calls():
        spec = specs.get(g.name)
        hit = next(
            (
                i
                for i, c in enumerate(ok_calls)
                if i not in used and match_call(c, g, spec.get("parameters") if spec else None)
            ),
            None,
        )
        if hit is not None:
            used.add(hit)
        out.append(hit is None)
    return out


# --------------------------------------------------------------------------------------
# 3) legality-constrained sampling
# --------------------------------------------------------------------------------------


def legal_trace(graph: SignatureGraph, trace: Sequence[PathCall]) -> list[str]:
    """What makes ``trace`` illegal for HardGen: Magnet's legality rules, plus "a tool is
    sampled only after its prerequisites": every prerequisite of every call is bound to an
    earlier call. Empty when legal."""
    out = problems(graph, list(trace))
    for c in trace:
        bound = c.bound()
        for param in graph.prerequisites(c.tool):
            if param not in bound:
                out.append(f"{c.tool} runs before anything produces its {param}")
    return out


def prerequisite_levels(graph: SignatureGraph) -> dict[str, int]:
    """How many prerequisite layers each tool stands on: 0 for a tool with none; a tool
    whose every prerequisite has a producer of a lower level is one above the highest
    of the lowest producers. Tools caught in prerequisite cycles with no way in get none
    (they can never be sampled legally)."""
    levels = {f: 0 for f in graph.functions if not graph.prerequisites(f)}
    changed = True
    while changed:
        changed = False
        for f in graph.functions:
            if f in levels:
                continue
            pre = graph.prerequisites(f).values()
            if all(any(p in levels for p in producers) for producers in pre):
                levels[f] = 1 + max(min(levels[p] for p in ps if p in levels) for ps in pre)
                changed = True
    return levels


def _feed(graph: SignatureGraph, source: str, tool: str, param: str | None) -> Any:
    feeds = [
        f
        for f in graph.feeds(source, tool)
        if not f.nullable and (param is None or f.param == param)
    ]
    feeds.sort(key=lambda f: (not (f.required and f.id_like), not f.required, -f.score, f.param))
    return feeds[0] if feeds else None


def _place(
    graph: SignatureGraph,
    levels: dict[str, int],
    trace: list[PathCall],
    tool: str,
    rng: random.Random,
    *,
    via: PathCall | None = None,
    depth: int = 0,
) -> PathCall:
    """Append ``tool`` to ``trace``, after producers of each prerequisite that no earlier
    call produces (each drawn among the producers of a lower level, placed recursively);
    every prerequisite is bound to the latest earlier call producing it, and the call
    takes a value from ``via`` (the previous tool of a route)."""
    if depth > 8:
        raise OperationError(f"prerequisites of {tool} nest too deep")
    pre = graph.prerequisites(tool)
    for param, producers in sorted(pre.items()):
        if any(_feed(graph, c.tool, tool, param) for c in trace):
            continue
        lower = sorted(
            p for p in producers if p in levels and levels[p] < levels.get(tool, 1 << 30)
        )
        if not lower:
            raise OperationError(f"nothing can produce {param} for {tool} first")
        _place(graph, levels, trace, rng.choice(lower), rng, depth=depth + 1)
    bound: dict[str, Binding] = {}
    if via is not None:
        f = _feed(graph, via.tool, tool, None)
        if f is None:
            raise OperationError(f"{via.tool} does not feed {tool}")
        bound[f.param] = Binding(f.param, via.uid, f.field)
    for param in sorted(pre):
        if param in bound:
            continue
        for c in reversed(trace):
            f = _feed(graph, c.tool, tool, param)
            if f is not None:
                bound[param] = Binding(param, c.uid, f.field)
                break
    call = PathCall(
        max((c.uid for c in trace), default=-1) + 1,
        tool,
        tuple(sorted(bound.values(), key=lambda b: b.param)),
    )
    trace.append(call)
    return call


def sample_trace(
    graph: SignatureGraph,
    targets: dict[str, float],
    rng: random.Random,
    *,
    min_calls: int = 2,
    max_calls: int = 8,
    max_hops: int = 3,
    levels: dict[str, int] | None = None,
) -> tuple[str, list[PathCall]] | None:
    """Step 3: a target drawn in proportion to its failure rate, and a trace toward it —
    along a shortest route from a tool up to ``max_hops`` away (greedy by graph distance),
    or straight to it — where every tool is placed after producers of its prerequisites
    (:func:`_place`). Kept only when :func:`legal_trace` finds nothing and its length is
    within bounds; None otherwise."""
    levels = levels if levels is not None else prerequisite_levels(graph)
    names = sorted(t for t in targets if t in graph.fg and t in levels)
    if not names:
        return None
    target = rng.choices(names, weights=[max(targets[t], 1e-6) for t in names])[0]
    distance = dict(nx.single_target_shortest_path_length(graph.fg, target, cutoff=max_hops))
    sources = sorted(s for s, d in distance.items() if d >= 1 and s in levels)
    routes: list[list[str]] = [[target]]
    if sources:
        source = rng.choice(sources)
        paths = sorted(nx.all_shortest_paths(graph.fg, source, target))
        route = rng.choice(paths[:16])
        if all(t in levels for t in route):
            routes.insert(0 if rng.random() < 0.5 else 1, route)
    for route in routes:
        trace: list[PathCall] = []
        try:
            prev = None
            for tool in route:
                prev = _place(graph, levels, trace, tool, rng, via=prev)
        except OperationError:
            continue
        if min_calls <= len(trace) <= max_calls and not legal_trace(graph, trace):
            return target, trace
    return None


# --------------------------------------------------------------------------------------
# 6) hints that reveal no gold value
# --------------------------------------------------------------------------------------


def gold_values(calls: Sequence[GoldCall]) -> list[str]:
    """The gold argument values a hint must not contain: strings of 3+ characters and
    numbers other than 0-9 (as they would be written), from every gold call."""
    out: set[str] = set()

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, bool) or v is None:
            return
        elif isinstance(v, (int, float)):
            if not (float(v).is_integer() and 0 <= v <= 9):
                out.add(f"{v:g}" if isinstance(v, float) else str(v))
                if isinstance(v, float) and v.is_integer():
                    out.add(str(int(v)))
        elif isinstance(v, str) and len(v.strip()) >= 3:
            out.add(v.strip())

    for c in calls:
        walk(c.arguments)
    return sorted(out, key=len, reverse=True)


def redact_hint(hint: str, values: Sequence[str]) -> tuple[str, bool]:
    """``hint`` with every gold value replaced (case-insensitive, whole words where the
    value starts/ends with a word character); (text, whether anything was replaced)."""
    text, changed = hint, False
    for v in values:
        pattern = re.escape(v)
        if v[:1].isalnum() or v[:1] == "_":
            pattern = r"(?<![\w.])" + pattern
        if v[-1:].isalnum() or v[-1:] == "_":
            pattern = pattern + r"(?![\w])"
        new = re.sub(pattern, "[the value the request gives]", text, flags=re.I)
        changed = changed or new != text
        text = new
    return text, changed


# --------------------------------------------------------------------------------------
# the stage
# --------------------------------------------------------------------------------------


@dataclass
class _Hard:
    """One hard task on its way to a row."""

    index: int
    domain: str
    target: str
    trace: list[Any]  # ExecutedCall
    env_seed: int
    final_state_hash: str
    adv: dict[str, Any]
    adv_args: dict[str, Any]
    query: str | None = None


class _Reasoner:
    """The reasoner as an episode policy: the hints so far go into the request it is *sent*
    (appended to the user's message), never into the recorded conversation."""

    def __init__(
        self, ctx: Context, role: str, gt: GroundTruth, seed: int, hints: list[str], attempt: int,
        temperature: float,
    ) -> None:  # fmt: skip
        self.client = ctx.llm(role)
        self.role, self.gt, self.seed = role, gt, seed
        self.hints, self.attempt, self.temperature = hints, attempt, temperature
        self.sent: list[list[dict[str, Any]]] = []

    async def __call__(self, messages: Sequence[Message], tools: list[dict[str, Any]]) -> Any:
        sent = list(messages)
        if self.hints:
            i = next(k for k, m in enumerate(sent) if m.role == "user")
            note = "\n".join(f"- {h}" for h in self.hints)
            sent[i] = sent[i].model_copy(
                update={"content": f"{sent[i].content}\n\n[Hints from a reviewer]\n{note}"}
            )
        result = await self.client.chat(
            sent,
            tools,
            temperature=self.temperature,
            seed=self.seed,
            metadata={
                "role": self.role,
                "ground_truth": sim_task(self.gt),
                "hint": bool(self.hints),
                "attempt": self.attempt,
            },
        )
        if not result.ok:
            result.raise_for_infra()
            raise PolicyError(result.error or "the reasoner returned nothing")
        c = result.choices[0]
        return PolicyStep(message=c.message, format_errors=list(c.format_errors))


@register
class HardGen(RowsGlobalStage[HardGenConfig]):
    """HardGen: failure APIs from two probes → legal hard traces → advanced-tool queries →
    verified solutions with non-leaking hints (≤ 3 attempts)."""

    name = "hardgen"
    writes = ("success", "reward", "reward_components", "failure_layer", "failure_reason")

    def __init__(self, config: HardGenConfig | None = None) -> None:
        super().__init__(config)
        self._feeds = FeedFeedback(self.config.prune_after)

    async def aprocess_rows(self, rows: list[Trajectory], ctx: Context) -> list[Trajectory]:
        cfg = self.config
        tasks = [r for r in rows if r.ground_truth is not None and r.domain in ctx.envs.domains()]
        ctx.metrics.inc("probe_tasks", len(tasks))
        if cfg.checkpoint_role is not None:
            needed = ctx.needed_artifacts()
            if not needed:
                raise ConfigError(
                    f"stage {ctx.stage_id!r}: checkpoint_role {cfg.checkpoint_role!r} is "
                    "played by a checkpoint: give `needs:` a training stage"
                )
            ctx.use_checkpoint(
                cfg.checkpoint_role, needed[-1], max_tokens=cfg.checkpoint_max_tokens
            )
        # 1) failure statistics
        stats = await self._probe(ctx, tasks)
        failing = stats.failure_apis(cfg.min_failure_rate, cfg.min_attempts)
        ctx.metrics.set("failure_rates", stats.to_json())
        ctx.metrics.set("failure_apis", sorted(f"{d}.{t}" for d, t in failing))
        ctx.metrics.inc("failure_apis", len(failing))
        if not failing:
            ctx.log.warning("hardgen: no tool fails for every probe; nothing to aim at")
            return []
        by_domain: dict[str, dict[str, float]] = defaultdict(dict)
        for (d, t), rate in failing.items():
            by_domain[d][t] = rate
        # 2-5) hard tasks
        hard = await self._hard_tasks(ctx, by_domain)
        # 6-7) solve, verify, hint
        sem = asyncio.Semaphore(cfg.concurrency)

        async def solve(h: _Hard) -> Trajectory | None:
            async with sem:
                return await self._solve(ctx, h, stats, failing)

        results = await asyncio.gather(*(solve(h) for h in hard))
        return [r for r in results if r is not None]

    # -- 1) probes -------------------------------------------------------------------------
    async def _probe(self, ctx: Context, tasks: list[Trajectory]) -> FailureStats:
        cfg = self.config
        stats = FailureStats()
        sem = asyncio.Semaphore(cfg.concurrency)

        async def one(
            role: str, row: Trajectory, k: int
        ) -> tuple[str, Trajectory, list[bool] | None]:
            async with sem:
                gt, opening = task_of(row)
                assert gt is not None
                ep = Episode(gt, make_env(ctx, row, gt), tools=row.tools, prefix=opening,
                             limits=cfg.limits.limits())  # fmt: skip
                policy = LLMPolicy(ctx, role, task=gt, seed=ctx.row_seed(row.id, role, k),
                                   temperature=cfg.temperature)  # fmt: skip
                played = await play_policy(ctx, ep, policy, unit="probes")
                if played is None:  # the endpoint's failure: no evidence either way
                    return role, row, None
                if played.failed is not None:  # the policy failed: every call counts as failed
                    return role, row, [True] * len(gt.flat_calls())
                return role, row, call_failures(played.result, gt, row.tools)

        jobs = [
            one(role, row, k)
            for role in cfg.probe_roles
            for row in tasks
            for k in range(cfg.probe_rollouts)
        ]
        ctx.metrics.inc("infra.units", len(jobs))
        for role, row, failed in await asyncio.gather(*jobs):
            if failed is None:
                continue
            gt = row.ground_truth
            assert gt is not None
            for g, bad in zip(gt.flat_calls(), failed, strict=True):
                stats.add(role, row.domain, g.name, bad, row.id)
        for role in cfg.probe_roles:
            ctx.metrics.inc(f"probe.{role}.rollouts", len(tasks) * cfg.probe_rollouts)
        return stats

    # -- 2-5) graph, sampling, execution, advanced tool, query -------------------------------
    async def _hard_tasks(
        self, ctx: Context, by_domain: dict[str, dict[str, float]]
    ) -> list[_Hard]:
        cfg = self.config
        graphs = {d: build_graph(ctx.envs.toolset(d), cfg.graph) for d in sorted(by_domain)}
        pools: dict[tuple[str, int], ValuePool] = {}
        limit = cfg.max_candidates or 8 * cfg.tasks
        domains = sorted(by_domain)
        made: list[_Hard] = []
        k = 0
        while len(made) < cfg.tasks and k < limit:
            rng = random.Random(ctx.row_seed("hardgen", k))
            domain = domains[k % len(domains)]
            k += 1
            ctx.metrics.inc("candidates")
            graph = graphs[domain]
            # 3) a legal trace toward a failure API
            picked = sample_trace(
                graph, by_domain[domain], rng, min_calls=cfg.min_calls, max_calls=cfg.max_calls,
                max_hops=cfg.max_hops,
            )  # fmt: skip
            if picked is None:
                ctx.metrics.inc("dropped.no_legal_trace")
                continue
            target, trace = picked
            # ... executed, values grounded in the environment
            index = {c.uid: i for i, c in enumerate(trace)}
            plan = [
                PlannedCall(c.tool, {b.param: (index[b.source], b.field) for b in c.bindings})
                for c in trace
            ]
            seed = rng.choice(cfg.env_seeds)
            if (domain, seed) not in pools:
                env0 = ctx.envs.make(domain, seed=seed)
                env0.reset()
                examples = [
                    (c.name, c.arguments)
                    for t in ctx.envs.example_tasks(domain)
                    for c in t.ground_truth.flat_calls()
                ] if domain in _builtin() else []  # fmt: skip
                pools[(domain, seed)] = ValuePool(env0.state(), examples, env0.value_hints())
            env = ctx.envs.make(domain, seed=seed)
            env.reset(GroundTruth(env_seed=seed))
            try:
                executed = execute_plan(
                    env, plan, {t.name: t for t in graph.toolset.tools}, pools[(domain, seed)],
                    rng, attempts=cfg.attempts_per_call, optional_p=0.0,
                )  # fmt: skip
            except PlanFailed as exc:
                ctx.metrics.inc(f"dropped.{exc.reason}")
                self._feeds.record(graph, trace, exc.index, ok=False, metrics=ctx.metrics)
                continue
            self._feeds.record(graph, trace, len(trace), ok=True, metrics=ctx.metrics)
            # 4) the advanced tool
            adv, adv_args = _advanced_tool(graph, target, trace, executed)
            made.append(
                _Hard(len(made), domain, target, executed, seed, env.state_hash(), adv, adv_args)
            )
        ctx.metrics.inc("traces", len(made))
        # 5) hard queries, at the advanced-tool level
        ctx.metrics.inc("infra.units", len(made))
        await asyncio.gather(*(self._query(ctx, h, graphs[h.domain]) for h in made))
        kept = [h for h in made if h.query]
        return kept

    async def _query(self, ctx: Context, h: _Hard, graph: SignatureGraph) -> None:
        cfg = self.config
        adv_call = GoldCall(name=h.adv["name"], arguments=h.adv_args)
        prompt = (
            f"Tool: {json.dumps(_spec(h.adv), ensure_ascii=False)}\n"
            f"The user states: {json.dumps(h.adv_args, ensure_ascii=False)}"
        )
        result = await ctx.llm(cfg.query_role).chat(
            [
                Message(role="system", content=QUERY_PROMPT.format(n=cfg.n_queries)),
                Message(role="user", content=prompt),
            ],
            None,
            seed=ctx.row_seed("hardgen-query", h.domain, h.index),
            metadata={
                "role": cfg.query_role,
                "steps": [[adv_call.model_dump(mode="json")]],
                "n_queries": cfg.n_queries,
                "tools": [{"type": "function", "function": _spec(h.adv)}],
            },
        )
        if not result.ok:
            if result.infra:  # the endpoint's failure, not the writer's: the task is lost
                ctx.lost_to_infra(InfraError(result.error or "?"), unit="hard tasks")
            else:
                ctx.metrics.inc("dropped.query_request_failed")
            return
        names = [t.name for t in graph.toolset.tools] + [h.adv["name"]]
        h.query = first_usable_query(
            result.choices[0].message.content, names, h.adv_args, ctx.metrics
        )
        if not h.query:
            ctx.metrics.inc("dropped.no_valid_query")

    # -- 6-7) solve with hints, verify, row ----------------------------------------------------
    async def _solve(
        self,
        ctx: Context,
        h: _Hard,
        stats: FailureStats,
        failing: dict[tuple[str, str], float],
    ) -> Trajectory | None:
        cfg = self.config
        assert h.query is not None
        gold_steps = [
            [GoldCall(name=c.tool, arguments=c.arguments, output=c.output)] for c in h.trace
        ]
        bindings = [b for c in h.trace for b in c.bindings]
        gt = GroundTruth(
            turns=[GoldTurn(request=h.query, steps=gold_steps)],
            env_seed=h.env_seed,
            final_state_hash=h.final_state_hash,
            extra={
                "bindings": bindings,
                "advanced_tool": h.adv,
                "advanced_arguments": h.adv_args,
                "target": h.target,
                "hardgen": True,
            },
        )
        tools = ctx.envs.toolset(h.domain).to_openai()
        row_id = stable_id("hardgen", ctx.config_hash, ctx.seed, h.domain, h.index)
        task = Trajectory(id=row_id, task_id=f"hg-{h.domain}-{row_id[:12]}", domain=h.domain,
                          ground_truth=gt, tools=tools)  # fmt: skip
        opening = [
            Message(role="system", content=system_prompt(domain_policy(h.domain))),
            Message(role="user", content=h.query),
        ]
        values = gold_values(gt.flat_calls())
        hints: list[str] = []
        ctx.metrics.inc("infra.units")
        for attempt in range(cfg.max_attempts):
            ep = Episode(gt, make_env(ctx, task, gt), tools=tools, prefix=opening,
                         limits=cfg.limits.limits())  # fmt: skip
            reasoner = _Reasoner(ctx, cfg.reasoner_role, gt, ctx.row_seed(row_id, attempt),
                                 list(hints), attempt, cfg.temperature)  # fmt: skip
            played = await play_policy(ctx, ep, reasoner, unit="tasks")
            if played is None:  # the endpoint's failure, not the reasoner's
                return None
            if played.failed is not None:
                ctx.metrics.inc("rejected.generation")
                ctx.log.debug("hardgen %s: %s", row_id, played.error)
                return None
            result = played.result
            verdict = verify_episode(result, gt, tools)
            if verdict.ok:
                ctx.metrics.inc("kept")
                ctx.metrics.inc(f"attempts.{attempt + 1}")
                return self._row(ctx, task, result, verdict, h, hints, attempt + 1, stats, failing)
            if attempt + 1 < cfg.max_attempts:
                try:
                    hints.append(await self._hint(ctx, gt, result, values, row_id, attempt))
                except InfraError as exc:  # no hint: the task is lost, not hinted generically
                    ctx.lost_to_infra(exc, unit="tasks")
                    return None
        ctx.metrics.inc("discarded")
        return None

    async def _hint(
        self,
        ctx: Context,
        gt: GroundTruth,
        result: Any,
        values: list[str],
        row_id: str,
        attempt: int,
    ) -> str:
        """The verifier's corrective hint, with any gold value redacted."""
        cfg = self.config
        gold = [[c.model_dump(mode="json", include={"name", "arguments"})] for c in gt.flat_calls()]
        cand = [{"name": c.name, "arguments": c.parsed_arguments()} for c in result.calls]
        answer = next(
            (m.content for m in reversed(result.messages) if m.role == "assistant" and
             not m.tool_calls), None,
        )  # fmt: skip
        reply = await ctx.llm(cfg.verifier_role).chat(
            [
                Message(role="system", content=VERIFIER_PROMPT),
                Message(
                    role="user",
                    content=f"Task: {gt.turns[0].request}\nReference calls: "
                    f"{json.dumps(gold, ensure_ascii=False)}\nAttempt's calls: "
                    f"{json.dumps(cand, ensure_ascii=False)}\nAttempt's answer: {answer}",
                ),
            ],
            None,
            temperature=0.0,
            seed=ctx.row_seed(row_id, "verify", attempt),
            metadata={
                "role": cfg.verifier_role,
                "gold": gold,
                "candidate": [c for c in cand if isinstance(c["arguments"], dict)]
                or (answer or ""),
                "attempt": attempt,
            },
        )
        reply.raise_for_infra()  # the endpoint's failure: no hint at all (module docstring)
        hint = GENERIC_HINT
        if not reply.ok:
            ctx.metrics.inc("hints.request_failed")
        else:
            text = reply.choices[0].message.content or ""
            try:
                data = json.loads(text[text.find("{") : text.rfind("}") + 1])
                hint = str(data.get("hint") or "").strip() or GENERIC_HINT
            except (ValueError, AttributeError):
                ctx.metrics.inc("hints.unparsed")
                hint = text.strip() or GENERIC_HINT
        hint, leaked = redact_hint(hint, values)
        if leaked:
            ctx.metrics.inc("hints.redacted")
        ctx.metrics.inc("hints")
        return hint

    def _row(
        self,
        ctx: Context,
        task: Trajectory,
        result: Any,
        verdict: Any,
        h: _Hard,
        hints: list[str],
        attempts: int,
        stats: FailureStats,
        failing: dict[tuple[str, str], float],
    ) -> Trajectory:
        cfg = self.config
        n = len(h.trace)
        caps = {"multi_call" if n > 1 else "single_call"}
        if any(c.bindings for c in h.trace):
            caps.add("dependent_calls")
        if n >= 6:
            caps.add("long_horizon")
        key = (h.domain, h.target)
        parents = sorted(stats.evidence.get(key, set()))[:8]
        return task.derive(
            goal=h.query,
            capabilities=sorted(caps),
            **passed_columns(result, verdict),
            extra={
                "hardgen": {
                    "target": h.target,
                    "failure_rate": failing.get(key),
                    "probe_rates": {p: stats.rate(p, key) for p in cfg.probe_roles},
                    "attempts": attempts,
                    "hints": hints,
                    "advanced_tool": h.adv["name"],
                    "trace": [c.tool for c in h.trace],
                },
                "end": result.end,
                "final_state_hash": result.final_state_hash,
            },
            **ctx.provenance(
                method="hardgen", parent_ids=parents, generator=ctx.llm(cfg.reasoner_role).model
            ),
        )


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------


def _builtin() -> set[str]:
    from ...envs.domains import BUILTIN_DOMAINS

    return set(BUILTIN_DOMAINS)


def _advanced_tool(
    graph: SignatureGraph, target: str, trace: list[PathCall], executed: list[Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Step 4: the trace as one composite tool; its parameters are the values the user
    gives (a name used twice with different values gets the tool's name as a prefix)."""
    props: dict[str, Any] = {}
    args: dict[str, Any] = {}
    for c, ex in zip(trace, executed, strict=True):
        spec = graph.spec(c.tool)
        for p, v in ex.user_values.items():
            name = p
            if name in args and args[name] != v:
                name = f"{c.tool}_{p}"
            if name in args and args[name] == v:
                continue
            schema = dict(spec.properties().get(p) or {})
            props[name] = schema
            args[name] = v
    adv = {
        "name": f"{target}_adv",
        # what the chain achieves, in the target's words: the steps before it stay implicit
        "description": graph.spec(target).description,
        "parameters": {"type": "object", "properties": props, "required": sorted(props)},
        "chain": [c.tool for c in trace],
    }
    return adv, args


def _spec(adv: dict[str, Any]) -> dict[str, Any]:
    """The advanced tool as a function schema (without its chain)."""
    return {k: v for k, v in adv.items() if k != "chain"}

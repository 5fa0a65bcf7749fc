"""``magnet_tasks``: multi-turn tasks with executable ground truth from the function-signature graph
(Yin et al. 2025, "Magnet: Multi-turn Tool-use Data Synthesis and Distillation via Graph
Translation", arXiv:2503.07826, §3).

For each domain (a built-in domain or a toolset offered by ``defaults.env``), candidate
after candidate until ``tasks_per_domain`` tasks are made (or ``tasks_per_tool`` × the domain's
tools, when that is more):

1) the graph: :func:`~trajsynth.graph.build_graph` over the domain's toolset (types and
   name/description similarity; Magnet's LLM edge check with ``edge_check: true``, judge
   role), built once per domain;
2) a function-signature path: a seeded random walk of up to ``walk_steps`` steps (S = 7;
   the length is drawn from ``min_walk_steps``..S so that short tasks exist too), then
   MAGNIFY of one call (probability ``magnify_p``) and CONNECT to an unlinked function
   (``connect_p``), cut to ``max_calls``;
3) turns and node operations, in Magnet's order: one turn per call, Merge (``merge_p``,
   Magnet's p = 0.3), Insert (``insert_p``), then ours: Bundle (``bundle_p``: one to
   ``bundle_max`` independent requests in a turn, ``bundle_share`` of them the same values
   asked of another function) and fan-out (``parallel_p``: a call again
   with other values, all or ``parallel_vary`` of them), then Split (``split_p``: a
   miss-param or miss-func turn; else, with ``ask_p``, ours: a miss-param first turn, the
   request leaving out a value the user must give, which single-turn benchmarks score as no
   call). The path must be legal (:func:`~trajsynth.graph.problems`) or it is counted and skipped;
4) execution: the calls run turn by turn in a fresh environment, arguments grounded in its
   state and earlier outputs threaded into later inputs (:mod:`.grounding`); a candidate
   whose gold calls fail is dropped, its reason counted under ``dropped.<reason>``. The
   graph learns from it: a feed whose calls failed ``prune_after`` times and never worked is
   removed (``graph.pruned_feeds``), as HardGen refines its API graph with execution
   feedback;
5) back-translation, one request per turn from the ``query_writer`` role: it must carry every
   value the user states, verbatim or in a form that maps back to it alone ("March 5, 2024"
   for 2024-03-05, :mod:`trajsynth.core.surface`; a request missing one, or naming a
   function, is rejected and the next phrasing tried) and never name a function. A
   miss-param turn's request leaves the value out; the user's follow-up (``clarification``)
   gives it. A miss-func turn asks for a
   function the task does not offer; its gold is a reply and no call;
6) the task row: ``goal`` (the first request), ``ground_truth`` (turns with requests and gold
   steps, ``env_seed``, ``final_state_hash``, bindings, the path and the operations),
   capability tags, ``tools`` (the domain's, less a withheld function), and ``messages`` =
   the shared system prompt and the first request.

Rows are made in candidate order, so a run resumed from an offset makes the same rows (the
candidates before the offset are synthesized again, without keeping them). Every candidate is
counted once: ``tasks``, ``dropped.<reason>``, or ``unused`` (made in the last block of a
domain after its quota was reached).

Deviations from Magnet: values come from the environment's state and the domain's example
tasks instead of an LLM's forward translation (offline, and every value executes); Split's
miss-param node is the turn lacking the value (see :mod:`trajsynth.graph.ops`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field, field_validator

from ...core.batch import to_batch
from ...core.config import AsBefore
from ...core.ids import seed_from, stable_id
from ...core.prompts import system_prompt
from ...core.schema import Message, Trajectory
from ...core.surface import param_words
from ...core.task import GoldCall, GoldTurn, GroundTruth
from ...core.text import split_words
from ...envs.domains import domain_policy
from ...graph import (
    FSP,
    GraphConfig,
    OperationError,
    SignatureGraph,
    build_graph,
    bundle,
    connect,
    fan_out,
    insert,
    magnify,
    merge,
    problems,
    random_walk,
    split,
    to_turns,
)
from ...graph.ops import PathCall, TurnPlan
from ...llm.sim.phrasing import refusal
from ..common.grounding import (
    ExecutedCall,
    FeedFeedback,
    PlanFailed,
    PlannedCall,
    ValuePool,
    execute_plan,
)
from ..common.policies import edge_judge
from ..common.queries import first_usable_query
from ..context import Context
from ..kinds import Output, SourceStage, StageConfig
from ..registry import register

__all__ = ["QUERY_PROMPT", "MagnetTasks", "MagnetTasksConfig"]


QUERY_PROMPT = """You write what a user types to an AI assistant (back-translation). Given \
function calls, write {n} different natural requests that would lead the assistant to make \
exactly those calls, in that order. Each request must state every value listed under \
"the user states", in natural words; it may refer to results of earlier calls ("the cheapest \
flight you found") instead of repeating them; it must never name a function or a parameter \
identifier. Answer with JSON only: {{"queries": ["...", ...]}}."""

_PERSONAS = [None, None, "busy professional", "student", "retiree", "developer"]
_STYLES = [None, "plain", "casual", "formal", "terse"]


class MagnetTasksConfig(StageConfig):
    domains: list[str] | None = Field(
        None, description="Domains to synthesize for (default: every domain ctx.envs offers)."
    )
    tasks_per_domain: int = Field(20, ge=1, description="Tasks made per domain.")
    tasks_per_tool: float | None = Field(
        None,
        gt=0,
        description="Tasks per tool of the domain, when that is more than tasks_per_domain "
        "(a collection of 800 tools gets more tasks than one of 10); none: tasks_per_domain.",
    )
    max_candidates: int | None = Field(
        None, ge=1, description="Candidates tried per domain (default 6 × tasks_per_domain)."
    )
    graph: GraphConfig = Field(default_factory=GraphConfig, description="Graph building.")
    edge_check: bool = Field(False, description="Magnet's LLM edge check (judge role).")
    walk_steps: int = Field(7, ge=1, le=20, description="Random-walk steps S (Magnet: 7).")
    min_walk_steps: int = Field(
        1, ge=1, le=20, description="Each walk takes between this and walk_steps steps."
    )
    max_calls: int = Field(10, ge=1, le=40, description="Calls per task at most.")
    magnify_p: float = Field(0.25, ge=0, le=1, description="Probability of one MAGNIFY.")
    connect_p: float = Field(0.25, ge=0, le=1, description="Probability of one CONNECT.")
    merge_p: float = Field(0.3, ge=0, le=1, description="Merge probability (Magnet: 0.3).")
    insert_p: float = Field(0.3, ge=0, le=1, description="Insert probability per turn.")
    insert_long_range: float = Field(0.3, ge=0, le=1, description="Insert into a later turn.")
    split_p: float = Field(0.3, ge=0, le=1, description="Probability a task gets a Split turn.")
    ask_p: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Probability that the first request leaves out a required value the user "
        "must give (Split's miss-param on the first turn), when no Split was drawn: the "
        "right first answer asks, no call (a single-turn benchmark's question whose offered "
        "function fits but whose values are not stated).",
    )
    optional_p: float = Field(0.3, ge=0, le=1, description="Probability of an optional argument.")
    attempts: int = Field(8, ge=1, description="Draws per call before a candidate is dropped.")
    prune_after: int = Field(
        3, ge=1, description="Failures (and no success) after which a graph feed is removed."
    )
    env_seeds: list[int] = Field(
        default_factory=lambda: [0],
        min_length=1,
        description="Environment seeds a task is drawn on, or a count N for seeds 0..N-1. One "
        "seed is one starting state of each domain: its few orders, users and reservations "
        "recur in every task (an id in 30 of 1,500 training calls); more seeds, more of them.",
    )
    query_role: str = Field("query_writer", description="LLM role of the back-translation.")
    n_queries: int = Field(3, ge=1, le=10, description="Phrasings asked per turn.")
    distractors: int | tuple[int, int] | None = Field(
        None,
        description="Offer only the tools the gold calls use plus this many others of the "
        "domain, drawn per task, or [lo, hi]: a number drawn per task (LoopTool's dialogs "
        "offer 3 to 11); a task that needs no call gets one more; none: the whole toolset.",
    )
    parallel_p: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Fan-out probability per turn: a call the user asks for again with other "
        "values in the same turn (BFCL's parallel calls; 0: never).",
    )
    parallel_copies: int = Field(2, ge=1, le=5, description="Fan-out: replicas at most.")
    parallel_vary: int = Field(
        0,
        ge=0,
        le=5,
        description="Fan-out: a replica keeps its original's stated values but 1 to this many, "
        'drawn anew ("the same for Rome": BFCL\'s parallel questions share all values but '
        "one or two); 0: every value drawn anew.",
    )
    bundle_p: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Bundle probability per task: a tool turn also carries a request of its "
        "own, a call of another function that shares no value with the path (BFCL's "
        "parallel_multiple: several functions called in one step; 0: never).",
    )
    bundle_max: int = Field(
        1,
        ge=1,
        le=4,
        description="Bundle: requests added at most, a number drawn from 1..this per bundled "
        "task (BFCL's parallel_multiple asks for up to four functions in one turn), never "
        "past max_calls.",
    )
    bundle_share: Annotated[float, AsBefore(0.0)] = Field(
        0.0,
        ge=0,
        le=1,
        description="Bundle: the share of added requests that are the same values asked of "
        'another function, said once ("the temperature and the humidity in Boston": 61 '
        "of BFCL's 200 parallel_multiple questions); a function whose required parameters "
        "the turn's first call takes, else an unrelated request as usual. 0: never.",
    )
    irrelevant_p: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Probability a task is one request that no offered tool can do (its "
        "function is withheld): the right answer is a reply, no call (BFCL's irrelevance). "
        "That reply is one turn, which `filter`'s too_easy rule spares: the task's turn is "
        "a clarify turn.",
    )
    block: int = Field(
        32,
        ge=1,
        description="Candidates per block; a block's requests are written at once, "
        "while the next block is synthesized.",
    )
    system_prompt: str | None = Field(None, description="Overrides the shared system prompt.")

    @field_validator("env_seeds", mode="before")
    @classmethod
    def _env_seeds(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            if v < 1:
                raise ValueError("env_seeds: a count ≥ 1, or a list of seeds")
            return list(range(v))
        return v

    @field_validator("distractors")
    @classmethod
    def _distractors(cls, v: int | tuple[int, int] | None) -> int | tuple[int, int] | None:
        lo, hi = (v, v) if isinstance(v, int) else v or (0, 0)
        if lo < 0 or hi < lo:
            raise ValueError("distractors: a count ≥ 0, or [lo, hi] with 0 ≤ lo ≤ hi")
        return v


@dataclass
class _Candidate:
    index: int
    domain: str
    fsp: FSP
    calls: list[ExecutedCall]
    env_seed: int
    final_state_hash: str
    withheld: list[str]
    queries: list[str | None] = field(default_factory=list)
    failure: str = "no_valid_query"


@register
class MagnetTasks(SourceStage[MagnetTasksConfig]):
    """Magnet-style tasks with executable ground truth from the function-signature graph."""

    name = "magnet_tasks"
    writes = ("ground_truth",)
    io_bound = True

    def __init__(self, config: MagnetTasksConfig | None = None) -> None:
        super().__init__(config)
        self._graphs: dict[str, SignatureGraph] = {}
        self._pools: dict[tuple[str, int], ValuePool] = {}
        self._feeds = FeedFeedback(self.config.prune_after)
        self._why: dict[str, Counter[str]] = {}  # domain → why its candidates were dropped

    def expected_rows(self) -> int | None:
        cfg = self.config
        if cfg.domains is None or cfg.tasks_per_tool is not None:
            return None
        return cfg.tasks_per_domain * len(cfg.domains)

    def quota(self, ctx: Context, domain: str) -> int:
        """Tasks to make in ``domain``: tasks_per_domain, or tasks_per_tool × its tools."""
        cfg = self.config
        if cfg.tasks_per_tool is None:
            return cfg.tasks_per_domain
        tools = len(ctx.envs.toolset(domain))
        return max(cfg.tasks_per_domain, round(cfg.tasks_per_tool * tools))

    # -- 1) the graph ----------------------------------------------------------------------
    def graph(self, ctx: Context, domain: str) -> SignatureGraph:
        if domain not in self._graphs:
            cfg = self.config
            judge = edge_judge(ctx, seed=ctx.row_seed("edges", domain)) if cfg.edge_check else None
            g = build_graph(ctx.envs.toolset(domain), cfg.graph, judge=judge)
            ctx.metrics.set(f"graph.{domain}", g.stats())
            self._graphs[domain] = g
        return self._graphs[domain]

    def pool(self, ctx: Context, domain: str, seed: int) -> ValuePool:
        if (domain, seed) not in self._pools:
            env = ctx.envs.make(domain, seed=seed)
            env.reset()
            try:
                examples = [
                    (c.name, c.arguments)
                    for t in ctx.envs.example_tasks(domain)
                    for c in t.ground_truth.flat_calls()
                ]
            except Exception:  # an imported toolset has no example tasks
                examples = []
            self._pools[(domain, seed)] = ValuePool(env.state(), examples, env.value_hints())
        return self._pools[(domain, seed)]

    # -- the source ------------------------------------------------------------------------
    def generate(self, ctx: Context, offset: int = 0) -> Iterator[Output]:
        cfg = self.config
        domains = cfg.domains or ctx.envs.domains()
        made = 0
        # the requests of one block are written while the next block is synthesized; the two
        # blocks in flight are written concurrently, so that a slow or hung request of one
        # (it costs a request timeout) does not hold the other's back
        with ThreadPoolExecutor(2, thread_name_prefix="magnet-queries") as pool:
            for domain in domains:
                graph = self.graph(ctx, domain)
                quota = self.quota(ctx, domain)
                limit = cfg.max_candidates or 6 * quota
                count, k = 0, 0
                pending: deque[tuple[list[_Candidate], Future[None]]] = deque()
                while count < quota:
                    if k < limit:
                        block: list[_Candidate] = []
                        while len(block) < cfg.block and k < limit:
                            ctx.metrics.inc("candidates")
                            cand = self.synthesize(ctx, graph, domain, k)
                            k += 1
                            if cand is not None:
                                block.append(cand)
                        job = pool.submit(ctx.run, self.translate(ctx, graph, block))
                        pending.append((block, job))
                        if len(pending) < 2 and k < limit:
                            continue
                    if not pending:
                        break
                    done, job = pending.popleft()
                    job.result()
                    rows = []
                    for cand in done:
                        if count >= quota:
                            ctx.metrics.inc("unused")  # made after the quota was reached
                            continue
                        row = self.task_row(ctx, graph, cand)
                        if row is None:
                            ctx.metrics.inc(f"dropped.{cand.failure}")
                            continue
                        count += 1
                        made += 1
                        if made > offset:
                            rows.append(row)
                    ctx.metrics.inc("tasks", len(rows))
                    if rows:
                        yield to_batch(rows)
                for extra, job in pending:  # blocks in flight when the quota was reached
                    job.result()
                    ctx.metrics.inc("unused", len(extra))
                if count < quota:
                    why = "; ".join(f"{n}× {d}" for d, n in
                                    self._why.get(domain, Counter()).most_common(3))  # fmt: skip
                    ctx.log.warning(
                        "magnet_tasks: %s gave %d of %d tasks from %d candidates%s",
                        domain, count, quota, k,
                        f" (most often: {why})" if why else "",
                    )  # fmt: skip

    # -- 2-4) one candidate ----------------------------------------------------------------
    def path(self, graph: SignatureGraph, rng: random.Random) -> FSP:
        """Steps 2-3: walk, MAGNIFY, CONNECT, then turns, Merge, Insert, Bundle, fan-out,
        Split."""
        cfg = self.config
        if cfg.irrelevant_p and rng.random() < cfg.irrelevant_p:
            return _irrelevant(graph, rng)
        path = random_walk(graph, rng, steps=rng.randint(cfg.min_walk_steps, cfg.walk_steps))
        log = []
        if rng.random() < cfg.magnify_p:
            try:
                path = magnify(graph, path, rng.randrange(len(path)), rng)
                log.append("magnify")
            except OperationError:
                pass
        if rng.random() < cfg.connect_p:
            last = path[-1].tool
            targets = [f for f in graph.functions if f != last and not graph.fg.has_edge(last, f)]
            rng.shuffle(targets)
            for target in targets[:5]:
                try:
                    path = connect(graph, rng, path, target)
                    log.append(f"connect:{target}")
                    break
                except OperationError:
                    continue
        path = _cut(graph, path, cfg.max_calls)
        fsp = to_turns(path)
        fsp = FSP(fsp.turns, (*fsp.log, *log))
        fsp = merge(fsp, rng, p=cfg.merge_p)
        fsp = insert(graph, fsp, rng, p=cfg.insert_p, long_range=cfg.insert_long_range)
        if len(fsp.calls()) > cfg.max_calls:
            fsp = _cut_fsp(graph, fsp, cfg.max_calls)
        if cfg.bundle_p:
            fsp = bundle(
                graph,
                fsp,
                rng,
                p=cfg.bundle_p,
                max_calls=cfg.max_calls,
                most=cfg.bundle_max,
                share_p=cfg.bundle_share,
            )
        if cfg.parallel_p:
            fsp = fan_out(fsp, rng, p=cfg.parallel_p, copies=cfg.parallel_copies)
        if rng.random() < cfg.split_p:
            with contextlib.suppress(OperationError):
                fsp = split(graph, fsp, rng)
        elif cfg.ask_p and rng.random() < cfg.ask_p:
            with contextlib.suppress(OperationError):
                fsp = split(graph, fsp, rng, kind="param", turn=0)
        return fsp

    def synthesize(
        self, ctx: Context, graph: SignatureGraph, domain: str, k: int
    ) -> _Candidate | None:
        cfg = self.config
        rng = random.Random(ctx.row_seed("magnet", domain, k))
        try:
            fsp = self.path(graph, rng)
        except OperationError as exc:
            ctx.metrics.inc("dropped.no_path")
            ctx.log.debug("candidate %s/%d: %s", domain, k, exc)
            return None
        bad = problems(graph, fsp)
        if bad:  # never expected: every operation keeps legality
            ctx.metrics.inc("dropped.illegal_path")
            ctx.log.warning("candidate %s/%d is illegal: %s", domain, k, bad)
            return None
        # 4) execution, turn by turn (the executed calls in order; miss-func calls not run)
        order = fsp.calls(executed=False)
        index = {c.uid: i for i, c in enumerate(order)}
        plan = [
            PlannedCall(
                c.tool,
                {b.param: (index[b.source], b.field) for b in c.bindings},
                execute=t.missing != "func",
                differ_from=(index[c.replica_of],) if c.replica_of is not None else (),
                vary=cfg.parallel_vary if c.replica_of is not None else 0,
                share=index[c.shares] if c.shares is not None else None,
            )
            for t in fsp.turns
            for c in t.calls
        ]
        seed = rng.choice(cfg.env_seeds)
        env = ctx.envs.make(domain, seed=seed)
        env.reset(GroundTruth(env_seed=seed))
        tools = {t.name: t for t in graph.toolset.tools}
        try:
            calls = execute_plan(
                env,
                plan,
                tools,
                self.pool(ctx, domain, seed),
                rng,
                attempts=cfg.attempts,
                optional_p=cfg.optional_p,
            )
        except PlanFailed as exc:
            ctx.metrics.inc(f"dropped.{exc.reason}")
            ctx.log.debug("candidate %s/%d dropped: %s", domain, k, exc)
            self._why.setdefault(domain, Counter())[str(exc)[:240]] += 1
            self._feeds.record(graph, order, exc.index, ok=False, metrics=ctx.metrics)
            return None
        self._feeds.record(graph, order, len(order), ok=True, metrics=ctx.metrics)
        withheld = [t.detail for t in fsp.turns if t.missing == "func" and t.detail]
        return _Candidate(k, domain, fsp, calls, seed, env.state_hash(), withheld)

    # -- 5) back-translation ---------------------------------------------------------------
    async def translate(self, ctx: Context, graph: SignatureGraph, block: list[_Candidate]) -> None:
        """One request per turn of every candidate of the block, written concurrently."""
        cfg = self.config
        client = ctx.llm(cfg.query_role)
        tools = graph.toolset.to_openai()
        jobs = []
        for cand in block:
            calls = _by_turn(cand)
            cand.queries = [None] * len(calls)
            previous: list[str] = []
            for t, (plan, executed) in enumerate(zip(cand.fsp.turns, calls, strict=True)):
                jobs.append(
                    self._query(ctx, client, tools, cand, t, plan, executed, list(previous))
                )
                previous.append(f"turn {t + 1}: calls {[c.tool for c in executed]}")
        await asyncio.gather(*jobs)

    async def _query(
        self,
        ctx: Context,
        client: Any,
        tools: list[dict[str, Any]],
        cand: _Candidate,
        t: int,
        plan: Any,
        executed: list[ExecutedCall],
        previous: list[str],
    ) -> None:
        cfg = self.config
        rng = random.Random(ctx.row_seed("query", cand.domain, cand.index, t))
        steps, must = _query_steps(plan, executed)
        lines = []
        described = {tl["function"]["name"]: tl["function"]["description"] for tl in tools}
        for i, step in enumerate(steps):
            for c in step:
                lines.append(
                    f"{i + 1}. {c.name} ({described.get(c.name, '')}): "
                    f"{json.dumps(c.arguments, ensure_ascii=False)} -> "
                    f"{json.dumps(c.output, ensure_ascii=False)[:300]}"
                )
        prompt = (
            ("Earlier in the conversation: " + "; ".join(previous) + "\n" if previous else "")
            + "Calls, in order:\n"
            + "\n".join(lines)
            + f"\nThe user states: {json.dumps(must, ensure_ascii=False)}"
        )
        persona, style = rng.choice(_PERSONAS), rng.choice(_STYLES)
        used = {c.name for step in steps for c in step}
        meta = {
            "role": cfg.query_role,
            "steps": [[c.model_dump(mode="json") for c in step] for step in steps],
            "n_queries": cfg.n_queries,
            "tools": [tl for tl in tools if tl["function"]["name"] in used],
        }
        if persona:
            meta["persona"] = persona
        if style:
            meta["style"] = style
        result = await client.chat(
            [
                Message(role="system", content=QUERY_PROMPT.format(n=cfg.n_queries)),
                Message(role="user", content=prompt),
            ],
            None,
            seed=ctx.row_seed("query", cand.domain, cand.index, t),
            metadata=meta,
        )
        ctx.metrics.inc("infra.units")
        if not result.ok:
            if result.infra:  # the endpoint's failure: counted as such, not the writer's
                ctx.lost_to_infra(RuntimeError(result.error), unit="task queries")
                cand.failure = "infra_error"
                return
            cand.failure = "query_writer_failed"
            return
        names = [tl["function"]["name"] for tl in tools]
        cand.queries[t] = first_usable_query(
            result.choices[0].message.content, names, must, ctx.metrics
        )

    # -- 6) the row --------------------------------------------------------------------------
    def task_row(self, ctx: Context, graph: SignatureGraph, cand: _Candidate) -> Trajectory | None:
        cfg = self.config
        if any(q is None for q in cand.queries):
            return None
        turns: list[GoldTurn] = []
        caps: set[str] = set()
        for plan, executed, query in zip(cand.fsp.turns, _by_turn(cand), cand.queries, strict=True):
            gold_steps = []
            pos = 0
            for step in plan.steps():
                gold_step = []
                for _ in step:
                    c = executed[pos]
                    pos += 1
                    gold_step.append(GoldCall(name=c.tool, arguments=c.arguments, output=c.output))
                gold_steps.append(gold_step)
            if plan.missing == "func":
                name = plan.detail or ""
                rng = random.Random(ctx.row_seed("refusal", cand.domain, cand.index, name))
                turns.append(
                    GoldTurn(
                        request=query or "",
                        kind="clarify",
                        steps=[],
                        answer=refusal(
                            name, graph.spec(name).description, rng, set(graph.functions)
                        ),
                        clarification="Never mind, let's skip that.",
                    )
                )
                caps.add("no_tool_needed")
                continue
            if plan.missing == "param":
                param = plan.detail or ""
                value = executed[0].arguments.get(param)
                turns.append(
                    GoldTurn(
                        request=query or "",
                        kind="clarify",
                        steps=gold_steps,
                        answer=f"Could you tell me the {param_words(param)}?",
                        clarification=f"The {param_words(param)} is {_render(value)}.",
                    )
                )
                caps.add("needs_clarification")
            else:
                turns.append(GoldTurn(request=query or "", kind="tool", steps=gold_steps))
            if any(len(s) > 1 for s in gold_steps):
                caps.add("parallel_calls")
        executed_calls = [c for c in cand.calls if c.executed]
        n = len(executed_calls)
        if n:
            caps.add("single_call" if n == 1 else "multi_call")
        if any(c.bindings for c in executed_calls):
            caps.add("dependent_calls")
        for c in executed_calls:
            spec = graph.spec(c.tool)
            if any(k in spec.optional() for k in c.user_values):
                caps.add("optional_params")
        if n >= 6 or len(turns) >= 4:
            caps.add("long_horizon")
        gt = GroundTruth(
            turns=turns,
            env_seed=cand.env_seed,
            final_state_hash=cand.final_state_hash,
            extra={
                "bindings": _global_bindings(cand),
                "fsp": cand.fsp.to_json(),
                "operations": list(cand.fsp.log),
                "withheld_tools": cand.withheld,
            },
        )
        tools = [t for t in graph.toolset.to_openai() if t["function"]["name"] not in cand.withheld]
        rid = stable_id("magnet_tasks", ctx.config_hash, ctx.seed, cand.domain, cand.index)
        if cfg.distractors is not None:
            needed = {c.name for c in gt.flat_calls()}
            others = sorted(t["function"]["name"] for t in tools)
            others = [n for n in others if n not in needed and not _alike(graph, n, cand.withheld)]
            r = random.Random(seed_from("magnet_tasks.distractors", rid))
            lo, hi = (cfg.distractors,) * 2 if isinstance(cfg.distractors, int) else cfg.distractors
            count = lo if lo == hi else r.randint(lo, hi)
            # a task that needs no call (irrelevance) offers as many functions as one that
            # needs one: how many are offered must not tell the answer
            count += 0 if needed else 1
            keep = needed | set(r.sample(others, min(count, len(others))))
            tools = [t for t in tools if t["function"]["name"] in keep]
        policy = domain_policy(cand.domain)
        system = cfg.system_prompt or system_prompt(policy)
        return Trajectory(
            id=rid,
            task_id=f"mg-{cand.domain}-{rid[:12]}",
            goal=turns[0].request,
            domain=cand.domain,
            capabilities=sorted(caps),
            ground_truth=gt,
            tools=tools,
            messages=[
                Message(role="system", content=system),
                Message(role="user", content=turns[0].request),
            ],
            extra={"operations": list(cand.fsp.log)},
            **ctx.provenance(method="magnet_tasks"),
        )


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------


def _irrelevant(graph: SignatureGraph, rng: random.Random) -> FSP:
    """One request for a function the task will not offer (a miss-func turn alone)."""
    tool = rng.choice(sorted(graph.functions))
    turn = TurnPlan(calls=(PathCall(0, tool),), kind="clarify", missing="func", detail=tool)
    return FSP(turns=(turn,), log=("irrelevant",))


def _alike(graph: SignatureGraph, name: str, withheld: list[str]) -> bool:
    """Could ``name`` do what a withheld function does (so offering it would make the
    request answerable)? Jaccard similarity of their name and description words ≥ 0.5."""

    def words(n: str) -> set[str]:
        spec = graph.spec(n)
        return set(split_words(f"{n} {spec.description}".lower()))

    mine = words(name)
    for other in withheld:
        theirs = words(other)
        if mine and theirs and len(mine & theirs) / len(mine | theirs) >= 0.5:
            return True
    return False


def _cut(graph: SignatureGraph, path: list[PathCall], n: int) -> list[PathCall]:
    """The longest legal prefix of at most ``n`` calls."""
    for m in range(min(n, len(path)), 0, -1):
        if not problems(graph, path[:m]):
            return path[:m]
    return path[:1]


def _cut_fsp(graph: SignatureGraph, fsp: FSP, n: int) -> FSP:
    """Whole turns from the start, as many as keep the path legal within ``n`` calls."""
    turns = list(fsp.turns)
    while turns and (sum(len(t.calls) for t in turns) > n or problems(graph, FSP(tuple(turns)))):
        turns.pop()
    if not turns:  # the first turn alone is too long or not connected: no task here
        raise OperationError(f"no legal prefix of whole turns within {n} calls")
    return FSP(tuple(turns), (*fsp.log, f"cut:{n}"))


def _by_turn(cand: _Candidate) -> list[list[ExecutedCall]]:
    out, i = [], 0
    for t in cand.fsp.turns:
        out.append(cand.calls[i : i + len(t.calls)])
        i += len(t.calls)
    return out


def _global_bindings(cand: _Candidate) -> list[dict[str, Any]]:
    """Bindings between executed calls, numbered as ``GroundTruth.flat_calls()`` numbers them
    (miss-func calls are not executed and not counted)."""
    remap: dict[int, int] = {}
    n = 0
    for i, c in enumerate(cand.calls):
        if c.executed:
            remap[i] = n
            n += 1
    out = []
    for i, c in enumerate(cand.calls):
        for b in c.bindings:
            if i in remap and b["from_call"] in remap:
                out.append({**b, "call": remap[i], "from_call": remap[b["from_call"]]})
    return out


def _query_steps(plan: Any, executed: list[ExecutedCall]) -> tuple[list[list[GoldCall]], dict]:
    """The steps the query writer sees and the values the request must carry. A miss-param
    turn hides the missing value; values that appear in an earlier output of the same turn
    may be referred to instead of stated."""
    steps, pos = [], 0
    must: dict[str, Any] = {}
    outputs: list[str] = []
    for step in plan.steps():
        gold = []
        for _ in step:
            c = executed[pos]
            pos += 1
            args = dict(c.arguments)
            if plan.missing == "param" and pos == 1:
                args.pop(plan.detail, None)
            gold.append(GoldCall(name=c.tool, arguments=args, output=c.output))
            for k, v in c.user_values.items():
                if k not in args or isinstance(v, (bool, dict)) or v is None:
                    continue
                text = json.dumps(v, ensure_ascii=False)
                if not any(text.strip('"') in o for o in outputs):
                    must[f"{c.tool}.{k}"] = v
        outputs += [json.dumps(c.output, ensure_ascii=False) for c in gold]
        steps.append(gold)
    return steps, must


def _render(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

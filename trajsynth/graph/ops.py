"""Operations on function-signature paths: the seeded random walk, MAGNIFY and CONNECT, and
Magnet's Merge, Insert and Split (Yin et al. 2025, arXiv:2503.07826, §3.2, steps 3-4;
MAGNIFY and CONNECT as docs/methods.md describes them). One function each, every one
preserving legality.

A *path* is a list of :class:`PathCall` in execution order; a call's :class:`Binding` says
which parameter takes which return field of which earlier call (by ``uid``). A *function
signature path* (:class:`FSP`) groups the calls into user turns (:class:`TurnPlan`). Legality
(:func:`problems` returns what breaks it):

1) every call names a function of the graph;
2) every binding is a data-flow edge of the graph (so its JSON types agree) from a call that
   comes *earlier* (order follows data flow);
3) the executed calls are connected by data flow (each takes a value from, or gives one to,
   another call of the path), except a call :func:`bundle` adds as a request of its own
   (``independent``), which with its replicas takes no value from the path and gives none;
4) prerequisites are ordering constraints: when an earlier call produces a required id a call
   needs, the call takes it from there (it is not asked of the user again).

The operations, in the order a task is built:

- :func:`random_walk`: a path of ``steps`` calls (S = 7 in Magnet) from a start function, each
  step to a successor of the previous call, bound to it;
- :func:`magnify`: one call expanded into a finer-grained chain through the tools that feed
  its unbound required parameters (recursively, ``depth`` levels);
- :func:`connect`: a path from a call to a function it has no direct edge to, through
  intermediate tools (a shortest path of the function graph, chosen by the seed);
- :func:`to_turns`: one turn per call (Magnet's initial FSP: each step is one turn);
- :func:`merge`: adjacent turns merged into one multi-call turn with probability ``p``
  (Magnet's p = 0.3);
- :func:`insert`: after a turn's last call, a nested or implicit call it feeds (the user never
  names it), in the same turn or, for a long dependency, at the end of a later turn;
- :func:`bundle` (ours, not Magnet's): a second request in a turn that shares nothing with
  the first (a call of another function, ``independent``);
- :func:`fan_out` (ours, not Magnet's): a call repeated in its turn with other values;
- :func:`split`: a turn whose right answer is a clarifying question and no call: ``param``
  (a required value the user leaves out) or ``func`` (a request for a function that is not
  offered, inserted after a random turn).

Deviation from Magnet: Split's "empty node labelled miss params" is represented as the turn
that lacks the value, kind ``clarify`` (BFCL's miss-param turn and the follow-up that supplies
the value, as one turn of :class:`~trajsynth.core.task.GoldTurn`); the "miss func" node is a
new turn, as in Magnet.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import networkx as nx

from .signature import Feed, SignatureGraph

__all__ = [
    "FSP",
    "Binding",
    "OperationError",
    "PathCall",
    "TurnPlan",
    "bundle",
    "connect",
    "fan_out",
    "insert",
    "magnify",
    "merge",
    "problems",
    "random_walk",
    "split",
    "to_turns",
]


class OperationError(ValueError):
    """The operation does not apply to this path (no feeder, no route, nothing to split)."""


@dataclass(frozen=True)
class Binding:
    """Parameter ``param`` takes the value of return field ``field`` of call ``source``."""

    param: str
    source: int
    field: str


@dataclass(frozen=True)
class PathCall:
    """One call of a path; ``uid`` is unique within the path and never changes."""

    uid: int
    tool: str
    bindings: tuple[Binding, ...] = ()
    inserted: bool = False  # added by Insert: a nested/implicit call the user does not name
    replica_of: int | None = None  # added by fan_out: the same function as call `replica_of`
    independent: bool = False  # added by bundle: a request of its own, no data flow with the path
    shares: int | None = None  # added by bundle: states call `shares`'s values, said once with it

    def bound(self) -> dict[str, Binding]:
        return {b.param: b for b in self.bindings}


@dataclass(frozen=True)
class TurnPlan:
    """One user turn: its calls, and for Split turns what is missing."""

    calls: tuple[PathCall, ...]
    kind: Literal["tool", "clarify"] = "tool"
    missing: Literal["param", "func"] | None = None
    detail: str | None = None  # the missing parameter, or the function that is not offered

    def steps(self) -> list[list[PathCall]]:
        """Assistant steps: a call joins the current step (parallel calls) unless it needs a
        call of that step, in which case it starts the next one."""
        out: list[list[PathCall]] = []
        for c in self.calls:
            sources = {b.source for b in c.bindings}
            if out and not sources & {x.uid for x in out[-1]}:
                out[-1].append(c)
            else:
                out.append([c])
        return out


@dataclass(frozen=True)
class FSP:
    """A function-signature path divided into turns."""

    turns: tuple[TurnPlan, ...]
    log: tuple[str, ...] = field(default=())  # operations applied, in order

    def calls(self, *, executed: bool = True) -> list[PathCall]:
        """Every call in order (without the calls of miss-func turns when ``executed``)."""
        return [c for t in self.turns if not (executed and t.missing == "func") for c in t.calls]

    def to_json(self) -> dict[str, Any]:
        return {
            "turns": [
                {
                    "kind": t.kind,
                    "missing": t.missing,
                    "detail": t.detail,
                    "calls": [
                        {
                            "uid": c.uid,
                            "tool": c.tool,
                            "inserted": c.inserted,
                            **({"replica_of": c.replica_of} if c.replica_of is not None else {}),
                            **({"independent": True} if c.independent else {}),
                            **({"shares": c.shares} if c.shares is not None else {}),
                            "bindings": [
                                {"param": b.param, "source": b.source, "field": b.field}
                                for b in c.bindings
                            ],
                        }
                        for c in t.calls
                    ],
                }
                for t in self.turns
            ],
            "log": list(self.log),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FSP:
        return cls(
            turns=tuple(
                TurnPlan(
                    calls=tuple(
                        PathCall(
                            c["uid"],
                            c["tool"],
                            tuple(Binding(**b) for b in c["bindings"]),
                            c.get("inserted", False),
                            c.get("replica_of"),
                            c.get("independent", False),
                            c.get("shares"),
                        )
                        for c in t["calls"]
                    ),
                    kind=t["kind"],
                    missing=t.get("missing"),
                    detail=t.get("detail"),
                )
                for t in data["turns"]
            ),
            log=tuple(data.get("log", ())),
        )


# --------------------------------------------------------------------------------------
# legality
# --------------------------------------------------------------------------------------


def problems(graph: SignatureGraph, path: FSP | Sequence[PathCall]) -> list[str]:
    """What makes ``path`` illegal (rules 1-4 of the module docstring); empty when legal."""
    calls = path.calls() if isinstance(path, FSP) else list(path)
    out: list[str] = []
    position = {c.uid: i for i, c in enumerate(calls)}
    if len(position) != len(calls):
        out.append("duplicate call uids")
    for i, c in enumerate(calls):
        if c.tool not in graph.fg:  # 1)
            out.append(f"call {c.uid}: unknown function {c.tool!r}")
            continue
        for b in c.bindings:  # 2)
            j = position.get(b.source)
            if j is None or j >= i:
                out.append(f"call {c.uid} ({c.tool}).{b.param} takes a value from a later call")
                continue
            src = calls[j].tool
            if not any(f.field == b.field and f.param == b.param for f in graph.feeds(src, c.tool)):
                out.append(f"{src}.{b.field} → {c.tool}.{b.param} is not an edge of the graph")
        bound = c.bound()
        for param, feeders in graph.prerequisites(c.tool).items():  # 4)
            if param in bound:
                continue
            earlier = [x.tool for x in calls[:i] if x.tool in feeders]
            if earlier:
                out.append(
                    f"call {c.uid} ({c.tool}) asks the user for {param} although "
                    f"{earlier[-1]} (earlier) produces it"
                )
    for c in calls:  # a call that shares values names an earlier call of another function
        if c.shares is not None:
            j = position.get(c.shares)
            if j is None or j >= position[c.uid] or calls[j].tool == c.tool:
                out.append(f"call {c.uid} cannot share the values of call {c.shares}")
    for c in calls:  # a replica repeats its original's function, in the same data flow
        if c.replica_of is not None:
            j = position.get(c.replica_of)
            if j is None or calls[j].tool != c.tool or c.bindings:
                out.append(f"call {c.uid} is not a replica of call {c.replica_of}")
    # 3) a request of its own (bundle) and its replicas share no value with the other calls;
    # the other calls are connected by data flow
    alone = {c.uid for c in calls if c.independent}
    alone |= {c.uid for c in calls if c.replica_of in alone}
    for c in calls:
        if c.independent and (c.bindings or c.replica_of is not None):
            out.append(f"call {c.uid} ({c.tool}) is independent but takes a value from the path")
        if any(b.source in alone for b in c.bindings):
            out.append(f"call {c.uid} ({c.tool}) takes a value from an independent call")
    linked = [c for c in calls if c.uid not in alone]
    if len(linked) > 1:
        links = nx.Graph()
        links.add_nodes_from(c.uid for c in linked)
        links.add_edges_from((b.source, c.uid) for c in linked for b in c.bindings)
        links.add_edges_from(
            (c.replica_of, c.uid)
            for c in linked
            if c.replica_of is not None and c.replica_of in position
        )
        if not nx.is_connected(links):
            out.append("the calls are not connected by data flow")
    return out


# --------------------------------------------------------------------------------------
# binding
# --------------------------------------------------------------------------------------


def _next_uid(calls: Sequence[PathCall]) -> int:
    return max((c.uid for c in calls), default=-1) + 1


def _best(feeds: Sequence[Feed]) -> list[Feed]:
    """Feeds in the order a binding prefers them: fields that are never null, required ids,
    required parameters, then by score."""
    return sorted(
        feeds,
        key=lambda f: (f.nullable, not (f.required and f.id_like), not f.required, -f.score),
    )


def _bind(
    graph: SignatureGraph,
    prior: Sequence[PathCall],
    tool: str,
    rng: random.Random,
    *,
    via: PathCall | None = None,
) -> tuple[Binding, ...]:
    """Bindings for a new call of ``tool`` after ``prior``: at least one from ``via`` (the call
    the walk came from), every prerequisite an earlier call produces (rule 4), and other
    required parameters from earlier calls when an edge offers them."""
    bound: dict[str, Binding] = {}
    if via is not None:
        feeds = _best(graph.feeds(via.tool, tool))
        if not feeds:
            raise OperationError(f"{via.tool} does not feed {tool}")
        first = feeds[0] if feeds[0].required else rng.choice(feeds)
        bound[first.param] = Binding(first.param, via.uid, first.field)
        for f in feeds[1:]:
            if f.param not in bound and f.required and f.id_like and not f.nullable:
                bound[f.param] = Binding(f.param, via.uid, f.field)
    prereq = graph.prerequisites(tool)
    for c in reversed(prior):  # the latest producer first
        for f in _best(graph.feeds(c.tool, tool)):
            if f.param in bound or f.nullable:
                continue
            if f.param in prereq or (f.required and rng.random() < 0.5):
                bound[f.param] = Binding(f.param, c.uid, f.field)
    return tuple(sorted(bound.values(), key=lambda b: b.param))


def _call(
    graph: SignatureGraph,
    prior: Sequence[PathCall],
    tool: str,
    rng: random.Random,
    *,
    via: PathCall | None = None,
    uid: int | None = None,
    inserted: bool = False,
) -> PathCall:
    return PathCall(
        _next_uid(prior) if uid is None else uid,
        tool,
        _bind(graph, prior, tool, rng, via=via),
        inserted,
    )


def _settle(graph: SignatureGraph, calls: Sequence[PathCall]) -> dict[int, PathCall]:
    """Rule 4 after calls were added: every call takes each prerequisite an earlier call now
    produces (the latest producer). Returns the calls by uid, rebound where needed."""
    out: dict[int, PathCall] = {}
    for i, c in enumerate(calls):
        bound = c.bound()
        extra = []
        for param in graph.prerequisites(c.tool):
            if param in bound:
                continue
            for prev in reversed(calls[:i]):
                feed = next(
                    (
                        f
                        for f in graph.feeds(prev.tool, c.tool)
                        if f.param == param and not f.nullable
                    ),
                    None,
                )
                if feed is not None:
                    extra.append(Binding(param, prev.uid, feed.field))
                    break
        if extra:
            c = replace(c, bindings=tuple(sorted((*c.bindings, *extra), key=lambda b: b.param)))
        out[c.uid] = c
    return out


# --------------------------------------------------------------------------------------
# paths
# --------------------------------------------------------------------------------------


def random_walk(
    graph: SignatureGraph,
    rng: random.Random,
    *,
    steps: int = 7,
    start: str | None = None,
) -> list[PathCall]:
    """A seeded walk of up to ``steps`` calls (Magnet's S = 7): each step moves to a
    successor of the previous call, preferring functions not yet visited; it stops early at a
    function with no successor."""
    if steps < 1:
        raise OperationError("a walk needs at least one step")
    if start is None:
        starts = [f for f in graph.functions if graph.fg.out_degree(f) > 0] or graph.functions
        if not starts:
            raise OperationError("the graph has no functions")
        start = rng.choice(sorted(starts))
    elif start not in graph.fg:
        raise OperationError(f"unknown function {start!r}")
    path = [PathCall(0, start, _bind(graph, [], start, rng))]
    while len(path) < steps:
        cur = path[-1]
        succ = [s for s in graph.successors(cur.tool) if s != cur.tool]
        if not succ:
            break
        seen = {c.tool for c in path}
        weights = [1.0 if s not in seen else 0.25 for s in succ]
        nxt = rng.choices(succ, weights=weights)[0]
        path.append(_call(graph, path, nxt, rng, via=cur))
    return path


def magnify(
    graph: SignatureGraph,
    path: Sequence[PathCall],
    index: int,
    rng: random.Random,
    *,
    depth: int = 2,
) -> list[PathCall]:
    """MAGNIFY: expand ``path[index]`` into a finer-grained chain: for each of its required
    parameters that no call binds and some function produces, a call of such a producer is
    inserted before it and bound to it; the new calls are magnified in turn, ``depth``
    levels deep."""
    path = list(path)
    target = path[index]
    uid = [_next_uid(path)]

    def expand(call: PathCall, prior: list[PathCall], level: int) -> list[PathCall]:
        """The new calls feeding ``call`` (in execution order) and ``call`` rebound."""
        if level == 0:
            return [call]
        bound = call.bound()
        open_params: dict[str, list[Feed]] = {}
        for f in graph.feeds_into(call.tool):
            if f.required and f.param not in bound and f.source != call.tool:
                open_params.setdefault(f.param, []).append(f)
        chain: list[PathCall] = []
        new_bindings = list(call.bindings)
        used: set[str] = {c.tool for c in prior} | {call.tool}
        for param in sorted(open_params, key=lambda p: (not open_params[p][0].id_like, p)):
            feeds = open_params[param]
            fresh = [f for f in feeds if f.source not in used] or feeds
            pick = rng.choice(fresh)
            feeder = PathCall(uid[0], pick.source, _bind(graph, prior + chain, pick.source, rng))
            uid[0] += 1
            used.add(pick.source)
            sub = expand(feeder, prior + chain, level - 1)
            chain += sub
            new_bindings.append(Binding(param, sub[-1].uid, pick.field))
            if len(new_bindings) - len(call.bindings) >= 2:  # two feeders per call at most
                break
        return [*chain, replace(call, bindings=tuple(sorted(new_bindings, key=lambda b: b.param)))]

    chain = expand(target, path[:index], depth)
    if len(chain) == 1:
        raise OperationError(f"{target.tool} has no unbound required parameter a tool produces")
    out = [*path[:index], *chain, *path[index + 1 :]]
    settled = _settle(graph, out)
    return [settled[c.uid] for c in out]


def connect(
    graph: SignatureGraph,
    rng: random.Random,
    source: str | Sequence[PathCall],
    target: str,
    *,
    max_hops: int = 4,
) -> list[PathCall]:
    """CONNECT: a legal path from ``source`` (a function, or a path whose last call is the
    start) to ``target``, which it has no direct edge to, through intermediate tools: one of
    the shortest routes of the function graph, chosen by the seed."""
    prior = list(source) if not isinstance(source, str) else []
    if isinstance(source, str):
        if source not in graph.fg:
            raise OperationError(f"unknown function {source!r}")
        prior = [PathCall(0, source, _bind(graph, [], source, rng))]
    start = prior[-1].tool
    if target not in graph.fg:
        raise OperationError(f"unknown function {target!r}")
    if graph.fg.has_edge(start, target) or start == target:
        raise OperationError(f"{start} feeds {target} directly; CONNECT joins unlinked functions")
    try:
        routes = list(_shortest_routes(graph.fg, start, target, limit=32))
    except nx.NetworkXNoPath:
        raise OperationError(f"no path from {start} to {target}") from None
    routes = [r for r in routes if len(r) - 1 <= max_hops]
    if not routes:
        raise OperationError(f"no path from {start} to {target} within {max_hops} hops")
    route = rng.choice(routes)
    path = list(prior)
    for tool in route[1:]:
        path.append(_call(graph, path, tool, rng, via=path[-1]))
    return path


def _shortest_routes(g: nx.DiGraph, source: str, target: str, *, limit: int) -> list[list[str]]:
    out = []
    for route in nx.all_shortest_paths(g, source, target):
        out.append(route)
        if len(out) >= limit:
            break
    return sorted(out)


# --------------------------------------------------------------------------------------
# turns
# --------------------------------------------------------------------------------------


def to_turns(path: Sequence[PathCall]) -> FSP:
    """Magnet's initial FSP: one turn per call."""
    return FSP(turns=tuple(TurnPlan(calls=(c,)) for c in path), log=("walk",))


def merge(fsp: FSP, rng: random.Random, *, p: float = 0.3) -> FSP:
    """Merge: each pair of adjacent tool turns becomes one multi-call turn with probability
    ``p`` (Magnet: 0.3); a merged turn is not merged again."""
    out: list[TurnPlan] = []
    turns = list(fsp.turns)
    i = merged = 0
    while i < len(turns):
        a = turns[i]
        if (
            i + 1 < len(turns)
            and a.kind == "tool"
            and turns[i + 1].kind == "tool"
            and rng.random() < p
        ):
            out.append(TurnPlan(calls=a.calls + turns[i + 1].calls))
            merged += 1
            i += 2
        else:
            out.append(a)
            i += 1
    return FSP(turns=tuple(out), log=(*fsp.log, f"merge:{merged}"))


def bundle(
    graph: SignatureGraph,
    fsp: FSP,
    rng: random.Random,
    *,
    p: float = 0.3,
    max_calls: int | None = None,
    most: int = 1,
    tries: int = 8,
    share_p: float = 0.0,
) -> FSP:
    """Bundle: requests in a turn that share nothing with the rest ("find flights to Oslo,
    and convert 30 euros to dollars": BFCL's *parallel_multiple*, where one turn calls
    several functions none of which waits for another). With probability ``p``, 1 to
    ``most`` calls (a number drawn uniformly; none drawn when ``most`` is 1) of functions the
    path does not use, each taking no value from it and giving none (``independent``), are
    put one by one at the start of a random tool turn, so that the turn's first step calls
    them beside the turn's first call. A function is drawn until the path stays legal (rule
    4: no earlier call produces a value it needs, it produces none a later call needs;
    ``tries`` draws); none is added when none fits, and no more once the path has
    ``max_calls`` calls. With probability ``share_p`` an added call *shares* instead
    (:attr:`PathCall.shares`): a function whose required parameters the turn's first call
    also takes (and is not given from another call) goes right after it, to be given the
    same values where its parameters are named alike: "the temperature and the humidity in
    Boston", "the median and the mode of 3, 4, 5" (BFCL's parallel_multiple questions do
    this in 61 of 200); where no function fits, one is added as above. Not in Magnet, whose
    walks connect every call of a task by data flow."""
    if rng.random() >= p:
        return fsp
    for _ in range(rng.randint(1, most) if most > 1 else 1):
        if max_calls is not None and len(fsp.calls()) >= max_calls:
            break
        added = None
        if share_p and rng.random() < share_p:
            added = _share_one(graph, fsp, rng, tries)
        added = added or _bundle_one(graph, fsp, rng, tries)
        if added is None:
            break
        fsp = added
    return fsp


def _bundle_one(graph: SignatureGraph, fsp: FSP, rng: random.Random, tries: int) -> FSP | None:
    """One independent call at the start of a random tool turn, or None when none fits."""
    at = [i for i, t in enumerate(fsp.turns) if t.kind == "tool" and t.missing is None]
    every = fsp.calls(executed=False)
    spare = sorted(set(graph.functions) - {c.tool for c in every})
    if not at or not spare:
        return None
    i = rng.choice(at)
    uid = _next_uid(every)
    calls = fsp.turns[i].calls
    return _first_legal(
        graph,
        fsp,
        i,
        rng.sample(spare, min(tries, len(spare))),
        lambda tool: (PathCall(uid, tool, independent=True), *calls),
        "bundle:1",
    )


def _share_one(graph: SignatureGraph, fsp: FSP, rng: random.Random, tries: int) -> FSP | None:
    """One call that shares the values of a tool turn's first call, right after it (a
    function the path does not use whose required parameters that call takes from the user),
    or None when none fits."""
    at = [
        i
        for i, t in enumerate(fsp.turns)
        if t.kind == "tool" and t.missing is None and not t.calls[0].inserted
    ]
    if not at:
        return None
    every = fsp.calls(executed=False)
    used = {c.tool for c in every}
    i = rng.choice(at)
    first, *rest = fsp.turns[i].calls
    stated = set(graph.spec(first.tool).properties()) - set(first.bound())
    fits = [
        f
        for f in graph.functions
        if f not in used and len(needs := set(graph.spec(f).required())) > 0 and needs <= stated
    ]
    uid = _next_uid(every)
    return _first_legal(
        graph,
        fsp,
        i,
        rng.sample(fits, min(tries, len(fits))),
        lambda tool: (first, PathCall(uid, tool, independent=True, shares=first.uid), *rest),
        "bundle:share",
    )


def _first_legal(
    graph: SignatureGraph,
    fsp: FSP,
    i: int,
    tools: list[str],
    calls_with: Callable[[str], tuple[PathCall, ...]],
    op: str,
) -> FSP | None:
    """``fsp`` with turn ``i``'s calls replaced by ``calls_with(tool)`` for the first of
    ``tools`` that keeps the path legal (logged as ``op``), or None when none does."""
    for tool in tools:
        turns = list(fsp.turns)
        turns[i] = replace(turns[i], calls=calls_with(tool))
        out = FSP(turns=tuple(turns), log=(*fsp.log, op))
        if not problems(graph, out):
            return out
    return None


def fan_out(fsp: FSP, rng: random.Random, *, p: float = 0.3, copies: int = 2) -> FSP:
    """Fan-out: the same function called several times in one turn with other values ("the
    weather in Boston and in Oslo": BFCL's *parallel* category, APIGen's parallel calls).
    With probability ``p`` per tool turn, one of its calls that takes no value from another
    call and gives none to one gets 1 to ``copies`` replicas right after it, each marked
    ``replica_of`` (the values are drawn per call when the path is executed, so they differ).
    Not in Magnet, whose operations never repeat a function in one turn."""
    feeding = {b.source for c in fsp.calls(executed=False) for b in c.bindings}
    uid = _next_uid(fsp.calls(executed=False))
    turns: list[TurnPlan] = []
    fanned = 0
    for t in fsp.turns:
        free = [c for c in t.calls if not c.bindings and c.uid not in feeding and not c.inserted]
        if t.kind != "tool" or not free or rng.random() >= p:
            turns.append(t)
            continue
        target = rng.choice(free)
        extra = []
        for _ in range(rng.randint(1, max(1, copies))):
            extra.append(PathCall(uid, target.tool, replica_of=target.uid))
            uid += 1
        at = t.calls.index(target) + 1
        turns.append(replace(t, calls=(*t.calls[:at], *extra, *t.calls[at:])))
        fanned += 1
    return FSP(turns=tuple(turns), log=(*fsp.log, f"fan_out:{fanned}"))


def insert(
    graph: SignatureGraph,
    fsp: FSP,
    rng: random.Random,
    *,
    p: float = 0.5,
    long_range: float = 0.3,
    accept: Callable[[str, str], bool] | None = None,
) -> FSP:
    """Insert: for the last call of each tool turn, with probability ``p``, a function it
    feeds (a nested or implicit call, e.g. a unit conversion the user implies) is appended to
    the same turn or, with probability ``long_range``, to the end of a later turn (a long
    dependency). ``accept(source, target)`` is Magnet's LLM check of the nested relation
    (default: every graph edge qualifies)."""
    turns = [list(t.calls) for t in fsp.turns]
    kinds = list(fsp.turns)
    inserted = 0
    for i, plan in enumerate(fsp.turns):
        if plan.kind != "tool" or plan.missing == "func" or not plan.calls or rng.random() >= p:
            continue
        last = turns[i][-1]
        here = {c.tool for c in turns[i]}
        succ = [s for s in graph.successors(last.tool) if s not in here]
        if accept is not None:
            succ = [s for s in succ if accept(last.tool, s)]
        if not succ:
            continue
        tool = rng.choice(succ)
        later = [j for j in range(i + 1, len(turns)) if kinds[j].kind == "tool"]
        at = rng.choice(later) if later and rng.random() < long_range else i
        flat = [c for ts in turns[: at + 1] for c in ts]
        everything = [c for ts in turns for c in ts]
        call = PathCall(
            _next_uid(everything),
            tool,
            _bind(graph, flat, tool, rng, via=last),
            inserted=True,
        )
        turns[at].append(call)
        inserted += 1
    plans = [replace(plan, calls=tuple(calls)) for plan, calls in zip(kinds, turns, strict=True)]
    executed = [c for t in plans if t.missing != "func" for c in t.calls]
    settled = _settle(graph, executed)
    out = tuple(replace(t, calls=tuple(settled.get(c.uid, c) for c in t.calls)) for t in plans)
    return FSP(turns=out, log=(*fsp.log, f"insert:{inserted}"))


def split(
    graph: SignatureGraph,
    fsp: FSP,
    rng: random.Random,
    *,
    kind: Literal["param", "func"] | None = None,
    turn: int | None = None,
) -> FSP:
    """Split: one turn whose right answer is a clarifying question and no call.

    ``param``: a tool turn whose first call has a required parameter the user must give (not
    bound to an earlier call) becomes a ``clarify`` turn missing it (``turn``: only that
    turn). ``func``: a new turn asking for a function the path does not use, which the task
    will not offer, is inserted after a random turn. ``kind=None`` picks one that applies."""
    options: list[str] = [kind] if kind else ["param", "func"]
    rng.shuffle(options)
    for k in options:
        if k == "param":
            cands = []
            for i, t in enumerate(fsp.turns):
                if t.kind != "tool" or not t.calls or turn not in (None, i):
                    continue
                first = t.calls[0]
                spec = graph.spec(first.tool)
                free = [p for p in spec.required() if p not in first.bound()]
                cands += [(i, p) for p in free]
            if not cands:
                continue
            i, param = rng.choice(cands)
            turns = list(fsp.turns)
            turns[i] = replace(turns[i], kind="clarify", missing="param", detail=param)
            return FSP(turns=tuple(turns), log=(*fsp.log, f"split:param:{i}"))
        used = {c.tool for c in fsp.calls(executed=False)}
        spare = sorted(f for f in graph.functions if f not in used)
        if not spare:
            continue
        tool = rng.choice(spare)
        at = rng.randint(1, len(fsp.turns)) if fsp.turns else 0  # after a random turn
        uid = _next_uid(fsp.calls(executed=False))
        turn = TurnPlan(calls=(PathCall(uid, tool),), kind="clarify", missing="func", detail=tool)
        turns = [*fsp.turns[:at], turn, *fsp.turns[at:]]
        return FSP(turns=tuple(turns), log=(*fsp.log, f"split:func:{at}"))
    raise OperationError(f"nothing to split ({kind or 'param or func'})")

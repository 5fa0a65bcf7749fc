"""Executable ground truth for a planned call path: argument values grounded in the
environment's state, outputs threaded into later inputs, every call run for real.

A graph path says *which* functions run and which parameter takes which earlier return field;
it has no values. Magnet writes them with an LLM and executes each turn before the next
("forward translation"; Yin et al. 2025, "Magnet: Multi-turn Tool-use Data Synthesis and
Distillation via Graph Translation", arXiv:2503.07826, §3). Offline, values come from the
domain itself, and the calls are executed in order:

1) value pools (:class:`ValuePool`): every value the environment's state holds, indexed by
   field name (``email``, ``order_id``, ``city``; nested fields by their last name, e.g.
   ``address.zip`` as ``zip``), the state's records (for joint draws), and the values the
   domain's hand-written example tasks pass to each parameter;
2) arguments of one call (:meth:`ValuePool.arguments`): a bound parameter takes one of the
   values its field holds in the earlier output (``flights[].flight_id``: one of the listed
   flights); the other required parameters are drawn together from one state record that
   holds several of them (``origin``, ``destination`` and ``date`` from one flight, so the
   search finds it), else from the pool of that name, the example tasks, the ``enum``, or a
   value of the schema's type (dates from the state's dates, numbers within the bounds; a
   string that people would write as a place, a name, an email or a search phrase, where
   the parameter's name says so: ``envs.values.everyday`` and its kinds, else two or three
   common words; integers and numbers as people write them, ``envs.vocab``);
   an optional parameter is given with probability ``optional_p``. An environment that
   gives value hints (``Environment.value_hints()``: a real server with no state to read)
   also offers, for each parameter, the values its spec names and the values of its kind
   that the environment is known to hold, and invents values of the parameter's kind (an
   IANA zone, a folder of the server, SQL over its tables; :mod:`trajsynth.envs.values`);
3) execution (:func:`execute_plan`): each call runs in the environment; a call that returns
   an error, or whose output lacks a field a later call needs, is undone (snapshot/restore)
   and drawn again, up to ``attempts`` times (in the second half of them, drawn strings may
   be replaced by new ones like them: a tool that creates a folder needs a path that does
   not exist yet); so is a replica (the same function asked again in one turn) whose values
   repeat its original's. A replica with ``vary`` n > 0 keeps its original's stated values
   but 1 to n of them, drawn anew (in the first half of its attempts; all drawn anew in the
   second), as people ask again: "the same for Rome", "Taylor Swift and Maroon 5, for 20
   and 15 minutes respectively" (BFCL's parallel questions share all values but one or
   two); a call with ``share`` (another function beside a call, :func:`~trajsynth.graph.ops.
   bundle`) takes that call's stated values where its parameters are named alike, and no
   optional value besides (again in the first half of its attempts): "the temperature and
   the humidity in Boston"; then the plan fails with the reason (:class:`PlanFailed`: the
   last error's message included), which the stage counts. With value hints, the values a
   call was given when it succeeded (and what a read-only call answered) join the pools:
   what the environment accepted seeds the next calls.

The result is each call's arguments, output and bindings (``{"call", "param", "from_call",
"path"}``, the same record as the example tasks' ``extra["bindings"]``) and the final state.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...core.jsonvalues import json_fields
from ...envs import vocab
from ...envs.base import Environment
from ...envs.spec import ToolSpec
from ...envs.values import Known, everyday, fits_kind, invent, kind, paths_for, suggested
from ...envs.verifiers.schema import type_ok
from ...graph.ops import PathCall
from ...graph.signature import SignatureGraph, resolve_field
from ..context import Metrics

JSON_TYPES = frozenset({"string", "integer", "number", "boolean", "array", "object", "null"})

__all__ = [
    "ExecutedCall",
    "FeedFeedback",
    "PlanFailed",
    "PlannedCall",
    "ValuePool",
    "execute_plan",
]

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TIME = re.compile(r"^\d{2}:\d{2}$")


class PlanFailed(Exception):
    """A planned call could not be made to succeed; ``reason`` is a short category."""

    def __init__(self, reason: str, detail: str, index: int = -1) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.index = index  # the planned call that failed


@dataclass
class PlannedCall:
    """One call to make: its tool, the parameters taken from earlier calls (``param →
    (index of the earlier call, field path)``), and what it must not be given."""

    tool: str
    bindings: dict[str, tuple[int, str]] = field(default_factory=dict)
    omit: frozenset[str] = frozenset()
    execute: bool = True  # False: arguments only (a function the task will not offer)
    differ_from: tuple[int, ...] = ()  # earlier calls whose arguments this one must not repeat
    vary: int = 0  # > 0: keep the first of differ_from's stated values but 1..vary of them
    share: int | None = None  # an earlier call whose stated values this one takes where it can


@dataclass
class ExecutedCall:
    tool: str
    arguments: dict[str, Any]
    output: Any
    bindings: list[dict[str, Any]]
    user_values: dict[str, Any]  # the arguments the user must state (not taken from outputs)
    attempts: int = 1
    executed: bool = True  # False: a function the task will not offer (arguments only)


def _flat(record: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in record.items():
        if isinstance(v, dict):
            for k2, v2 in v.items():
                if not isinstance(v2, (dict, list)):
                    out.setdefault(k2, v2)
        elif v is not None and v != "":
            out[k] = v
    return out


class ValuePool:
    """Step 1: values by field name, the state's records, and example-task values."""

    def __init__(
        self,
        state: dict[str, Any],
        examples: Iterable[tuple[str, dict[str, Any]]] = (),
        hints: dict[str, Any] | None = None,
    ):
        #: hints given: spec-named and kind values are offered, accepted values learned
        self.learns = hints is not None
        self.known = Known.from_hints(hints)
        self.by_name: dict[str, list[Any]] = {}
        self.records: list[dict[str, Any]] = []
        for rows in state.values():
            if not isinstance(rows, dict):
                continue
            for rec in rows.values():
                if isinstance(rec, dict):
                    for k, v in json_fields(rec):  # scalars and lists of scalars, by name
                        if isinstance(v, list):
                            if v and not any(isinstance(x, (dict, list)) for x in v):
                                self.by_name.setdefault(k, []).append(v)
                        elif not isinstance(v, dict) and v is not None and v != "":
                            self.by_name.setdefault(k, []).append(v)
                    self.records.append(_flat(rec))
        for k, vals in self.by_name.items():
            self.by_name[k] = _dedup(vals)
        self.dates = sorted(
            {
                v
                for vals in self.by_name.values()
                for v in vals
                if isinstance(v, str) and _DATE.match(v)
            }
        )
        self.examples: dict[tuple[str, str], list[Any]] = {}
        self.example_params: dict[str, list[Any]] = {}
        for tool, args in examples:
            for k, v in args.items():
                if isinstance(v, str) and "{{" in v:
                    continue
                self.examples.setdefault((tool, k), []).append(v)
                self.example_params.setdefault(k, []).append(v)
        self.examples = {key: _dedup(vals) for key, vals in self.examples.items()}
        self.example_params = {key: _dedup(vals) for key, vals in self.example_params.items()}

    # -- 2) values -------------------------------------------------------------------------
    def candidates(self, tool: str, param: str, schema: dict[str, Any]) -> list[Any]:
        """Values a user could give for ``param``: state values of that name, then the
        example tasks', filtered by the schema's type and enum."""
        out = list(self.by_name.get(param, []))
        out += self.examples.get((tool, param), []) + self.example_params.get(param, [])
        if not self.learns:
            return [v for v in _dedup(out) if _fits(v, schema)]
        k = kind(param, schema)
        out += suggested(param, schema) + self.known.for_param(param)
        if k == "path":
            out += paths_for(param, schema, self.known)
        return [v for v in _dedup(out) if _fits(v, schema) and fits_kind(v, k, schema)]

    def learn(self, spec: ToolSpec, args: dict[str, Any], output: Any, *, read_only: bool) -> None:
        """Values a call succeeded with join the pools (and, for a read-only call, the values
        its output holds); only with hints."""
        if not self.learns:
            return
        for k, v in args.items():
            if isinstance(v, (str, int, float)) and not isinstance(v, bool):
                bag = self.by_name.setdefault(k, [])
                if v not in bag:
                    bag.append(v)
        if read_only and isinstance(output, (dict, list)):
            for k, v in json_fields(output):
                if isinstance(v, (str, int, float)) and not isinstance(v, bool) and v != "":
                    bag = self.by_name.setdefault(k, [])
                    if v not in bag and len(bag) < 200:
                        bag.append(v)

    def invent(self, param: str, schema: dict[str, Any], rng: random.Random) -> Any:
        """A value of the schema's type when no pool has one."""
        if schema.get("enum"):
            return rng.choice(list(schema["enum"]))
        if self.learns and schema.get("type") in ("string", None):
            made = invent(param, schema, rng, self.known)
            if made is not None:
                return made
        types = schema.get("type")
        t = (
            types
            if isinstance(types, str)
            else next((x for x in types or [] if x != "null"), "string")
        )
        desc = f"{param} {schema.get('description', '')}".lower()
        if t == "integer":  # as people write them: 3, 45, 1200, 1990 (1-5 before)
            return vocab.integer_like(param, schema, rng)
        if t == "number":
            return vocab.number_like(param, schema, rng)
        if t == "boolean":
            return rng.random() < 0.5
        if t == "array":
            items = schema["items"] if isinstance(schema.get("items"), dict) else {}
            single = param[:-1] if param.endswith("s") else param
            pool = self.candidates("", single, items) or self.candidates(
                "", single.removesuffix("_id") + "_id", items
            )
            if pool:
                return rng.sample(pool, min(len(pool), rng.randint(1, 2)))
            return self._invent_list(single, schema, items, rng)
        if t == "object":  # the required fields, each drawn like a parameter of its name
            props = schema["properties"] if isinstance(schema.get("properties"), dict) else {}
            required = [r for r in schema.get("required") or [] if r in props]
            return {r: self._draw(r, props[r], rng) for r in required}
        if "date" in desc or "yyyy-mm-dd" in desc:
            return rng.choice(self.dates) if self.dates else vocab.date_like(rng)
        if "hh:mm" in desc or "time" in param:
            return f"{rng.choice([9, 10, 11, 13, 14, 15, 16]):02d}:{rng.choice(['00', '30'])}"
        # a value people pass where the name says what it holds (a city, a username, an
        # email), else a few words from a large list: a quarter of a benchmark run's call
        # values were pairs of eight stock words ("budget draft" for a city) before
        made = everyday(param, schema, rng) or (None if self.learns else invent(param, schema, rng))
        return made if made is not None else vocab.phrase(rng)

    def _invent_list(
        self, single: str, schema: dict[str, Any], items: dict[str, Any], rng: random.Random
    ) -> list[Any]:
        """A list of invented items: several numbers or words where the items are scalars
        (BFCL states "[3, 4, 5, 6, 4]"; a list was always one item before), within
        ``minItems``..``maxItems``; distinct choices of an enum; one object or list."""
        lo = max(1, int(schema.get("minItems") or 1))
        hi = max(lo, min(int(schema.get("maxItems") or 6), 6))
        if isinstance(items.get("enum"), list) and items["enum"]:
            choices = list(items["enum"])
            return rng.sample(choices, min(len(choices), rng.randint(lo, max(lo, min(hi, 3)))))
        if items.get("type") not in ("integer", "number", "string"):
            return [self.invent(single, items, rng)]
        n = rng.randint(lo, hi) if rng.random() < 0.7 else lo
        out: list[Any] = []
        for _ in range(n * 3):
            item = self.invent(single, items, rng)
            if item not in out or items.get("type") != "string":  # numbers may repeat
                out.append(item)
            if len(out) == n:
                break
        return out

    def _draw(self, param: str, schema: dict[str, Any], rng: random.Random) -> Any:
        pool = self.candidates("", param, schema)
        return rng.choice(pool) if pool else self.invent(param, schema, rng)

    def arguments(
        self,
        spec: ToolSpec,
        fixed: dict[str, Any],
        rng: random.Random,
        *,
        omit: Iterable[str] = (),
        optional_p: float = 0.3,
        fresh: float = 0.0,
    ) -> dict[str, Any]:
        """Step 2 for one call: ``fixed`` (bound values) plus drawn values; with probability
        ``fresh`` a drawn string becomes a new one like it (a new file in the same folder, a
        new name), for tools that must create what does not exist yet."""
        props = spec.properties()
        omit = set(omit)
        required = [p for p in spec.required() if p not in fixed and p not in omit]
        optional = [
            p
            for p in spec.optional()
            if p not in fixed and p not in omit and rng.random() < optional_p
        ]
        args = dict(fixed)
        want = [p for p in props if p in required or p in optional]
        # joint draw from the record that holds most of the wanted values
        best: list[dict[str, Any]] = []
        cover = 1
        for rec in self.records:
            n = sum(1 for p in want if p in rec and _fits(rec[p], props.get(p) or {}))
            if n > cover:
                best, cover = [rec], n
            elif n == cover and n > 1:
                best.append(rec)
        if best:
            rec = rng.choice(best)
            for p in want:
                if p in rec and _fits(rec[p], props.get(p) or {}):
                    args[p] = rec[p]
        for p in want:
            if p in args:
                continue
            schema = props.get(p) or {}
            pool = self.candidates(spec.name, p, schema)
            if pool and self.learns and rng.random() < 0.3:  # new values too, not only known
                pool = []
            args[p] = rng.choice(pool) if pool else self.invent(p, schema, rng)
        for p in want:
            if p not in fixed and fresh and rng.random() < fresh:
                args[p] = _fresh(args[p], props.get(p) or {}, rng)
        return {p: args[p] for p in props if p in args} | {
            k: v for k, v in args.items() if k not in props
        }


def _fresh(value: Any, schema: dict[str, Any], rng: random.Random) -> Any:
    """A new value like ``value`` (a sibling path, a numbered name); enums and non-strings
    are kept."""
    if not isinstance(value, str) or "enum" in schema or _DATE.match(value) or _TIME.match(value):
        return value
    word = vocab.phrase(rng, 1)
    if "/" in value:
        parent, _, leaf = value.rstrip("/").rpartition("/")
        ext = leaf[leaf.rfind(".") :] if "." in leaf[1:] else ""
        return f"{parent or ''}/{word}_{rng.randint(2, 99)}{ext}"
    return f"{value}_{rng.randint(2, 99)}"


def _dedup(values: Iterable[Any]) -> list[Any]:
    seen: set[str] = set()
    out = []
    for v in values:
        key = repr(v)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def _fits(value: Any, schema: dict[str, Any]) -> bool:
    if not isinstance(schema, dict):
        return True
    if "enum" in schema and schema["enum"] and value not in schema["enum"]:
        return False
    t = schema.get("type")
    kinds = [t] if isinstance(t, str) else [x for x in t or [] if isinstance(x, str)]
    if not kinds:
        return True
    if not any(k not in JSON_TYPES or type_ok(value, k) for k in kinds):  # unknown: no check
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return False
        if "maximum" in schema and value > schema["maximum"]:
            return False
    if isinstance(value, str) and _DATE.match(value):
        try:
            dt.date.fromisoformat(value)
        except ValueError:
            return False
    return True


def _narrow(value: Any, param: str, schema: dict[str, Any]) -> list[Any]:
    """The values inside ``value`` (an earlier output) that ``param`` can take: ``value``
    itself when it fits, else, from a result that does not (a record list, a JSON text or a
    Python literal, lines of text), its scalars, those under a name the parameter shares
    (``table_name`` ← ``name``) first."""
    blob = isinstance(value, str) and ("\n" in value or value.strip()[:1] in ("[", "{"))
    if _fits(value, schema) and not blob:
        return [value]
    if isinstance(value, str):
        text = value.strip()
        parsed: Any = None
        for parse in (json.loads, ast.literal_eval):
            try:
                parsed = parse(text)
                break
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
        if parsed is None or isinstance(parsed, str):
            lines = [ln.strip().lstrip("*+- ").strip() for ln in text.splitlines()]
            words = [ln for ln in lines if ln and " " not in ln and len(ln) <= 80]
            return [w for w in _dedup(words) if _fits(w, schema)]
        value = parsed
    if not isinstance(value, (dict, list)):
        return []
    wanted = set(param.lower().replace("-", "_").split("_")) | {param.lower()}
    named: list[Any] = []
    other: list[Any] = []
    for key, v in json_fields({"_": value}):
        if key == "_" or isinstance(v, (dict, list)) or v is None or not _fits(v, schema):
            continue
        parts = set(str(key).lower().split("_")) | {str(key).lower()}
        (named if parts & wanted else other).append(v)
    return _dedup(named) or _dedup(other)


def _kept(original: ExecutedCall, vary: int, rng: random.Random) -> dict[str, Any]:
    """The stated values of ``original`` a replica keeps: all but 1 to ``vary`` of them."""
    stated = sorted(original.user_values)
    if len(stated) < 2:
        return {}
    redrawn = set(rng.sample(stated, rng.randint(1, min(vary, len(stated)))))
    return {k: original.user_values[k] for k in stated if k not in redrawn}


def _shared(other: ExecutedCall, spec: ToolSpec) -> dict[str, Any]:
    """The values ``other`` was told that ``spec`` takes under the same name (and type)."""
    props = spec.properties()
    return {k: v for k, v in other.user_values.items() if k in props and _fits(v, props[k] or {})}


def execute_plan(
    env: Environment,
    plan: Sequence[PlannedCall],
    tools: dict[str, ToolSpec],
    pool: ValuePool,
    rng: random.Random,
    *,
    attempts: int = 8,
    optional_p: float = 0.3,
) -> list[ExecutedCall]:
    """Step 3: run ``plan`` in ``env`` (already reset), call by call."""
    needed: dict[int, set[str]] = {}
    for c in plan:
        for src, path in c.bindings.values():
            needed.setdefault(src, set()).add(path)
    done: list[ExecutedCall] = []
    for i, planned in enumerate(plan):
        spec = tools.get(planned.tool)
        if spec is None:
            raise PlanFailed("unknown_tool", planned.tool, i)
        last = "no attempt"
        for attempt in range(attempts):
            fixed: dict[str, Any] = {}
            bindings: list[dict[str, Any]] = []
            for param, (src, path) in sorted(planned.bindings.items()):
                schema = spec.properties().get(param) or {}
                values = [
                    (c, n) for c, v in resolve_field(done[src].output, path)
                    for n in _narrow(v, param, schema)
                ]  # fmt: skip
                if not values:
                    raise PlanFailed(
                        "no_value",
                        f"{done[src].tool}.{path} is empty for {planned.tool}.{param}",
                        i,
                    )
                concrete, value = values[0] if attempt == 0 else rng.choice(values)
                fixed[param] = value
                bindings.append({"call": i, "param": param, "from_call": src, "path": concrete})
            kept: dict[str, Any] = {}
            omit = planned.omit
            if planned.vary and planned.differ_from and attempt < attempts // 2:
                original = done[planned.differ_from[0]]
                kept = _kept(original, planned.vary, rng)
                if kept:  # and no optional value its original went without
                    omit = omit | (frozenset(spec.properties()) - set(original.arguments))
            elif planned.share is not None and attempt < attempts // 2:
                kept = _shared(done[planned.share], spec)
                if kept:  # nothing the call beside it was not given either
                    omit = omit | (frozenset(spec.optional()) - set(kept))
            args = pool.arguments(
                spec,
                kept | fixed,
                rng,
                omit=omit,
                optional_p=optional_p,
                fresh=0.0 if attempt < attempts // 2 else 0.5,
            )
            user_values = {k: v for k, v in args.items() if k not in fixed}
            if any(done[j].arguments == args for j in planned.differ_from):
                last = f"{planned.tool}: the same values as an earlier call"
                continue
            if not planned.execute:
                done.append(
                    ExecutedCall(
                        planned.tool, args, None, bindings, user_values, attempt + 1, False
                    )
                )
                break
            snap = env.snapshot()
            result = env.call(planned.tool, args)
            if not result.ok:
                message = str((result.error or {}).get("message") or "")[:200]
                last = f"{planned.tool}: {result.category}" + (f" ({message})" if message else "")
                env.restore(snap)
                continue
            pool.learn(spec, args, result.output, read_only=bool(spec.extra.get("read_only")))
            missing = [p for p in needed.get(i, ()) if not resolve_field(result.output, p)]
            if missing:
                last = f"{planned.tool}: output has no {missing[0]}"
                env.restore(snap)
                continue
            done.append(
                ExecutedCall(planned.tool, args, result.output, bindings, user_values, attempt + 1)
            )
            break
        else:
            reason = "call_failed" if ": " in last and "output has no" not in last else "no_value"
            raise PlanFailed(reason, f"{last} after {attempts} attempts", i)
    return done


class FeedFeedback:
    """Execution feedback on a signature graph: a feed (an output field bound to a later
    parameter) whose calls failed ``prune_after`` times and never worked is removed from the
    graph (``graph.pruned_feeds``): its values never work there. Magnet refines its graph this
    way, HardGen its API graph."""

    def __init__(self, prune_after: int) -> None:
        self.prune_after = prune_after
        self._feeds: dict[str, list[int]] = {}  # feed → [successes, failures]

    def record(
        self,
        graph: SignatureGraph,
        path: list[PathCall],
        failed: int,
        *,
        ok: bool,
        metrics: Metrics,
    ) -> None:
        """Count the feeds of ``path`` run up to call ``failed`` (the one that failed, unless
        ``ok``) and prune the feeds that only ever failed."""
        tool_of = {c.uid: c.tool for c in path}
        for i, c in enumerate(path[: failed + 1]):
            for b in c.bindings:
                key = (tool_of[b.source], b.field, c.tool, b.param)
                stats = self._feeds.setdefault(graph.toolset.name + "|" + repr(key), [0, 0])
                if ok or i < failed:
                    stats[0] += 1
                elif i == failed:
                    stats[1] += 1
                    if stats[0] == 0 and stats[1] >= self.prune_after and graph.remove_feed(*key):
                        metrics.inc("graph.pruned_feeds")

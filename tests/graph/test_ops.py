"""Graph operations (Magnet, arXiv:2503.07826; docs/methods.md): on a tiny graph (``get_distance`` →
``convert_unit``) with fixed seeds the walk is a valid path, Merge at p = 1 yields multi-call
turns, Insert adds the nested ``convert_unit``, Split yields a clarify turn; MAGNIFY and
CONNECT give legal paths that are not single edges; every operation keeps legality.

Run: PYTHONPATH=. python -m pytest tests/graph/test_ops.py -q
"""

from __future__ import annotations

import contextlib
import itertools
import random
from collections import Counter

import pytest

from trajsynth.envs.domains import BUILTIN_DOMAINS
from trajsynth.envs.spec import Toolset
from trajsynth.graph import (
    FSP,
    Binding,
    GraphConfig,
    OperationError,
    PathCall,
    TurnPlan,
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

LEX = GraphConfig(similarity="lexical")


def fn(name: str, desc: str, params: dict, required: list[str], response: dict) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {"type": "object", "properties": params, "required": required},
            "response": {"type": "object", "properties": response},
        },
    }


S = {"type": "string"}
N = {"type": "number"}
TINY = Toolset.from_openai(
    [
        fn(
            "find_city",
            "Find a city by name.",
            {"name": {**S, "description": "City name."}},
            ["name"],
            {"city": {**S, "description": "City name; use as origin or destination."}},
        ),
        fn(
            "get_distance",
            "Driving distance between two cities.",
            {
                "origin": {**S, "description": "Start city."},
                "destination": {**S, "description": "End city."},
            },
            ["origin", "destination"],
            {
                "distance": {**N, "description": "Distance value in miles."},
                "unit": {**S, "description": "Unit of the distance value."},
            },
        ),
        fn(
            "convert_unit",
            "Convert a value from one unit to another.",
            {
                "value": {**N, "description": "Distance value to convert."},
                "from_unit": {**S, "description": "Unit of the value."},
                "to_unit": {**S, "description": "Unit to convert to."},
            },
            ["value", "from_unit", "to_unit"],
            {"value": {**N, "description": "The converted value."}},
        ),
        fn(
            "get_weather",
            "Current weather in a city.",
            {"city": {**S, "description": "City name."}},
            ["city"],
            {"temperature": {**N, "description": "Temperature in Celsius."}},
        ),
    ],
    name="tiny",
)


@pytest.fixture(scope="module")
def tiny():
    return build_graph(TINY, LEX)


@pytest.fixture(scope="module")
def travel():
    return build_graph(BUILTIN_DOMAINS["travel"].toolset(), LEX)


def test_tiny_graph_edges(tiny) -> None:
    assert {(f.field, f.param) for f in tiny.feeds("get_distance", "convert_unit")} == {
        ("distance", "value"),
        ("unit", "from_unit"),
        ("unit", "to_unit"),
    }
    assert {f.param for f in tiny.feeds("find_city", "get_distance")} == {"origin", "destination"}
    assert not tiny.fg.has_edge("convert_unit", "get_distance")  # a number never feeds a city


def test_walk_is_a_valid_seeded_path(tiny) -> None:
    a = random_walk(tiny, random.Random(3), steps=7, start="find_city")
    assert a == random_walk(tiny, random.Random(3), steps=7, start="find_city")
    assert problems(tiny, a) == []
    for prev, cur in itertools.pairwise(a):
        assert tiny.fg.has_edge(prev.tool, cur.tool)
        assert prev.uid in {b.source for b in cur.bindings}  # each step bound to the last
    assert [c.tool for c in a[:3]] == ["find_city", "get_distance", "convert_unit"]
    with pytest.raises(OperationError):
        random_walk(tiny, random.Random(0), start="nope")


def test_merge_p1_yields_multi_call_turns_and_p0_none(tiny) -> None:
    path = random_walk(tiny, random.Random(1), steps=4, start="find_city")
    fsp = to_turns(path)
    assert [len(t.calls) for t in fsp.turns] == [1] * len(path)
    merged = merge(fsp, random.Random(0), p=1.0)
    assert all(len(t.calls) >= 2 for t in merged.turns[: len(path) // 2])
    assert [c.uid for c in merged.calls()] == [c.uid for c in path]  # order kept
    assert merge(fsp, random.Random(0), p=0.0).turns == fsp.turns
    assert problems(tiny, merged) == []
    # a merged turn's independent calls are one parallel step; dependent ones are sequential
    steps = merged.turns[0].steps()
    assert [[c.tool for c in s] for s in steps] == [["find_city"], ["get_distance"]]


def test_insert_adds_the_nested_call_bound_to_the_turn(tiny) -> None:
    path = [PathCall(0, "get_distance")]
    out = insert(tiny, to_turns(path), random.Random(0), p=1.0, long_range=0.0)
    calls = out.turns[0].calls
    assert [c.tool for c in calls] == ["get_distance", "convert_unit"]
    assert calls[1].inserted and {b.source for b in calls[1].bindings} == {0}
    assert problems(tiny, out) == []
    # the LLM check can refuse the nested relation
    none = insert(tiny, to_turns(path), random.Random(0), p=1.0, accept=lambda s, t: False)
    assert [c.tool for c in none.calls()] == ["get_distance"]


def test_fan_out_repeats_a_free_leaf_call_in_its_turn(tiny) -> None:
    single = to_turns([PathCall(0, "find_city")])
    out = fan_out(single, random.Random(0), p=1.0, copies=3)
    calls = out.turns[0].calls
    assert {c.tool for c in calls} == {"find_city"} and 2 <= len(calls) <= 4
    assert [c.replica_of for c in calls[1:]] == [0] * (len(calls) - 1)
    assert len(out.turns[0].steps()) == 1  # one parallel step
    assert problems(tiny, out) == [] and FSP.from_json(out.to_json()) == out
    # a call that feeds a later one is never repeated; p = 0 changes nothing
    chain = to_turns(random_walk(tiny, random.Random(1), steps=2, start="find_city"))
    fanned = fan_out(merge(chain, random.Random(0), p=1.0), random.Random(0), p=1.0)
    feeding = {b.source for c in fanned.calls() for b in c.bindings}
    assert all(c.replica_of not in feeding for c in fanned.calls() if c.replica_of is not None)
    assert fan_out(single, random.Random(0), p=0.0).turns == single.turns
    # a replica of another function, or one that takes a bound value, is illegal
    bad = FSP(
        (
            single.turns[0].__class__(
                calls=(PathCall(0, "find_city"), PathCall(1, "get_distance", replica_of=0))
            ),
        )
    )
    assert any("not a replica" in p for p in problems(tiny, bad))


def test_bundle_adds_an_independent_request_beside_the_turns_first_call(tiny) -> None:
    single = to_turns([PathCall(0, "get_distance")])
    out = bundle(tiny, single, random.Random(0), p=1.0)
    first, rest = out.turns[0].calls[0], out.turns[0].calls[1:]
    assert first.independent and not first.bindings and first.tool != "get_distance"
    assert [c.tool for c in rest] == ["get_distance"]
    assert len(out.turns[0].steps()) == 1  # one step calls both functions
    assert problems(tiny, out) == [] and FSP.from_json(out.to_json()) == out
    assert out.log[-1] == "bundle:1"
    # a replica of the independent call keeps the path legal
    fanned = fan_out(out, random.Random(0), p=1.0)
    assert problems(tiny, fanned) == []
    # p = 0, a path at max_calls, or a path that uses every function: unchanged
    assert bundle(tiny, single, random.Random(0), p=0.0) == single
    assert bundle(tiny, single, random.Random(0), p=1.0, max_calls=1) == single
    every = to_turns([PathCall(i, f) for i, f in enumerate(sorted(tiny.functions))])
    assert bundle(tiny, every, random.Random(0), p=1.0) == every
    # an independent call takes no value from the path and gives none
    taking = FSP(
        (TurnPlan(calls=(PathCall(0, "find_city"), PathCall(1, "get_distance",
                  (Binding("origin", 0, "city"),), independent=True))),)
    )  # fmt: skip
    assert any("is independent" in p for p in problems(tiny, taking))
    giving = FSP(
        (TurnPlan(calls=(PathCall(0, "find_city", independent=True), PathCall(1, "get_distance",
                  (Binding("origin", 0, "city"),)))),)
    )  # fmt: skip
    assert any("from an independent call" in p for p in problems(tiny, giving))


def test_bundled_paths_stay_legal(travel) -> None:
    bundled = 0
    for seed in range(40):
        rng = random.Random(seed)
        fsp = merge(to_turns(random_walk(travel, rng, steps=3)), rng, p=0.5)
        fsp = fan_out(bundle(travel, fsp, rng, p=1.0), rng, p=0.5)
        assert problems(travel, fsp) == [], seed
        calls = fsp.calls()
        alone = [c for c in calls if c.independent]
        bundled += len(alone)
        for c in alone:  # another function, and no call takes a value from it
            assert sum(x.tool == c.tool and x.replica_of is None for x in calls) == 1
            assert all(b.source != c.uid for x in calls for b in x.bindings)
    assert bundled >= 30


def test_bundle_adds_up_to_most_requests_and_never_past_max_calls(travel) -> None:
    added: Counter[int] = Counter()
    for seed in range(60):
        single = to_turns([PathCall(0, "search_flights")])
        out = bundle(travel, single, random.Random(seed), p=1.0, most=3)
        alone = [c for c in out.calls() if c.independent]
        added[len(alone)] += 1
        assert problems(travel, out) == [], seed
        assert len({c.tool for c in out.calls()}) == len(out.calls())  # each another function
        assert len(out.turns[0].steps()) == 1  # one step calls them all
        assert out.log.count("bundle:1") == len(alone)
        capped = bundle(travel, single, random.Random(seed), p=1.0, most=3, max_calls=2)
        assert len(capped.calls()) <= 2
    assert set(added) == {1, 2, 3}  # a number drawn from 1..most
    # most = 1 draws as Bundle always did: one request
    assert all(
        sum(c.independent for c in bundle(travel, to_turns([PathCall(0, "search_flights")]),
                                          random.Random(s), p=1.0).calls()) == 1
        for s in range(20)
    )  # fmt: skip


def test_bundle_share_asks_the_same_values_of_another_function(travel) -> None:
    """``share_p``: the added call is a function whose required parameters the turn's first
    call takes, right after it and marked ``shares`` (BFCL's "the temperature and the
    humidity in Boston"); where none fits, an unrelated request as before."""
    hotels = to_turns([PathCall(0, "search_hotels")])
    for seed in range(10):
        out = bundle(travel, hotels, random.Random(seed), p=1.0, share_p=1.0)
        first, added = out.turns[0].calls
        assert (first.tool, added.tool) == ("search_hotels", "find_airports")  # the one that fits
        assert added.shares == 0 and added.independent and not added.bindings
        assert len(out.turns[0].steps()) == 1 and out.log[-1] == "bundle:share"
        assert problems(travel, out) == [] and FSP.from_json(out.to_json()) == out
    # a function nothing else takes the values of (get_flight's flight_id is required by
    # book_flight only beside user_id and payment_id): an unrelated request instead
    flight = to_turns([PathCall(0, "get_flight")])
    out = bundle(travel, flight, random.Random(0), p=1.0, share_p=1.0)
    assert out.calls()[0].independent and out.calls()[0].shares is None
    assert out.log[-1] == "bundle:1"
    # share_p = 0 draws exactly as before
    for seed in range(10):
        assert bundle(travel, hotels, random.Random(seed), p=1.0) == bundle(
            travel, hotels, random.Random(seed), p=1.0, share_p=0.0
        )
    # shares must name an earlier call of another function
    later = FSP((TurnPlan(calls=(PathCall(0, "search_hotels", shares=1),
                                 PathCall(1, "find_airports"))),))  # fmt: skip
    same = FSP((TurnPlan(calls=(PathCall(0, "find_airports"),
                                PathCall(1, "find_airports", shares=0))),))  # fmt: skip
    assert any("cannot share" in p for p in problems(travel, later))
    assert any("cannot share" in p for p in problems(travel, same))


def test_split_param_and_func(tiny) -> None:
    path = random_walk(tiny, random.Random(2), steps=3, start="find_city")
    fsp = to_turns(path)
    p = split(tiny, fsp, random.Random(0), kind="param")
    t = next(t for t in p.turns if t.kind == "clarify")
    assert t.missing == "param" and t.detail in TINY[t.calls[0].tool].required()
    assert t.detail not in t.calls[0].bound()  # the user must give it
    f = split(tiny, fsp, random.Random(0), kind="func")
    new = next(t for t in f.turns if t.missing == "func")
    assert new.kind == "clarify" and new.detail not in {c.tool for c in path}
    assert len(f.turns) == len(fsp.turns) + 1 and f.turns[0].missing is None  # after a turn
    assert f.calls() == fsp.calls()  # the miss-func call is not executed
    assert problems(tiny, p) == [] and problems(tiny, f) == []


def test_magnify_expands_through_the_tools_that_feed_it(travel) -> None:
    target = PathCall(0, "book_flight")
    out = magnify(travel, [target], 0, random.Random(1))
    assert out[-1].tool == "book_flight" and len(out) >= 3
    assert problems(travel, out) == []
    booked = out[-1]
    assert set(booked.bound()) >= {"user_id", "flight_id"}  # its ids now come from calls
    by_uid = {c.uid: c for c in out}
    # the chain is deeper than one edge: some call feeds the target only through another
    feeders = {b.source for b in booked.bindings}
    second = {b.source for u in feeders for b in by_uid[u].bindings}
    assert second - feeders, [(c.tool, c.bindings) for c in out]
    with pytest.raises(OperationError):
        magnify(travel, [PathCall(0, "convert_currency")], 0, random.Random(0))


def test_connect_joins_unlinked_functions_through_intermediates(travel) -> None:
    assert not travel.fg.has_edge("find_user", "cancel_booking")
    out = connect(travel, random.Random(0), "find_user", "cancel_booking")
    assert out[0].tool == "find_user" and out[-1].tool == "cancel_booking" and len(out) >= 3
    assert problems(travel, out) == []
    for prev, cur in itertools.pairwise(out):
        assert travel.fg.has_edge(prev.tool, cur.tool)
    with pytest.raises(OperationError, match="directly"):
        connect(travel, random.Random(0), "find_user", "get_user")
    with pytest.raises(OperationError):
        connect(travel, random.Random(0), "convert_currency", "get_user")


def test_problems_names_each_kind_of_illegality(travel) -> None:
    a = PathCall(0, "find_user")
    later = PathCall(1, "get_user", (Binding("user_id", 2, "user_id"),))
    assert "later call" in problems(travel, [a, later])[0]
    wrong = PathCall(1, "get_user", (Binding("user_id", 0, "name"),))
    assert "not an edge" in problems(travel, [a, wrong])[0]
    apart = [a, PathCall(1, "convert_currency")]
    assert "not connected" in problems(travel, apart)[-1]
    unused = [a, PathCall(1, "get_user")]  # find_user produces the user_id get_user needs
    assert any("asks the user for user_id" in p for p in problems(travel, unused))
    assert "unknown function" in problems(travel, [PathCall(0, "nope")])[0]


@pytest.mark.parametrize("domain", sorted(BUILTIN_DOMAINS))
def test_every_operation_keeps_legality(domain: str) -> None:
    g = build_graph(BUILTIN_DOMAINS[domain].toolset(), LEX)
    for seed in range(40):
        rng = random.Random(seed)
        path = random_walk(g, rng, steps=7)
        assert problems(g, path) == []
        with contextlib.suppress(OperationError):
            path = magnify(g, path, rng.randrange(len(path)), rng)
        assert problems(g, path) == []
        fsp = insert(g, merge(to_turns(path), rng, p=0.5), rng, p=0.7, long_range=0.5)
        assert problems(g, fsp) == []
        with contextlib.suppress(OperationError):
            fsp = split(g, fsp, rng)
        assert problems(g, fsp) == [], fsp.log
        again = FSP.from_json(fsp.to_json())
        assert again == fsp


def test_split_param_of_one_turn(tiny) -> None:
    path = random_walk(tiny, random.Random(2), steps=3, start="find_city")
    fsp = to_turns(path)
    for seed in range(5):
        p = split(tiny, fsp, random.Random(seed), kind="param", turn=0)
        assert p.turns[0].kind == "clarify" and p.turns[0].missing == "param"
        assert all(t.kind == "tool" for t in p.turns[1:])
    with pytest.raises(OperationError):  # a turn past the path's has nothing to split
        split(tiny, fsp, random.Random(0), kind="param", turn=len(fsp.turns))

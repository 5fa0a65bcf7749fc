"""State: copy-on-write snapshots, the order-independent hash, diffs.

Run: PYTHONPATH=. python -m pytest tests/envs/test_state.py -q
"""

from __future__ import annotations

import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from trajsynth.core.ids import canonical_json
from trajsynth.envs.state import State, diff

KEYS = st.sampled_from(["a", "b", "c", "d"])
TABLES = st.sampled_from(["t1", "t2"])
VALUES = st.one_of(st.integers(-5, 5), st.text(max_size=3), st.lists(st.integers(0, 3), max_size=2))
OPS = st.lists(st.tuples(st.sampled_from(["put", "delete"]), TABLES, KEYS, VALUES), max_size=25)


def apply(state: State, ops: list) -> None:
    for op, table, key, value in ops:
        if op == "put":
            state.put(table, key, {"v": value})
        elif state.has(table, key):
            state.delete(table, key)


@settings(max_examples=150, deadline=None)
@given(OPS, OPS)
def test_restore_returns_exactly_to_the_snapshot(before: list, after: list) -> None:
    s = State({"t1": {"x": {"v": 1}}})
    apply(s, before)
    snap = s.snapshot()
    frozen = canonical_json(snap.to_json())
    h = s.hash()
    apply(s, after)
    assert canonical_json(snap.to_json()) == frozen  # later writes never reach a snapshot
    s.restore(snap)
    assert s.hash() == h and canonical_json(s.to_json()) == frozen
    apply(s, after)  # branch again from the same snapshot: same result
    s2 = State.from_snapshot(snap)
    apply(s2, after)
    assert s2.hash() == s.hash()


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_hash_is_the_hash_of_the_content(ops: list) -> None:
    s = State()
    apply(s, ops)
    rebuilt = State(s.to_json())  # same records, written in another order
    assert rebuilt.hash() == s.hash()


def test_hash_is_independent_of_write_order_and_sensitive_to_content() -> None:
    a, b = State(), State()
    a.put("orders", "1", {"status": "open"})
    a.put("orders", "2", {"status": "open"})
    b.put("orders", "2", {"status": "open"})
    b.put("orders", "1", {"status": "open"})
    assert a.hash() == b.hash()
    b.update("orders", "1", status="closed")
    assert a.hash() != b.hash()
    b.update("orders", "1", status="open")
    assert a.hash() == b.hash()
    # a record moved to another table is a different state
    c = State({"other": {"1": {"status": "open"}, "2": {"status": "open"}}})
    assert c.hash() != a.hash()


def test_hash_is_stable_across_processes() -> None:
    code = (
        "from trajsynth.envs.state import State;"
        "print(State({'t': {'k': {'x': [1, 2.5, 'é'], 'y': None}}}).hash())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == State({"t": {"k": {"x": [1, 2.5, "é"], "y": None}}}).hash()


def test_snapshot_is_copy_on_write() -> None:
    s = State({"big": {str(i): {"i": i} for i in range(1000)}, "small": {"k": {"v": 0}}})
    snap = s.snapshot()
    assert s._tables["big"] is snap.tables["big"]  # shared until written
    s.put("small", "k", {"v": 1})
    assert s._tables["big"] is snap.tables["big"]  # writing one table copies only that one
    assert s._tables["small"] is not snap.tables["small"]
    assert snap.get("small", "k") == {"v": 0}


def test_diff_lists_added_removed_changed() -> None:
    s = State({"users": {"u1": {"name": "Ann", "tier": "gold"}, "u2": {"name": "Bo"}}})
    before = s.snapshot()
    s.update("users", "u1", tier="silver")
    s.delete("users", "u2")
    s.put("users", "u3", {"name": "Cy"})
    s.put("log", "e1", {"what": "x"})
    d = diff(before, s)
    assert [(c.table, c.key, c.kind) for c in d] == [
        ("log", "e1", "added"),
        ("users", "u1", "changed"),
        ("users", "u2", "removed"),
        ("users", "u3", "added"),
    ]
    assert d.by_kind("changed")[0].fields == ("tier",)
    assert 'changed users/u1 (tier: "gold" -> "silver")' in d.describe()
    assert not diff(before, before) and not diff(s, s.snapshot())

"""Per-tool backends in one toolset: two tools run by a Python class (``code``), the rest
answered by the simulator (``simulated``). Calls go to the part that owns the tool;
snapshot / restore cover both parts; ``state_hash`` changes when either part changes; Magnet
tasks → rejection sampling → verify give verified trajectories, identical on a rerun; a
toolset on one backend gets exactly the environment it always got.

Run: PYTHONPATH=. python -m pytest tests/envs/test_mixed_env.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trajsynth.core import GroundTruth
from trajsynth.core.errors import ConfigError
from trajsynth.envs import EnvFactory, SimulatedEnvironment, Toolset
from trajsynth.envs.mixed import MixedEnvironment

HERE = Path(__file__).resolve().parent
TARGET = "code_library:Library"
CODE_TOOLS = {"add_book": "code", "lend_book": "code"}


def _fn(name: str, params: dict, required: list[str], response: dict | None = None) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": name.replace("_", " "),
            "parameters": {"type": "object", "properties": params, "required": required},
            **({"response": response} if response else {}),
        },
    }


NOTE_ID = {"type": "object", "properties": {"note_id": {"type": "string"}}}
# fmt: off
NOTES = Toolset.from_openai(
    [
        _fn("create_note", {"title": {"type": "string"}, "body": {"type": "string"}}, ["title"],
            NOTE_ID),
        _fn("get_note", {"note_id": {"type": "string"}}, ["note_id"]),
        _fn("update_note", {"note_id": {"type": "string"}, "title": {"type": "string"}},
            ["note_id", "title"]),
        _fn("search_notes", {"title": {"type": "string"}}, []),
    ],
    name="notes",
)
# fmt: on


@pytest.fixture(autouse=True)
def importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """``code_library`` (next to this file) importable here and in worker processes."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("PYTHONPATH", f"{HERE}:{Path.cwd()}")


def _factory(path: Path, **extra: object) -> EnvFactory:
    config = {"file": str(path), "code": [TARGET], "tools": CODE_TOOLS, **extra}
    return EnvFactory({"domains": [], "toolsets": {"desk": config}})


def test_calls_route_and_state_covers_both_parts(tmp_path: Path) -> None:
    f = _factory(NOTES.save(tmp_path / "notes.json"))
    assert f.toolset("desk").names() == [*NOTES.names(), "add_book", "lend_book"]
    assert f.toolset("desk")["add_book"].required() == ["title", "author"]
    env = f.make("desk", seed=3)
    assert isinstance(env, MixedEnvironment) and sorted(env.parts) == ["code", "simulated"]
    assert env.parts["code"].toolset.names() == ["add_book", "lend_book"]
    env.reset()
    start, h0 = env.snapshot(), env.state_hash()
    book = env.call("add_book", title="Emma", author="Jane Austen")
    assert book.output == {"book_id": "b4", "title": "Emma"}  # the class ran it
    h1 = env.state_hash()
    assert h1 != h0
    note = env.call("create_note", title="read Emma")
    assert note.ok and env.call("get_note", note_id=note.output["note_id"]).ok  # simulated
    h2 = env.state_hash()
    assert h2 != h1
    assert env.call("get_book", book_id="b1").category == "unknown_tool"  # not offered
    assert env.call("lend_book", book_id="b4", member_id="m1").ok
    assert env.call("lend_book", book_id="b4", member_id="m2").category == "invalid_value"
    changes = env.diff(start).describe()
    assert any("b4" in c and "Library" in c for c in changes)
    assert any(c.startswith("added note/") for c in changes)
    assert "Library" in env.state() and "note" in env.state()
    end = env.snapshot()
    env.restore(start)
    assert env.state_hash() == h0 and not env.diff(start)
    assert env.call("lend_book", book_id="b4", member_id="m1").category == "invalid_value"
    env.restore(end)
    assert env.diff(start, end).describe() == changes
    env.restore(start)  # same calls, same state, same hash
    env.call("add_book", title="Emma", author="Jane Austen")
    assert env.state_hash() == h1
    again = f.make("desk", seed=3)
    again.reset()
    assert again.state_hash() == h0  # stable across environments (and processes)


def test_reset_splits_the_initial_state_by_part(tmp_path: Path) -> None:
    f = _factory(NOTES.save(tmp_path / "notes.json"))
    init = {"Library": {"members": {"m9": {"member_id": "m9", "name": "Grace"}}},
            "note": {"n1": {"note_id": "n1", "title": "hello"}}}  # fmt: skip
    env = f.make("desk", seed=1)
    env.reset(GroundTruth(env_seed=1, initial_state=init))
    assert env.call("lend_book", book_id="b1", member_id="m9").ok
    assert env.call("get_note", note_id="n1").ok
    assert "Library" not in env.parts["simulated"].state()
    made = f.make("desk", seed=1, initial_state=init)
    made.reset()
    assert made.call("lend_book", book_id="b1", member_id="m9").ok


def test_one_backend_builds_the_single_environment(tmp_path: Path) -> None:
    path = NOTES.save(tmp_path / "notes.json")
    plain = EnvFactory({"domains": [], "toolsets": {"desk": str(path)}})
    one = {"file": str(path), "tools": {"get_note": "simulated"}}
    same = EnvFactory({"domains": [], "toolsets": {"desk": one}})
    a, b = plain.make("desk", seed=2), same.make("desk", seed=2)
    assert type(a) is type(b) is SimulatedEnvironment
    assert plain.toolset("desk") == same.toolset("desk") and a.state_hash() == b.state_hash()


def test_config_errors_are_clear(tmp_path: Path) -> None:
    path = NOTES.save(tmp_path / "notes.json")
    with pytest.raises(ConfigError, match="unknown tools \\['fly'\\]"):
        _factory(path, tools={"fly": "code"}).toolset("desk")
    with pytest.raises(ConfigError, match="no implementation for get_note \\(code\\)"):
        _factory(path, tools={"get_note": "code"}).toolset("desk")
    with pytest.raises(ConfigError, match="use backend 'code', which needs `code`"):
        EnvFactory({"toolsets": {"d": {"file": str(path), "tools": {"get_note": "code"}}}})
    with pytest.raises(ConfigError, match="needs `mcp`"):
        EnvFactory({"toolsets": {"d": {"file": str(path), "tools": {"get_note": "mcp"}}}})


def test_magnet_rejection_verify_on_mixed_tools(tmp_path: Path, rejection_twice) -> None:
    path = NOTES.save(tmp_path / "notes.json")
    first = rejection_twice(
        [
            f"defaults.env.toolsets={{desk: {{file: '{path}', code: ['{TARGET}'], "
            "tools: {add_book: code, lend_book: code}}}",
            "stages.tasks.with.domains=[desk]",
            "stages.tasks.with.tasks_per_domain=4",
            "stages.tasks.with.graph.similarity=lexical",
            "stages.rollouts.with.n=4",
        ],
        tasks=4,
    )
    used = {c.name for r in first["verified"] for m in r.messages for c in m.tool_calls}
    assert used & set(CODE_TOOLS) and used - set(CODE_TOOLS)  # both parts ran calls

"""The ``simulated`` environment: stateful, schema-valid answers for tools that have only a
spec (entities created by one call are found by the next, an unknown id is an error), cached
by (seed, state hash, call); and an imported toolset with no implementation runs Magnet tasks
→ rejection sampling → verify offline, identically on a rerun.

Run: PYTHONPATH=. python -m pytest tests/envs/test_simulated.py -q
"""

from __future__ import annotations

from pathlib import Path

import jsonschema

from trajsynth.core import GroundTruth
from trajsynth.envs import EnvFactory, Toolset, import_tools
from trajsynth.envs.simulated import SimulatedEnvironment, ToolQuery, tool_effect, with_responses


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


NOTE = {"type": "object", "properties": {"note_id": {"type": "string"},
        "title": {"type": "string"}, "pinned": {"type": "boolean"}}}  # fmt: skip
# fmt: off
TOOLS = Toolset.from_openai(
    [
        _fn("create_note", {"title": {"type": "string"}, "body": {"type": "string"}}, ["title"],
            {"type": "object", "properties": {"note_id": {"type": "string"}}}),
        _fn("get_note", {"note_id": {"type": "string"}}, ["note_id"], NOTE),
        _fn("update_note", {"note_id": {"type": "string"}, "title": {"type": "string"}},
            ["note_id", "title"]),
        _fn("delete_note", {"note_id": {"type": "string"}}, ["note_id"]),
        _fn("search_notes", {"title": {"type": "string"}}, []),
        _fn("convert_units", {"value": {"type": "number"}, "unit": {"type": "string",
            "enum": ["cm", "in"]}}, ["value", "unit"],
            {"type": "object", "properties": {"value": {"type": "number"},
             "unit": {"type": "string", "enum": ["cm", "in"]}}, "required": ["value"]}),
    ],
    name="notes",
)
# fmt: on


def test_effects_from_names() -> None:
    effects = {t.name: tool_effect(t) for t in TOOLS}
    assert effects["create_note"].action == "create" and effects["create_note"].kind == "note"
    assert effects["get_note"].action == "read" and effects["get_note"].key == "note_id"
    assert effects["delete_note"].action == "delete"
    assert effects["search_notes"].action == "search" and effects["search_notes"].kind == "note"
    assert effects["convert_units"].action == "compute"


def test_created_entities_are_found_and_unknown_ids_fail() -> None:
    env = SimulatedEnvironment("notes", TOOLS, seed=3)
    env.reset()
    seeded = sorted(env.state()["note"])
    assert len(seeded) == 3  # the seeded population
    created = env.call("create_note", title="Groceries", body="milk")
    assert created.ok
    note_id = created.output["note_id"]
    assert note_id not in seeded
    got = env.call("get_note", note_id=note_id)
    assert got.ok and got.output["note_id"] == note_id and got.output["title"] == "Groceries"
    jsonschema.validate(got.output, NOTE)  # the declared output schema
    assert env.call("get_note", note_id="note_does_not_exist").category == "not_found"
    assert env.call("update_note", note_id=note_id, title="Shopping").ok
    assert env.call("get_note", note_id=note_id).output["title"] == "Shopping"
    found = env.call("search_notes", title="Shopping").output
    assert [r["note_id"] for r in found["results"]] == [note_id]
    assert env.call("delete_note", note_id=note_id).ok
    assert env.call("get_note", note_id=note_id).category == "not_found"
    # argument checks as in every environment
    assert env.call("get_note").category == "missing_required"
    assert env.call("convert_units", value=1, unit="km").category == "enum_violation"
    assert env.call("nope").category == "unknown_tool"
    out = env.call("convert_units", value=2.5, unit="cm").output
    jsonschema.validate(out, TOOLS["convert_units"].response)


def test_snapshot_restore_hash_and_identical_replay() -> None:
    env = SimulatedEnvironment("notes", TOOLS, seed=1)
    env.reset()
    start = env.snapshot()
    h0 = env.state_hash()
    first = env.call("create_note", title="A").output
    h1 = env.state_hash()
    assert h1 != h0 and [c.kind for c in env.diff(start)] == ["added"]
    env.restore(start)
    assert env.state_hash() == h0
    assert env.call("create_note", title="A").output == first and env.state_hash() == h1
    # a fresh environment of the same seed answers the same, in another instance too
    other = SimulatedEnvironment("notes", TOOLS, seed=1)
    other.reset()
    assert other.call("create_note", title="A").output == first
    assert other.state_hash() == h1
    # another seed: another world
    third = SimulatedEnvironment("notes", TOOLS, seed=2)
    third.reset()
    assert third.state_hash() != h0


def test_answering_model_and_cache() -> None:
    asked: list[ToolQuery] = []

    def model(q: ToolQuery):
        asked.append(q)
        if q.call["name"] == "get_note":
            return {"note_id": q.call["arguments"]["note_id"], "title": "From the model"}
        return {"note_id": 42}  # invalid against create_note's schema: the proposal stays

    f = EnvFactory({"domains": []}, answer=model)
    env = SimulatedEnvironment("notes", TOOLS, answer=model, cache=f.answers)
    env.reset()
    made = env.call("create_note", title="A")
    assert isinstance(made.output["note_id"], str)
    got = env.call("get_note", note_id=made.output["note_id"])
    assert got.output["title"] == "From the model"
    assert asked[-1].ledger["note"][made.output["note_id"]]["title"] == "A"
    n = len(asked)
    env.reset()
    env.call("create_note", title="A")
    env.call("get_note", note_id=made.output["note_id"])
    assert len(asked) == n  # answered from the cache: (seed, state hash, call)


def test_inferred_response_schemas() -> None:
    ts = with_responses(TOOLS)
    assert ts["get_note"].response == TOOLS["get_note"].response  # declared: kept
    assert ts["delete_note"].extra["response_inferred"]
    assert "results" in ts["search_notes"].response["properties"]
    assert ts.to_openai() == TOOLS.to_openai()  # what a model sees does not change


def test_imported_toolset_runs_simulated_by_default(tmp_path: Path, external_dir: Path) -> None:
    ts = import_tools(external_dir / "tau-bench/retail/tools_openai.json", "openai")
    path = ts.save(tmp_path / "retail.json")
    f = EnvFactory({"toolsets": {"retail": str(path)}})
    env = f.make("retail", seed=0)
    env.reset(GroundTruth(env_seed=0))
    order = sorted(env.state()["order"])[0]
    assert env.call("get_order_details", order_id=order).ok
    assert env.call("get_order_details", order_id="#W0000000").category == "not_found"
    assert env.call("cancel_pending_order", order_id=order, reason="no longer needed").ok
    assert env.call("get_order_details", order_id=order).output["status"] == "cancelled"


def test_magnet_rejection_verify_on_simulated_tools(
    tmp_path: Path, external_dir: Path, rejection_twice
) -> None:
    ts = import_tools(external_dir / "tau-bench/retail/tools_openai.json", "openai")
    path = ts.save(tmp_path / "retail.json")
    rejection_twice(
        [
            f"defaults.env.toolsets={{retail: {path}}}",
            "stages.tasks.with.domains=[retail]",
            "stages.tasks.with.tasks_per_domain=4",
            "stages.tasks.with.graph.similarity=lexical",
            "stages.rollouts.with.n=4",
        ],
        tasks=4,
    )


def test_tool_role_answers_through_the_llm_layer(tmp_path: Path) -> None:
    from trajsynth.stages import Context, ContextSpec

    path = TOOLS.save(tmp_path / "notes.json")
    env_cfg = {"domains": [], "toolsets": {"notes": str(path)}}
    plain = Context(ContextSpec(env=env_cfg)).envs.make("notes", seed=5)
    ctx = Context(ContextSpec(env=env_cfg, llm={"tool": {"backend": "sim"}}))
    via_role = ctx.envs.make("notes", seed=5)
    for env in (plain, via_role):
        env.reset()
    a = plain.call("create_note", title="A")
    b = via_role.call("create_note", title="A")
    assert a.output == b.output and plain.state_hash() == via_role.state_hash()
    got = via_role.call("get_note", note_id=b.output["note_id"])
    assert got.ok and got.output["title"] == "A"
    counters = ctx.metrics.snapshot()["counters"]
    assert counters["llm.tool.requests"] == 2  # the simulator played the tool role

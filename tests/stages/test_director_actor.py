"""``director_actor`` (METHODS.md §10, director-actor row): a scripted planner's fixed 3-turn
plan is acted out by a scripted user and assistant with real tools of the math domain: turn
count, role order, tool results threaded, the non-tool turn makes no call, the outline kept;
and the default simulated roles on synthesized tasks.

Run: PYTHONPATH=. python -m pytest tests/stages/test_director_actor.py -q
"""

from __future__ import annotations

import json

from trajsynth.core import to_batch, to_records
from trajsynth.core.schema import Trajectory
from trajsynth.envs import EnvFactory
from trajsynth.envs.domains import get_domain
from trajsynth.envs.tasks import call, materialize, ref, task, turn
from trajsynth.llm.base import ChatRequest, RawChoice
from trajsynth.llm.scripted import use_scripted
from trajsynth.stages import Context, ContextSpec, build_stage
from trajsynth.stages.methods.director_actor import _read_outline

FACTORY = EnvFactory()
PLAN = {
    "turns": [
        {"turn": 1, "type": "tool_call", "need": "Convert 10 miles to kilometres, rounded."},
        {"turn": 2, "type": "non_tool", "need": "Ask what a prime number is."},
        {"turn": 3, "type": "tool_call", "need": "Remember the distance as trip_km."},
    ]
}
AUTHORED = task(
    "math-trip",
    ["dependent_calls", "no_tool_needed"],
    turn(
        "Convert 10 miles to kilometres, rounded to one decimal.",
        call("convert_units", value=10, from_unit="mi", to_unit="km"),
        call("round_number", value=ref("c0.result"), digits=1),
    ),
    turn("What is a prime number?", kind="no_tool", answer="A number with two divisors."),
    turn(
        "Remember that distance as trip_km.",
        call("store_value", name="trip_km", value=ref("c1.result")),
    ),
)
EXAMPLE = materialize(AUTHORED, get_domain("math"))
ROW = EXAMPLE.to_trajectory(FACTORY.toolset("math"))
USER_LINES = [t.request for t in EXAMPLE.ground_truth.turns]


def director(req: ChatRequest) -> str:
    assert "never a tool or function name" in req.messages[0]["content"]
    assert req.metadata["num_turns"] == 3
    return json.dumps(PLAN)


def user(req: ChatRequest) -> str:
    said = sum(1 for m in req.messages if m["role"] == "user")
    return USER_LINES[said] if said < len(USER_LINES) else "###STOP###"


def actor(req: ChatRequest) -> RawChoice:
    """Fixed calls; the second and third take the previous result from the tool message."""
    msgs = req.messages
    users = [m for m in msgs if m["role"] == "user"]
    last = msgs[-1]
    if len(users) == 1:
        if last["role"] == "user":
            return _call("convert_units", {"value": 10, "from_unit": "mi", "to_unit": "km"})
        out = json.loads(last["content"])
        if "dimension" in out:  # convert_units answered: round its result
            return _call("round_number", {"value": out["result"], "digits": 1})
        return RawChoice(content=f"It is {out['result']} km.")
    if len(users) == 2:
        return RawChoice(content="A prime has exactly two divisors: 1 and itself.")
    if last["role"] == "user":
        rounded = next(
            json.loads(m["content"])["result"]
            for m in msgs
            if m["role"] == "tool" and "dimension" not in json.loads(m["content"])
        )
        return _call("store_value", {"name": "trip_km", "value": rounded})
    return RawChoice(content="Saved as trip_km.")


def _call(name: str, args: dict) -> RawChoice:
    return RawChoice(tool_calls=[{"id": f"c_{name}", "name": name, "arguments": json.dumps(args)}])


def run(cfg: dict, rows: list[Trajectory], ctx: Context) -> list[Trajectory]:
    stage = build_stage("director_actor", cfg)
    return [r for out in stage.process(iter([to_batch(rows)]), ctx) for r in to_records(out)]


def test_scripted_plan_is_acted_out_with_real_tools() -> None:
    ctx = Context(ContextSpec(stage_id="da", seed=0))
    use_scripted(ctx, "director", director)
    use_scripted(ctx, "user", user)
    use_scripted(ctx, "actor", actor)
    rows = run({"actors": [{"role": "actor", "temperature": 0.7}, {"role": "actor"}]}, [ROW], ctx)
    assert len(rows) == 2  # K = 2 actors
    r = rows[0]
    roles = [m.role for m in r.messages]
    assert roles == [
        "system", "user", "assistant", "tool", "assistant", "tool", "assistant",
        "user", "assistant",
        "user", "assistant", "tool", "assistant",
    ]  # fmt: skip
    assert sum(1 for m in r.messages if m.role == "user") == 3 == r.extra["user_turns"]
    results = [json.loads(m.content) for m in r.messages if m.role == "tool"]
    calls = [json.loads(c.arguments) for c in r.calls()]
    assert calls[1]["value"] == results[0]["result"]  # threaded within the turn
    assert calls[2]["value"] == results[1]["result"]  # and across turns
    assert r.messages[8].tool_calls == []  # the non-tool turn makes no call
    assert r.extra["outline"] == PLAN["turns"]
    assert r.extra["actor"] == {"role": "actor", "temperature": 0.7}
    assert r.success is True and r.failure_layer is None  # it is the task's gold
    assert r.method == "director_actor" and r.parent_ids == [ROW.id]
    assert rows[0].id != rows[1].id


def test_outline_that_names_a_tool_or_cannot_be_read_is_rejected() -> None:
    names = ["convert_units", "store_value"]
    assert _read_outline(json.dumps(PLAN), names) == PLAN["turns"]
    bad = {"turns": [{"turn": 1, "type": "tool_call", "need": "Call convert_units on 10 mi."}]}
    assert _read_outline(json.dumps(bad), names) is None
    assert _read_outline("I'd plan three turns.", names) is None
    assert _read_outline(json.dumps({"turns": [{"type": "weird", "need": "x"}]}), names) is None
    ctx = Context(ContextSpec(stage_id="da", seed=0))
    use_scripted(ctx, "director", lambda req: json.dumps(bad))
    assert run({}, [ROW], ctx) == []
    assert ctx.metrics.snapshot()["counters"]["rejected.outline"] == 1


def test_default_simulated_roles_on_synthesized_tasks() -> None:
    ctx = Context(ContextSpec(stage_id="tasks", seed=0))
    src = build_stage(
        "magnet_tasks", {"tasks_per_domain": 3, "domains": ["travel", "commerce"],
                         "graph": {"similarity": "lexical"}},
    )  # fmt: skip
    tasks = [r for b in src.generate(ctx) for r in to_records(b)]
    ctx = Context(ContextSpec(stage_id="da", seed=0))
    rows = run({}, tasks, ctx)
    assert len(rows) == 2 * len(tasks)
    names = {t["function"]["name"] for t in tasks[0].tools}
    for r in rows:
        assert r.extra["outline"] and r.extra["persona"]
        for t in r.extra["outline"]:
            assert not any(n in t["need"] for n in names)
        assert r.messages[0].role == "system" and r.messages[1].role == "user"
        assert r.success is not None
    c = ctx.metrics.snapshot()["counters"]
    assert c["conversations"] == len(rows)
    assert c.get("passed", 0) + sum(v for k, v in c.items() if k.startswith("rejected.")) == len(
        rows
    )
    assert 0 < c.get("passed", 0) < len(rows)

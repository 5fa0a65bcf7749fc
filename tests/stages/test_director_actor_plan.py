"""``director_actor`` with ``outline_to: actor``: the director's plan (needs and the tools for
each turn) is given to every actor in its system prompt, and each row says whether its actor
followed it; with ``outline_to: user`` (the default) the actor never sees the outline.

Run: python -m pytest tests/stages/test_director_actor_plan.py -q
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from test_director_actor import PLAN, ROW, actor, run, user

from trajsynth.core import to_records
from trajsynth.llm.base import ChatRequest, RawChoice
from trajsynth.llm.scripted import use_scripted
from trajsynth.stages import Context, ContextSpec, build_stage
from trajsynth.stages.methods.director_actor import _read_outline, outline_adherence

TOOLS = {1: ["convert_units", "round_number"], 2: [], 3: ["store_value"]}
ACTOR_PLAN = {"turns": [{**t, "tools": TOOLS[t["turn"]]} for t in PLAN["turns"]]}


def plan_director(req: ChatRequest) -> str:
    assert "given to the ASSISTANT" in req.messages[0]["content"]
    assert req.metadata["plan_for"] == "actor"
    return json.dumps(ACTOR_PLAN)


def test_the_actor_gets_the_plan_and_follows_it() -> None:
    ctx = Context(ContextSpec(stage_id="da", seed=0))
    use_scripted(ctx, "director", plan_director)
    use_scripted(ctx, "user", user)
    seen = use_scripted(ctx, "actor", actor)
    rows = run({"outline_to": "actor", "actors": [{"temperature": 0.2}, {"temperature": 1}]},
               [ROW], ctx)  # fmt: skip
    assert len(rows) == 2
    system = seen.requests[0].messages[0]["content"]
    assert "plan, from the director" in system
    assert "1. [tool_call] Convert 10 miles to kilometres, rounded. — use: convert_units, " \
        "round_number" in system  # fmt: skip
    assert "2. [non_tool] Ask what a prime number is. — no tool" in system
    for r in rows:
        assert r.extra["outline"] == ACTOR_PLAN["turns"] and r.extra["outline_to"] == "actor"
        assert r.extra["outline_followed"] is True and r.extra["outline_tools_called"] == 1.0
        assert r.success is True
    c = ctx.metrics.snapshot()["counters"]
    assert (c["outline.planned"], c["outline.followed"]) == (2, 2)


def test_an_actor_that_leaves_the_plan_is_counted() -> None:
    def stray(req: ChatRequest) -> RawChoice:
        """Answers every turn from knowledge, calling nothing."""
        return RawChoice(content="I would rather not use tools today.")

    ctx = Context(ContextSpec(stage_id="da", seed=0))
    use_scripted(ctx, "director", plan_director)
    use_scripted(ctx, "user", user)
    use_scripted(ctx, "actor", stray)
    rows = run({"outline_to": "actor", "actors": [{}]}, [ROW], ctx)
    assert rows[0].extra["outline_followed"] is False
    assert rows[0].extra["outline_tools_called"] == 0.0
    c = ctx.metrics.snapshot()["counters"]
    assert (c["outline.planned"], c.get("outline.followed", 0)) == (1, 0)


def test_the_user_form_keeps_the_outline_from_the_actor() -> None:
    from test_director_actor import director

    ctx = Context(ContextSpec(stage_id="da", seed=0))
    use_scripted(ctx, "director", director)
    use_scripted(ctx, "user", user)
    seen = use_scripted(ctx, "actor", actor)
    rows = run({"actors": [{}]}, [ROW], ctx)
    assert "plan, from the director" not in seen.requests[0].messages[0]["content"]
    assert "outline_followed" not in rows[0].extra and rows[0].extra["outline_to"] == "user"


def test_a_plan_naming_a_tool_not_offered_is_rejected() -> None:
    names = ["convert_units", "round_number", "store_value"]
    assert _read_outline(json.dumps(ACTOR_PLAN), names, plan=True) == ACTOR_PLAN["turns"]
    bad = {"turns": [{"turn": 1, "type": "tool_call", "need": "x", "tools": ["launch"]}]}
    assert _read_outline(json.dumps(bad), names, plan=True) is None
    assert outline_adherence(ACTOR_PLAN["turns"], ["convert_units", "store_value"]) == {
        "outline_followed": False,
        "outline_tools_called": round(2 / 3, 4),
    }
    assert outline_adherence(ACTOR_PLAN["turns"], ["convert_units", "x", "round_number",
                                                   "store_value"])["outline_followed"]  # fmt: skip


def test_simulated_roles_plan_for_the_actor_on_synthesized_tasks() -> None:
    ctx = Context(ContextSpec(stage_id="tasks", seed=0))
    src = build_stage(
        "magnet_tasks", {"tasks_per_domain": 3, "domains": ["travel", "commerce"],
                         "graph": {"similarity": "lexical"}},
    )  # fmt: skip
    tasks = [r for b in src.generate(ctx) for r in to_records(b)]
    ctx = Context(ContextSpec(stage_id="da", seed=0))
    rows = run({"outline_to": "actor"}, tasks, ctx)
    assert len(rows) == 2 * len(tasks)
    for r in rows:
        offered = {t["function"]["name"] for t in r.tools}
        planned = [n for t in r.extra["outline"] for n in t["tools"]]
        assert planned and set(planned) <= offered
        assert isinstance(r.extra["outline_followed"], bool)
    c = ctx.metrics.snapshot()["counters"]
    assert c["outline.planned"] == len(rows)
    assert 0 < c["outline.followed"] <= len(rows)
    followed = sum(r.extra["outline_followed"] for r in rows)
    assert followed == c["outline.followed"]

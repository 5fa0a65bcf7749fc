"""A stage's context and the contexts of its units: the units of a map stage share the stage
context's environments (one factory: one MCP server, one sandbox) and lock, but count their
own metrics and LLM usage; executors get such a context from ``Context.for_unit`` and no
module outside ``trajsynth/stages/context.py`` touches a context's private attributes.

Run: python -m pytest tests/stages/test_context.py -q
"""

from __future__ import annotations

import ast
from pathlib import Path

from trajsynth.llm.scripted import use_scripted
from trajsynth.stages import Context, ContextSpec

PACKAGE = Path(__file__).resolve().parents[2] / "trajsynth"
#: a context's private attributes: elsewhere only an object's own (``self._lock``) are used
PRIVATE = {"_envs", "_envs_of", "_lock", "_llm_views", "_progress"}


def test_units_share_the_stage_contexts_environments_and_count_their_own_metrics() -> None:
    stage = Context(ContextSpec(stage_id="s", env={"domains": ["math"]}))
    progressed: list[int] = []
    a = stage.for_unit(progress=progressed.append)
    b = stage.for_unit()
    assert a.envs is stage.envs and b.envs is stage.envs  # one factory, built once
    assert a.spec is stage.spec and a.log is stage.log
    a.metrics.inc("rows", 3)
    b.metrics.inc("rows", 5)
    assert a.metrics.counters == {"rows": 3} and stage.metrics.counters == {}
    a.advance(7)
    b.advance(9)  # a unit without a progress callback reports nowhere
    assert progressed == [7]


def test_a_units_context_leaves_closing_the_environments_to_the_stage() -> None:
    stage = Context(ContextSpec(stage_id="s", env={"domains": ["math"]}))
    unit = stage.for_unit()
    envs = unit.envs
    unit.close_envs()
    assert stage.envs is envs  # still the same, open factory
    stage.close_envs()
    assert stage.envs is not envs  # closed and dropped: a later use builds a new one
    assert unit.envs is stage.envs


def test_a_units_llm_usage_counts_into_the_unit() -> None:
    stage = Context(ContextSpec(stage_id="s"))
    unit = stage.for_unit()
    use_scripted(unit, "teacher", lambda request: "hello")
    reply = unit.run(unit.llm("teacher").chat([{"role": "user", "content": "hi"}]))
    assert reply.choices[0].message.content == "hello"
    assert unit.metrics.counters["llm.teacher.requests"] == 1
    assert "llm.teacher.requests" not in stage.metrics.counters


def test_no_module_outside_context_py_touches_a_contexts_private_attributes() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "stages" / "context.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in PRIVATE
                and not (isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"})
            ):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} .{node.attr}")
    assert found == []

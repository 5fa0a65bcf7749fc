"""function_masking (Hammer): offered functions and parameters renamed in a seeded share of
rows, consistently everywhere the row names them; values and descriptions untouched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stagerun import run_outputs as run

from trajsynth.core import Message, Trajectory
from trajsynth.core.errors import ConfigError
from trajsynth.core.schema import ToolCall
from trajsynth.stages import Context, ContextSpec, build_stage

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "math_hcf",
            "description": "Highest common factor of two integers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "number1": {"type": "integer", "description": "First number."},
                    "number2": {"type": "integer", "description": "Second number."},
                },
                "required": ["number1", "number2"],
            },
        },
    },
    {"type": "function", "function": {"name": "get_time", "description": "Current time."}},
]
ARGS = '{"number1": 36, "number2": 24}'


def row(rid: str = "r1") -> Trajectory:
    call = {"name": "math_hcf", "arguments": {"number1": 36, "number2": 24}}
    gt = {"turns": [{"request": "hcf of 36 and 24", "steps": [[call]]}]}
    msgs = [
        Message(role="system", content="Use the tools."),
        Message(role="user", content="What is the hcf of 36 and 24? Say which of math_hcf's"),
        Message(
            role="assistant",
            content="I will call math_hcf now.",
            tool_calls=[ToolCall(id="c0", name="math_hcf", arguments=ARGS)],
        ),
        Message(role="tool", content='{"result": 12}', tool_call_id="c0", name="math_hcf"),
        Message(role="assistant", content="The hcf is 12 (from math_hcf)."),
    ]
    return Trajectory(id=rid, task_id="t", tools=TOOLS, messages=msgs, ground_truth=gt)


def masked(cfg: dict, rows: list[Trajectory]) -> tuple[list[Trajectory], dict[str, int]]:
    ctx = Context(ContextSpec(stage_id="mask"))
    return run("function_masking", cfg, rows, ctx)["main"], ctx.metrics.counters


def test_a_masked_row_names_its_functions_and_parameters_consistently() -> None:
    [out], counters = masked({"p": 1.0}, [row()])
    info = out.extra["function_masking"]
    fmap, pmap = info["functions"], info["params"]["math_hcf"]
    hcf, time_ = fmap["math_hcf"], fmap["get_time"]
    assert hcf.startswith("func_") and len(hcf) == 11 and hcf != time_
    offered = [t["function"] for t in out.tools]
    assert [f["name"] for f in offered] == [hcf, time_]
    assert offered[0]["description"] == "Highest common factor of two integers."
    props = offered[0]["parameters"]["properties"]
    assert list(props) == [pmap["number1"], pmap["number2"]]
    assert props[pmap["number1"]]["description"] == "First number."
    assert offered[0]["parameters"]["required"] == [pmap["number1"], pmap["number2"]]
    call = out.messages[2].tool_calls[0]
    assert call.name == hcf and call.id == "c0"
    assert json.loads(call.arguments) == {pmap["number1"]: 36, pmap["number2"]: 24}
    assert out.messages[2].content == f"I will call {hcf} now."
    assert out.messages[3].name == hcf and out.messages[3].content == '{"result": 12}'
    assert out.messages[4].content == f"The hcf is 12 (from {hcf})."
    assert out.messages[1].content == row().messages[1].content  # the user's words stay
    step = out.ground_truth.turns[0].steps[0][0].model_dump(exclude_defaults=True)
    assert step == {"name": hcf, "arguments": {pmap["number1"]: 36, pmap["number2"]: 24}}
    assert out.id != "r1" and out.parent_ids == ["r1"]
    assert counters == {"rows": 1, "masked": 1, "functions_masked": 2, "params_masked": 2}
    again, _ = masked({"p": 1.0}, [row()])
    assert again[0].tools == out.tools and again[0].id == out.id  # seeded by the row's id


def test_the_share_is_seeded_per_row_and_zero_passes_everything_on() -> None:
    rows = [row(f"r{i}") for i in range(200)]
    out, counters = masked({"p": 0.3}, rows)
    assert len(out) == 200 and 40 <= counters["masked"] <= 80
    chosen = {r.parent_ids[0] for r in out if r.parent_ids}
    out2, _ = masked({"p": 0.3}, list(reversed(rows)))
    assert {r.parent_ids[0] for r in out2 if r.parent_ids} == chosen
    plain, counters = masked({"p": 0.0}, rows[:5])
    assert [r.id for r in plain] == [r.id for r in rows[:5]] and "masked" not in counters
    both, _ = masked({"p": 1.0, "keep_original": True, "params": False}, rows[:1])
    assert both[0].id == "r0" and len(both) == 2
    assert json.loads(both[1].messages[2].tool_calls[0].arguments) == json.loads(ARGS)


def test_real_tool_specs_stay_valid_schemas(external_dir: Path) -> None:
    from jsonschema import Draft202012Validator

    tools = json.loads((external_dir / "tau-bench/retail/tools_openai.json").read_text())
    r = row().derive(tools=tools)
    [out], counters = masked({"p": 1.0}, [r])
    assert counters["functions_masked"] == len(tools)
    names = [t["function"]["name"] for t in out.tools]
    assert len(set(names)) == len(names) and all(n.startswith("func_") for n in names)
    for before, after in zip(tools, out.tools, strict=True):
        schema = after["function"]["parameters"]
        Draft202012Validator.check_schema(schema)
        assert set(schema.get("required", [])) <= set(schema.get("properties", {}))
        assert [p["description"] for p in schema["properties"].values()] == [
            p["description"] for p in before["function"]["parameters"]["properties"].values()
        ]


def test_a_share_outside_zero_to_one_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        build_stage("function_masking", {"p": 1.5})

"""Export: TRL/HF chat datasets that `datasets` and TRL read unchanged, and full JSONL rows.

Run: python -m pytest tests/store/test_export.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trajsynth.core import Message, ToolCall, Trajectory
from trajsynth.core.schema import json_schema
from trajsynth.store import ShardWriter
from trajsynth.store.export import export

datasets = pytest.importorskip("datasets")


def rows() -> list[Trajectory]:
    out = []
    for i in range(6):
        args = {"city": "Paris"} if i % 2 else {"amount": i, "to": "EUR", "strict": True}
        out.append(
            Trajectory(
                id=f"r{i}",
                task_id=f"t{i}",
                goal="g",
                domain="travel",
                capabilities=["single_call"],
                tools=[
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {
                                "type": "object",
                                "properties": {k: {"type": "string"} for k in args},
                            },
                        },
                    }
                ],
                messages=[
                    Message(role="user", content=f"request {i}"),
                    Message(
                        role="assistant",
                        reasoning="think",
                        tool_calls=[ToolCall(id=f"c{i}", name="f", arguments=json.dumps(args))],
                    ),
                    Message(role="tool", tool_call_id=f"c{i}", name="f", content='{"ok": true}'),
                    Message(role="assistant", content="done"),
                ],
                success=bool(i % 3),
                quality_score=0.5 + i / 20,
            )
        )
    return out


@pytest.fixture()
def shards(tmp_path: Path) -> Path:
    with ShardWriter(tmp_path / "in", shard_rows=4) as w:
        w.write(rows())
    return tmp_path / "in"


def test_trl_export_loads_with_datasets_and_trl(shards: Path, tmp_path: Path) -> None:
    n, path = export(shards, "trl", tmp_path / "trl")
    assert n == 6 and path.name == "train.jsonl"
    ds = datasets.load_dataset("json", data_files=str(path), split="train")
    assert ds.column_names == ["id", "messages", "tools"]
    ex = ds[1]
    call = ex["messages"][1]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "f"
    # arguments stay JSON text, so rows with different argument shapes do not merge
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert json.loads(ds[0]["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {
        "amount": 0,
        "to": "EUR",
        "strict": True,
    }
    assert ex["messages"][1]["reasoning_content"] == "think"
    assert ex["messages"][2]["tool_call_id"] == "c1"
    assert json.loads(ex["tools"])[0]["function"]["name"] == "f"
    from trl.data_utils import is_conversational

    assert is_conversational(ex)


def test_hf_export_round_trips(shards: Path, tmp_path: Path) -> None:
    n, path = export(shards, "hf", tmp_path / "hf")
    ds = datasets.load_from_disk(str(path))["train"]
    assert n == len(ds) == 6
    assert ds[3]["success"] is False and ds[1]["success"] is True
    assert ds[3]["quality_score"] == pytest.approx(0.65)


def test_jsonl_export_rows_match_the_json_schema(shards: Path, tmp_path: Path) -> None:
    import jsonschema

    n, path = export(shards, "jsonl", tmp_path / "all.jsonl")
    schema = json_schema()
    lines = path.read_text().splitlines()
    assert n == len(lines) == 6
    for line in lines:
        jsonschema.validate(json.loads(line), schema)
    back = Trajectory.model_validate_json(lines[4])
    assert back.model_dump(exclude={"created_at"}) == rows()[4].model_dump(exclude={"created_at"})


def test_unknown_format_is_a_user_error(shards: Path, tmp_path: Path) -> None:
    from trajsynth.core import UserError

    with pytest.raises(UserError, match="unknown export format 'csv'"):
        export(shards, "csv", tmp_path / "x")

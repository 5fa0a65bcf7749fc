"""Records ↔ record batches: one conversion each way, side outputs routed per name.

Run: python -m pytest tests/core/test_batch.py -q
"""

from __future__ import annotations

import json

from trajsynth.core import Message, Trajectory, to_batch, to_records
from trajsynth.core.batch import batches_by_output

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def _row(i: int, task: int = 0) -> Trajectory:
    return Trajectory(
        id=f"r{i}",
        task_id=f"t{task}",
        tools=TOOLS,
        ground_truth={"turns": [{"request": f"task {task}"}]},
        extra={"i": i},
        messages=[Message(role="user", content="hi"), Message(role="assistant", content="ok")],
    )


def test_round_trip_decodes_repeated_json_once_and_encodes_the_same_text() -> None:
    rows = [_row(i, task=i % 2) for i in range(6)]
    batch = to_batch(rows)
    assert batch.column("tools").to_pylist() == [json.dumps(TOOLS)] * 6
    back = to_records(batch)
    assert [r.model_dump() for r in back] == [r.model_dump() for r in rows]
    # the rows of one task share its ground truth, every row its domain's tools
    assert back[0].ground_truth is back[2].ground_truth
    assert back[0].ground_truth is not back[1].ground_truth
    assert all(r.tools is back[0].tools for r in back)
    # extra is the row's own
    assert back[0].extra is not back[2].extra
    assert to_batch(back).equals(batch)


def test_extra_holding_records_is_encoded_as_their_dump() -> None:
    row = _row(0).derive(extra={"msg": Message(role="user", content="x")})
    assert json.loads(to_batch([row]).column("extra")[0].as_py()) == {
        "msg": Message(role="user", content="x").model_dump()
    }


def test_batches_by_output_keeps_order_and_passes_batches_through() -> None:
    side = to_batch([_row(10), _row(11)])
    out = list(
        batches_by_output(
            [
                ("failed", _row(1)),
                (None, _row(2)),
                ("failed", side),
                ("failed", [_row(3), _row(4)]),
                (None, _row(5)),
                ("pairs", []),
            ]
        )
    )
    assert [(name, b.column("id").to_pylist()) for name, b in out] == [
        (None, ["r2", "r5"]),
        ("failed", ["r1"]),
        ("failed", ["r10", "r11"]),
        ("failed", ["r3", "r4"]),
    ]
    assert out[2][1] is side  # untouched, not converted to records and back


def test_ground_truth_and_toolset_are_parsed_once_per_json_text() -> None:
    from trajsynth.core import GroundTruth
    from trajsynth.envs.spec import Toolset

    rows = to_records(to_batch([_row(0), _row(1), _row(2, task=1)]))
    first, same, other = (r.ground_truth for r in rows)
    assert isinstance(first, GroundTruth) and GroundTruth.from_json(first) is first
    assert first is same and first is not other
    assert first.turns[0].request == "task 0" and other.turns[0].request == "task 1"
    # the column holds the full dump; an equal value built elsewhere hits the same entry
    text = to_batch([rows[0]]).column("ground_truth")[0].as_py()
    assert text == json.dumps(first.model_dump(mode="json"))
    assert GroundTruth.from_text(text) is first
    assert GroundTruth.from_json(first.model_dump(mode="json")) is first
    assert GroundTruth.from_json({"turns": [{"request": "task 0"}]}) == first
    assert GroundTruth.from_json(None) is None
    toolset = Toolset.shared(rows[0].tools)
    assert Toolset.shared(json.loads(json.dumps(TOOLS))) is toolset
    assert Toolset.shared(json.dumps(TOOLS)) is toolset
    assert toolset.names() == ["f"] and Toolset.shared(toolset) is toolset

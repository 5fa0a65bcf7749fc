"""The trajectory record: round trips, the generated schemas, versioning.

Run: python -m pytest tests/core/test_schema.py -q
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajsynth.core import (
    ARROW_SCHEMA,
    SCHEMA_VERSION,
    DataError,
    GoldCall,
    GoldTurn,
    GroundTruth,
    Judge,
    Message,
    SchemaVersionError,
    ToolCall,
    Trajectory,
    to_batch,
    to_records,
)
from trajsynth.core.schema import json_schema_text
from trajsynth.store import migrations, read_records, read_table, write_shard

REPO = Path(__file__).resolve().parents[2]


def full_record() -> Trajectory:
    """A row with every column set to a non-default value."""
    gt = GroundTruth(
        turns=[
            GoldTurn(
                request="Book FL12 for Ada",
                steps=[
                    [
                        GoldCall(
                            name="book_flight",
                            arguments={"flight_id": "FL12", "passenger": "Ada"},
                            output={"booking_id": "B1"},
                        )
                    ]
                ],
            )
        ],
        env_seed=3,
        final_state_hash="abc",
        required_outputs=["B1"],
    )
    return Trajectory(
        id=Trajectory.make_id("test", 1),
        task_id="task-1",
        goal="Book FL12 for Ada",
        domain="travel",
        capabilities=["single_call", "optional_params"],
        ground_truth=gt.model_dump(mode="json"),
        tools=[
            {
                "type": "function",
                "function": {
                    "name": "book_flight",
                    "parameters": {
                        "type": "object",
                        "properties": {"flight_id": {"type": "string"}},
                        "required": ["flight_id"],
                    },
                },
            }
        ],
        messages=[
            Message(role="system", content="You are helpful."),
            Message(role="user", content="Book FL12 for Ada"),
            Message(
                role="assistant",
                reasoning="I should book it.",
                tool_calls=[
                    ToolCall(
                        id="c1",
                        name="book_flight",
                        arguments='{"flight_id": "FL12", "passenger": "Ada"}',
                    )
                ],
            ),
            Message(
                role="tool", tool_call_id="c1", name="book_flight", content='{"booking_id": "B1"}'
            ),
            Message(role="assistant", content="Booked: B1."),
        ],
        step_rewards=[0.5, None],
        step_flags=[["calibrated"], []],
        success=True,
        reward=0.9,
        reward_components={"task": 1.0, "efficiency": -0.1},
        format_errors=["none really"],
        failure_layer=None,
        failure_reason=None,
        rollouts_total=8,
        rollouts_passed=3,
        quality_score=0.85,
        difficulty="medium",
        difficulty_score=0.5,
        cluster_id=4,
        judge=Judge(verdict="pass", score=0.9, rationale="fine"),
        method="test",
        stage_id="s1",
        parent_ids=["p1", "p2"],
        generator="sim-teacher",
        run_id="run-1",
        config_hash="cfg",
        iteration=2,
        seed=11,
        created_at=dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC),
        extra={"outline": ["a", "b"], "n": 1},
    )


def test_record_arrow_parquet_record_round_trip(tmp_path: Path) -> None:
    rec = full_record()
    batch = to_batch([rec])
    assert batch.schema.equals(ARROW_SCHEMA, check_metadata=True)
    write_shard(pa.Table.from_batches([batch]), tmp_path / "part-00000.parquet")
    back = read_records(tmp_path)
    assert back == [rec]
    assert back[0].num_turns == 2 and back[0].num_tool_calls == 1
    assert (
        GroundTruth.from_json(back[0].ground_truth).flat_calls()[0].arguments["passenger"] == "Ada"
    )


def test_empty_and_minimal_rows_round_trip() -> None:
    rec = Trajectory(id="x", task_id="t")
    assert to_records(to_batch([rec])) == [rec]


def test_every_column_comes_from_the_model() -> None:
    assert ARROW_SCHEMA.names == list(Trajectory.model_fields)
    assert ARROW_SCHEMA.field("messages").type.value_type.field(
        "tool_calls"
    ).type.value_type.names == ["id", "name", "arguments"]
    # JSON columns are text in Arrow, values in Python
    assert ARROW_SCHEMA.field("tools").type == pa.string()
    assert ARROW_SCHEMA.metadata[b"trajsynth.schema_version"] == str(SCHEMA_VERSION).encode()


def test_committed_json_schema_matches_generated() -> None:
    committed = (REPO / "schemas" / "trajectory.schema.json").read_text()
    assert committed == json_schema_text(), (
        "schemas/trajectory.schema.json is stale: run `trajsynth schema --write`"
    )
    schema = json.loads(committed)
    assert set(schema["properties"]) == set(Trajectory.model_fields)
    assert schema["x-schema-version"] == SCHEMA_VERSION


def test_json_schema_validates_exported_rows() -> None:
    import jsonschema

    schema = json.loads(json_schema_text())
    jsonschema.validate(full_record().model_dump(mode="json"), schema)
    bad = full_record().model_dump(mode="json")
    bad["messages"][0]["role"] = "robot"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_ids_are_deterministic() -> None:
    assert Trajectory.make_id("a", 1, {"x": [1]}) == Trajectory.make_id("a", 1, {"x": [1]})
    assert Trajectory.make_id("a", 1) != Trajectory.make_id("a", 2)


def test_step_annotations_must_align_with_assistant_turns() -> None:
    with pytest.raises(ValueError, match="align"):
        Trajectory(
            id="x",
            task_id="t",
            messages=[Message(role="assistant", content="hi")],
            step_rewards=[1.0, 0.0],
        )


def test_counts_are_derived_not_trusted() -> None:
    rec = Trajectory(
        id="x",
        task_id="t",
        num_turns=99,
        num_tool_calls=42,
        messages=[
            Message(
                role="assistant",
                tool_calls=[ToolCall(id="a", name="f"), ToolCall(id="b", name="g")],
            )
        ],
    )
    assert (rec.num_turns, rec.num_tool_calls) == (1, 2)


def test_derive_validates_changes_and_leaves_the_parent_alone() -> None:
    parent = full_record()
    child = parent.derive(
        id="child",
        messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}],
        step_rewards=[0.5],
        step_flags=[[]],
        judge={"verdict": "yes", "score": 1.0},
    )
    # changed values are validated and converted, the counts derived again
    assert isinstance(child.messages[0], Message) and isinstance(child.judge, Judge)
    assert (child.num_turns, child.num_tool_calls) == (1, 0)
    # unchanged values are carried over, and the parent is not touched
    assert (child.tools, child.ground_truth, child.created_at) == (
        parent.tools,
        parent.ground_truth,
        parent.created_at,
    )
    assert parent.id != "child" and parent.num_turns == 2
    assert child.messages is not parent.messages
    with pytest.raises(ValueError, match="align"):
        parent.derive(step_rewards=[1.0, 0.0, 0.5])
    with pytest.raises(ValueError, match="extra"):
        parent.derive(not_a_column=1)
    # the same row as a dump and rebuild would give
    same = parent.derive(goal="other")
    assert (
        same.model_dump()
        == Trajectory.model_validate({**parent.model_dump(), "goal": "other"}).model_dump()
    )


def _write_with_version(path: Path, version: int) -> None:
    table = pa.Table.from_batches([to_batch([full_record()])])
    table = table.replace_schema_metadata({b"trajsynth.schema_version": str(version).encode()})
    pq.write_table(table, path)


def test_other_schema_version_fails_with_clear_message(tmp_path: Path) -> None:
    path = tmp_path / "part-00000.parquet"
    _write_with_version(path, 99)
    with pytest.raises(SchemaVersionError, match=r"part-00000\.parquet.*version 99"):
        read_table(tmp_path)


def test_old_version_is_migrated_when_a_migration_exists(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "part-00000.parquet"
    _write_with_version(path, 0)

    def v0_to_current(table: pa.Table) -> tuple[pa.Table, int]:
        # pretend version 0 had no `extra`: the migration recomputes it
        idx = table.schema.get_field_index("extra")
        table = table.set_column(idx, "extra", pa.array(['{"migrated": true}'] * table.num_rows))
        return table, SCHEMA_VERSION

    monkeypatch.setitem(migrations.MIGRATIONS, 0, v0_to_current)
    rows = read_records(tmp_path)
    assert rows[0].extra == {"migrated": True}


def test_foreign_parquet_is_refused_naming_the_file(tmp_path: Path) -> None:
    pq.write_table(pa.table({"a": [1, 2]}), tmp_path / "foreign.parquet")
    with pytest.raises(DataError, match=r"foreign\.parquet.*not a trajsynth shard"):
        read_table(tmp_path)


def test_ground_truth_is_typed_when_built_or_read_and_written_as_its_json_dump() -> None:
    row = full_record()
    gt = row.ground_truth
    assert isinstance(gt, GroundTruth) and gt.turns[0].steps[0][0].name == "book_flight"
    # the column holds exactly the text the stages wrote when they stored the dump themselves
    text = json.dumps(gt.model_dump(mode="json"), ensure_ascii=False)
    batch = to_batch([row])
    assert batch.column("ground_truth").to_pylist() == [text]
    # read back: a GroundTruth again (parsed from the text), written back byte for byte
    back = to_records(batch)[0]
    assert isinstance(back.ground_truth, GroundTruth) and back.ground_truth == gt
    assert to_batch([back]).column("ground_truth").equals(batch.column("ground_truth"))
    # a row built from the column's text, as from_row and JSONL readers do
    assert Trajectory(id="x", task_id="t", ground_truth=text).ground_truth == gt


def test_ground_truth_written_by_older_code_as_a_partial_dict_still_reads() -> None:
    old = {"turns": [{"request": "hi", "steps": [[{"name": "f"}]]}]}
    table = to_batch([full_record()]).to_pydict()
    table["ground_truth"] = [json.dumps(old)]
    row = to_records(pa.Table.from_pydict(table, schema=ARROW_SCHEMA))[0]
    assert row.ground_truth == GroundTruth.model_validate(old)
    assert row.ground_truth.flat_calls()[0].arguments == {}


def test_a_ground_truth_that_is_no_ground_truth_is_refused() -> None:
    with pytest.raises(ValueError, match="ground_truth"):
        Trajectory(id="x", task_id="t", ground_truth={"turns": "not a list"})

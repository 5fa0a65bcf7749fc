"""``trajsynth query``: filters over shards (DuckDB over the verified reader), one row per
assistant step with its state change, old shards read through the schema migration, and
one clear error for an unknown column.

Run: python -m pytest tests/store/test_query.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajsynth.core.batch import to_batch
from trajsynth.core.errors import DataError, UserError
from trajsynth.core.schema import Trajectory
from trajsynth.pipeline import run_pipeline
from trajsynth.store import read_records, read_table
from trajsynth.store.query import Filters, query, step_rows

pytest.importorskip("duckdb")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rollouts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rej")
    run_pipeline("rejection", out=out, overrides=["stages.tasks.with.tasks_per_domain=2"])
    return out / "rollouts"


def test_filters_count_what_python_counts(rollouts: Path) -> None:
    rows = read_records(rollouts)
    assert query(rollouts, count=True) == len(rows)
    for f, keep in [
        (Filters(domain=["math"]), lambda r: r.domain == "math"),
        (Filters(outcome="success"), lambda r: r.success is True),
        (Filters(outcome="failed"), lambda r: r.success is False),
        (Filters(capability=["multi_call"]), lambda r: "multi_call" in r.capabilities),
        (
            Filters(domain=["travel", "files"], where="num_tool_calls >= 2"),
            lambda r: r.domain in ("travel", "files") and r.num_tool_calls >= 2,
        ),
        (Filters(method=["rejection_sampling"]), lambda r: r.method == "rejection_sampling"),
    ]:
        want = sum(1 for r in rows if keep(r))
        assert query(rollouts, f, count=True) == want, f
        got = query(rollouts, f, columns=["id", "domain"])
        assert sorted(got.column("id").to_pylist()) == sorted(r.id for r in rows if keep(r))
    assert 0 < query(rollouts, Filters(domain=["math"]), count=True) < len(rows)


def test_steps_are_one_row_per_assistant_step_with_the_state_change(rollouts: Path) -> None:
    rows = read_records(rollouts)
    steps = query(rollouts, Filters(domain=["travel"]), steps=True)
    travel = [r for r in rows if r.domain == "travel"]
    assert steps.num_rows == sum(r.num_turns for r in travel)
    by_id = {r.id: r for r in travel}
    changed = 0
    for s in steps.to_pylist():
        row = by_id[s["id"]]
        msg = row.assistant_steps()[s["step"]]
        if msg.tool_calls:
            assert s["call"] == ", ".join(c.name for c in msg.tool_calls)
            assert s["arguments"] is not None and s["result"] is not None
        else:
            assert s["call"] is None and s["result"] == msg.content
        assert s["state_diff"] == row.step_diffs[s["step"]]
        diff = json.loads(s["state_diff"])
        changed += bool(diff)
        assert all({"table", "key", "kind"} <= set(c) for c in diff)
        assert s["outcome"] == ("success" if row.success else "failed")
    assert changed, "a travel rollout books or cancels something: some step changes the state"
    # a limit counts steps, and the first ones come in row order
    assert query(rollouts, steps=True, limit=3).num_rows == 3
    every = query(rollouts, Filters(outcome="success"), steps=True).to_pylist()
    sliced = query(rollouts, Filters(outcome="success"), steps=True, limit=7).to_pylist()
    assert sliced == every[:7]


def test_step_view_marks_the_step_whose_call_failed() -> None:
    row = {
        "id": "r",
        "task_id": "t",
        "domain": "d",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}]},
            {"role": "tool", "tool_call_id": "c1", "content": '{"error": "nope"}'},
            {"role": "assistant", "content": "sorry"},
        ],
        "step_rewards": [0.0, 1.0],
        "step_flags": [[], []],
        "step_diffs": ["[]", "[]"],
        "success": False,
        "extra": json.dumps({"tool_errors": [{"step": 0, "type": "not_found"}]}),
    }
    first, second = step_rows(row)
    assert (first["verdict"], first["errors"], first["step_reward"]) == (
        "error",
        ["not_found"],
        0.0,
    )
    assert first["result"] == '{"error": "nope"}'
    assert (second["verdict"], second["call"], second["result"]) == ("ok", None, "sorry")


def test_shards_of_schema_version_1_are_read_through_the_migration(tmp_path: Path) -> None:
    row = Trajectory(id="old", task_id="t", domain="math", goal="g")
    table = pa.Table.from_batches([to_batch([row])]).drop_columns(["step_diffs", "env_version"])
    table = table.replace_schema_metadata({b"trajsynth.schema_version": b"1"})
    pq.write_table(table, tmp_path / "part-00000.parquet")
    old = read_records(tmp_path)[0]
    assert (old.step_diffs, old.env_version) == ([], "")
    assert read_table(tmp_path, columns=["id", "step_diffs"]).to_pylist() == [
        {"id": "old", "step_diffs": []}
    ]
    assert query(tmp_path, Filters(domain=["math"]), count=True) == 1


def test_an_unknown_column_is_one_message(rollouts: Path) -> None:
    with pytest.raises(UserError, match="unknown column 'nosuch'"):
        query(rollouts, Filters(where="nosuch > 1"), count=True)
    with pytest.raises(UserError, match=r"unknown column\(s\) \['nosuch'\]"):
        query(rollouts, columns=["id", "nosuch"])
    res = subprocess.run(
        [sys.executable, "-m", "trajsynth", "query", str(rollouts), "--where", "nosuch = 1"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and "unknown column 'nosuch'" in res.stderr
    assert "Traceback" not in res.stderr


def test_cli_writes_jsonl_and_parquet(rollouts: Path, tmp_path: Path) -> None:
    base = [sys.executable, "-m", "trajsynth", "query", str(rollouts), "--domain", "commerce"]
    res = subprocess.run([*base, "--count"], cwd=REPO, capture_output=True, text=True)
    n = int(res.stdout.strip())
    assert n > 0
    res = subprocess.run(
        [*base, "--steps", "--format", "parquet", "--out", str(tmp_path / "s.parquet")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    steps = pq.read_table(tmp_path / "s.parquet")
    assert set(steps.column("domain").to_pylist()) == {"commerce"}
    assert "state_diff" in steps.column_names
    res = subprocess.run(
        [*base, "--format", "jsonl", "--columns", "id,success"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert len(lines) == n and set(lines[0]) == {"id", "success"}


def test_a_corrupt_shard_is_refused_by_query_too(rollouts: Path, tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(rollouts.parent, run)
    shard = sorted((run / "rollouts").glob("part-*.parquet"))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(DataError, match="corrupt shard"):
        query(run / "rollouts", count=True)

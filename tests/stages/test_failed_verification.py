"""Rows that fail verification never reach the final data by default (issue: with live tool
servers, `verify` printed "verified 42 → 42" while every replay failed, `filter` kept the rows,
and the run ended 0% successful with exit 0).

The rows here were played against a live service whose clock moves on between calls
(``live_tools.LiveService``): a recorded ``now`` result never equals its replay, so verify's
execution layer fails those rows; ``echo`` replays exactly.

- verify routes the rows that fail to its ``failed`` output with their reason, and keeps them
  on the main output only with ``keep_failed: true`` (marked, and counted in the summary line);
- filter drops rows that did not verify by default;
- ``trajsynth run`` says loudly when the final output is empty or mostly unverified and exits
  1 unless ``--allow-unverified``.

Run: python -m pytest tests/stages/test_failed_verification.py -q
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from stagerun import run_outputs

from trajsynth.core import Message, ToolCall, Trajectory, to_batch
from trajsynth.envs import EnvFactory
from trajsynth.stages import Context, ContextSpec
from trajsynth.store import read_records, write_shard

HERE = Path(__file__).resolve().parent
ENV = {"domains": [], "toolsets": {"live": {"backend": "code", "code": ["live_tools:LiveService"]}}}


@pytest.fixture(autouse=True)
def importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """``live_tools`` (next to this file, importable here through conftest.py) importable in
    the CLI's subprocesses too."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))


def rollout(i: int, tool: str) -> Trajectory:
    """One played call of ``tool``, as a rollout stage records it: the rollout counted it a
    success. ``now`` answered tick 0 when it was played; the service has moved on since."""
    factory = EnvFactory(ENV)
    env = factory.make("live")
    env.reset()
    args = {"text": f"hello {i}"} if tool == "echo" else {}
    call = ToolCall(id="c0", name=tool, arguments=json.dumps(args))
    seen = json.dumps({"tick": 0}) if tool == "now" else env.format_observation(env.execute(call))
    return Trajectory(
        id=f"{tool}-{i}",
        task_id=f"task-{tool}-{i}",
        goal=f"Use {tool}.",
        domain="live",
        tools=factory.toolset("live").to_openai(),
        messages=[
            Message(role="user", content=f"Use {tool}."),
            Message(role="assistant", reasoning="call it", tool_calls=[call]),
            Message(role="tool", tool_call_id="c0", name=tool, content=seen),
            Message(role="assistant", content=f"The service said {seen}."),
        ],
        success=True,
        method="rollout",
    )


def live() -> list[Trajectory]:
    return [rollout(i, "now") for i in range(4)]


def stable() -> list[Trajectory]:
    return [rollout(0, "echo")]


def run_verify(rows: list[Trajectory], **config) -> tuple[dict[str, list[Trajectory]], dict]:
    ctx = Context(ContextSpec(stage_id="verified", env=ENV))
    outs = {"main": [], "failed": [], **run_outputs("verify", config, rows, ctx)}
    return outs, ctx.metrics.snapshot()["counters"]


def test_rows_whose_replay_differs_go_to_the_failed_output() -> None:
    outs, counters = run_verify(live() + stable())
    assert [r.id for r in outs["main"]] == ["echo-0"] and outs["main"][0].success is True
    assert sorted(r.id for r in outs["failed"]) == [r.id for r in live()]
    for r in outs["failed"]:
        assert r.success is False and r.failure_layer == "execution"
        assert "now: the recorded result differs from the replayed one" in r.failure_reason
        assert r.reward_components["execution"] == 0.0 and r.reward_components["task"] == 0.0
    assert counters["failed"] == counters["failed.execution"] == 4 and counters["rows"] == 5


def test_keep_failed_keeps_them_on_the_main_output_marked() -> None:
    outs, counters = run_verify(live() + stable(), keep_failed=True)
    assert outs["failed"] == [] and len(outs["main"]) == 5
    assert sorted(r.id for r in outs["main"] if r.success is False) == [r.id for r in live()]
    assert counters["failed"] == 4


def test_filter_drops_rows_that_did_not_verify_by_default() -> None:
    outs, _ = run_verify(live() + stable(), keep_failed=True)
    ctx = Context(ContextSpec(stage_id="filtered"))
    kept = run_outputs("filter", {"min_quality": 0.0}, outs["main"], ctx)
    assert [r.id for r in kept["main"]] == ["echo-0"]
    counters = ctx.metrics.snapshot()["counters"]
    assert counters["dropped.unsuccessful"] == 4 and counters["kept"] == 1
    # kept on request
    ctx = Context(ContextSpec(stage_id="filtered"))
    kept = run_outputs("filter", {"min_quality": 0.0, "unsuccessful": False}, outs["main"], ctx)
    assert len(kept["main"]) == 5


# -- the run, as a user runs it ------------------------------------------------------------


def run_cli(tmp_path: Path, rows: list[Trajectory], verify: dict, filt: dict, *flags: str):
    """``trajsynth run`` of verify → filter on ``rows``; (process, run folder)."""
    write_shard(
        pa.Table.from_batches([to_batch(rows)]), tmp_path / "rollouts" / "part-00000.parquet"
    )
    pipe = tmp_path / "p.yaml"
    stages = [
        {"id": "verified", "uses": "verify", "from": str(tmp_path / "rollouts"), "with": verify},
        {
            "id": "filtered",
            "uses": "filter",
            "from": "verified",
            "with": {"min_quality": 0, **filt},
        },
    ]
    pipe.write_text(yaml.safe_dump({"name": "live", "defaults": {"env": ENV}, "stages": stages}))
    run = tmp_path / "run"
    res = subprocess.run(
        [sys.executable, "-m", "trajsynth", "run", str(pipe), "--out", str(run), *flags],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in res.stderr + res.stdout
    return res, run


def test_a_run_whose_rows_all_fail_verification_says_so_and_exits_1(tmp_path: Path) -> None:
    res, run = run_cli(tmp_path, live(), {}, {})
    assert res.returncode == 1, res.stderr
    assert "verified (verify): 4 → 0 rows (+ failed 4)" in res.stderr
    assert "WARNING: the run's final output is empty" in res.stderr
    assert "set aside on the way (failed, rejected, dropped): verified:failed 4" in res.stderr
    assert "--allow-unverified" in res.stderr and "error: the run's final output" in res.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    check = manifest["final_output"]
    assert check["stage"] == "filtered" and check["rows"] == 0 and check["mostly_unverified"]
    failed = read_records(run / "verified" / "failed")
    assert len(failed) == 4 and all(r.failure_layer == "execution" for r in failed)
    assert "final output: the run's final output is empty" in (run / "logs" / "run.log").read_text()
    # and the quality report flags it
    report = subprocess.run(
        [sys.executable, "-m", "trajsynth", "report", str(run), "--out", str(tmp_path / "r.md")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    text = (tmp_path / "r.md").read_text()
    assert "## Final output (filtered: 0 rows, 100% not verified) — WARNING" in text
    assert "| set aside upstream: verified:failed | 4 |" in text


def test_kept_failures_make_a_mostly_unverified_output(tmp_path: Path) -> None:
    res, run = run_cli(tmp_path, live() + stable(), {"keep_failed": True}, {"unsuccessful": False})
    assert res.returncode == 1, res.stderr
    assert "verified (verify): 5 → 5 rows, 4 marked failed" in res.stderr
    assert "WARNING: the run's final output is mostly unverified: 80% of its 5 rows" in res.stderr
    assert "1 verified, 4 failed, 0 never verified" in res.stderr
    # accepted on request: still said, exit 0
    res = subprocess.run(
        [sys.executable, "-m", "trajsynth", "run", str(tmp_path / "p.yaml"), "--out", str(run),
         "--allow-unverified"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "warning: the run's final output is mostly unverified" in res.stderr
    assert json.loads((run / "manifest.json").read_text())["final_output"]["allowed"] is True


def test_filter_keeps_the_final_output_verified(tmp_path: Path) -> None:
    res, run = run_cli(tmp_path, live() + stable(), {"keep_failed": True}, {})
    assert res.returncode == 0, res.stderr
    assert "filtered (filter): 5 → 1 rows" in res.stderr and "WARNING" not in res.stderr
    check = json.loads((run / "manifest.json").read_text())["final_output"]
    assert (check["rows"], check["success"], check["mostly_unverified"]) == (1, 1, False)

"""Infrastructure is not the model: a rollout whose LLM request failed for good because of the
endpoint (retries exhausted, circuit open) is dropped and counted, never a ``generation``
rejection nor part of ``rollouts_total``; above ``--max-infra-error-rate`` the run stops with
one clear message, and the rerun plays exactly what was lost; a dead endpoint opens the
circuit breaker and the run ends quickly instead of spinning.

Run: PYTHONPATH=. python -m pytest tests/reliability/test_infra_errors.py -q
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from faultkit import FaultProxy

from trajsynth.core import Trajectory, to_batch, to_records
from trajsynth.core.errors import CircuitOpen, EndpointError, InfraError
from trajsynth.envs import EnvFactory
from trajsynth.llm.base import ChatRequest
from trajsynth.llm.client import reset_clients
from trajsynth.llm.limiter import CircuitBreaker
from trajsynth.llm.scripted import use_scripted
from trajsynth.llm.server import spawn_server
from trajsynth.pipeline.runner import run_pipeline
from trajsynth.pipeline.spec import resolve_pipeline
from trajsynth.stages import Context, ContextSpec, Emit, build_stage
from trajsynth.store import read_records

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with spawn_server("--backend", "sim") as srv:
        yield srv


def _pipe(clean_url: str, teacher_url: str, **teacher: Any) -> dict[str, Any]:
    """Magnet tasks (through the clean endpoint) → rejection sampling (teacher through
    ``teacher_url``); the tasks are cut in one-row shards, so every task is one unit."""
    common = {
        "backend": "openai",
        "model": "sim",
        "api_key": "none",
        "send_metadata": True,
        "timeout_s": 2.0,
        "backoff_base_s": 0.01,
    }
    return {
        "name": "infra",
        "defaults": {
            "seed": 0,
            "llm": {
                "*": {**common, "base_url": clean_url},
                "teacher": {**common, "base_url": teacher_url, **teacher},
            },
        },
        "stages": [
            {
                "id": "tasks",
                "uses": "magnet_tasks",
                "shard_rows": 1,
                "with": {
                    "tasks_per_domain": 4,
                    "domains": ["math"],
                    "graph": {"similarity": "lexical"},
                },
            },
            {"id": "rollouts", "uses": "rejection_sampling", "from": "tasks", "with": {"n": 4}},
        ],
    }


def _rows(run: Path) -> tuple[list[Trajectory], list[Trajectory]]:
    return read_records(run / "rollouts"), read_records(run / "rollouts" / "failed")


def _cli(args: list[str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "trajsynth", *args],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO,
    )  # fmt: skip


# -- the rollout, alone ------------------------------------------------------------------------


def _rejection(rows: list[Trajectory], ctx: Context, **cfg: Any) -> tuple[list, list]:
    stage = build_stage("rejection_sampling", {"first_step_n": False, **cfg})
    main, failed = [], []
    for out in stage.process(iter([to_batch(rows)]), ctx):
        if isinstance(out, Emit):
            failed += to_records(out.data)
        else:
            main += to_records(out)
    return main, failed


def test_an_infra_error_drops_the_rollout_a_refused_request_rejects_it() -> None:
    """One rollout's request fails for good because of the endpoint (InfraError): dropped and
    counted; the others are refused (a plain endpoint error, the request's own fault): those
    are rejections at the generation layer, and rollouts_total counts only them."""
    factory = EnvFactory()
    task = next(t for t in factory.example_tasks("travel") if t.task_id == "travel-convert")
    row = task.to_trajectory(factory.toolset("travel"))
    ctx = Context(ContextSpec(stage_id="rs", seed=0))
    lost_seed = ctx.row_seed(row.id, 0)

    def endpoint(req: ChatRequest) -> str:
        if req.seed == lost_seed:
            raise InfraError("http://x (sim): failed after 2 attempts: HTTP 500: injected")
        raise EndpointError("http://x (sim): HTTP 400: context too long")

    use_scripted(ctx, "teacher", endpoint)
    main, failed = _rejection([row], ctx, n=4)
    assert main == [] and len(failed) == 3
    assert {r.failure_layer for r in failed} == {"generation"}
    assert all("HTTP 400" in (r.failure_reason or "") for r in failed)
    assert {r.rollouts_total for r in failed} == {3}
    assert sorted(r.extra["rollout"] for r in failed) == [1, 2, 3]
    c = ctx.metrics.snapshot()
    assert c["counters"]["infra.lost"] == 1 and c["counters"]["infra.units"] == 4
    assert c["counters"]["rollouts"] == 3 and c["counters"]["rejected.generation"] == 3
    assert "HTTP 500" in c["values"]["infra.last_error"]
    assert c["values"]["infra.unit"] == "rollouts"

    # every request failing for good: no row at all, the four rollouts counted as lost
    ctx = Context(ContextSpec(stage_id="rs", seed=0))

    def down(req: ChatRequest) -> str:
        raise InfraError("still failing")

    use_scripted(ctx, "teacher", down)
    assert _rejection([row], ctx, n=4, first_step_n=True) == ([], [])
    assert ctx.metrics.snapshot()["counters"]["infra.lost"] == 4


# -- through a faulty endpoint ------------------------------------------------------------------


def test_hard_faults_with_one_retry_are_counted_not_rejected(server: Any, tmp_path: Path) -> None:
    """30% of the teacher's requests answer 500 and the client retries once: some rollouts
    are lost to the endpoint. None of them is a rejection row; every task's rollouts_total is
    the number of its rows; the stage's metrics count what was lost."""
    reset_clients()
    try:
        with FaultProxy(server.base_url, rate=0.3, faults=("500",), seed=5) as proxy:
            result = run_pipeline(
                resolve_pipeline(
                    _pipe(server.base_url, proxy.base_url, max_retries=1),
                    overrides=["defaults.max_infra_error_rate=1"],
                ),
                out=tmp_path / "run",
            )
            faults = proxy.counts["500"]
    finally:
        reset_clients()
    assert faults > 0
    main, failed = _rows(tmp_path / "run")
    counters = result.manifest.stages["rollouts"].metrics["counters"]
    lost, units = counters["infra.lost"], counters["infra.units"]
    assert units == 4 * result.manifest.stages["rollouts"].rows_in
    assert lost > 0 and len(main) + len(failed) == units - lost == counters["rollouts"]
    assert not [r for r in failed if r.failure_layer == "generation"]
    assert not [r for r in failed if "HTTP 500" in (r.failure_reason or "")]
    per_task = Counter(r.task_id for r in main + failed)
    assert all(r.rollouts_total == per_task[r.task_id] for r in main + failed)
    assert counters["llm.teacher.infra_errors"] >= 1


def test_above_the_limit_the_run_stops_clearly_and_the_rerun_plays_what_was_lost(
    server: Any, tmp_path: Path
) -> None:
    """Through the CLI: 40% of requests answer 500 with no retry → the rollout stage loses
    more than 1% → exit 1, one message naming the stage, the share and the last error, no
    traceback; the units that lost rollouts are not committed, so once the endpoint is healthy
    the rerun plays exactly them and the result equals a run that never saw a fault."""
    with FaultProxy(server.base_url, rate=0.4, faults=("500",), seed=1) as proxy:
        pipe = tmp_path / "pipe.yaml"
        pipe.write_text(yaml.safe_dump(_pipe(server.base_url, proxy.base_url, max_retries=0)))
        run = tmp_path / "run"
        res = _cli(["run", str(pipe), "--out", str(run), "-q", "--max-infra-error-rate", "0.01"])
        out = res.stdout + res.stderr
        assert res.returncode == 1, out
        assert "Traceback" not in out
        assert "stage 'rollouts' (rejection_sampling)" in out and "lost to LLM endpoint" in out
        assert "above max_infra_error_rate=0.01" in out and "HTTP 500" in out
        manifest = json.loads((run / "manifest.json").read_text())
        state = manifest["stages"]["rollouts"]
        assert state["status"] == "failed" and "lost to LLM endpoint" in state["error"]
        tasks = state["rows_in"]
        assert tasks >= 2 and len(state["units"]) < tasks  # the units that lost are not done
        # the endpoint recovers: the rerun resumes the stage and completes it
        proxy.rate = 0.0
        reset_clients()
        try:
            again = run_pipeline(
                resolve_pipeline(
                    yaml.safe_load(pipe.read_text()),
                    overrides=["defaults.max_infra_error_rate=0.01"],
                ),
                out=run,
            )
            clean = run_pipeline(
                resolve_pipeline(_pipe(server.base_url, server.base_url)), out=tmp_path / "clean"
            )
        finally:
            reset_clients()
    assert "tasks" in again.skipped and "rollouts" in again.resumed
    counters = again.manifest.stages["rollouts"].metrics["counters"]
    assert counters.get("infra.lost", 0) == 0 and counters["infra.units"] == 4 * tasks
    ids = [sorted(r.id for r in rows) for rows in _rows(run)]
    assert ids == [sorted(r.id for r in rows) for rows in _rows(tmp_path / "clean")]
    assert ids[0] + ids[1] and clean.manifest.stages["rollouts"].status == "done"


def test_a_dead_endpoint_opens_the_circuit_and_the_run_ends_quickly(
    server: Any, tmp_path: Path
) -> None:
    """Every teacher request answers 500: after 5 failed attempts the breaker says so once and
    pauses, the probe fails, requests then fail fast; the run stops with the clear message in
    seconds, having sent a bounded number of requests."""
    with FaultProxy(server.base_url, rate=1.0, faults=("500",)) as proxy:
        pipe = tmp_path / "pipe.yaml"
        teacher = {"max_retries": 3, "circuit_failures": 5, "circuit_pause_s": 0.5}
        pipe.write_text(yaml.safe_dump(_pipe(server.base_url, proxy.base_url, **teacher)))
        start = time.perf_counter()
        res = _cli(["run", str(pipe), "--out", str(tmp_path / "run"), "-q"])
        took = time.perf_counter() - start
        sent = proxy.counts["requests"]
    out = res.stdout + res.stderr
    assert res.returncode == 1 and "Traceback" not in out
    assert out.count("5 consecutive failures, pausing 0.5s") == 1
    assert "failing requests fast" in out
    assert "stage 'rollouts' (rejection_sampling)" in out and "circuit open" in out
    assert "lost to LLM endpoint errors (100.0%)" in out
    # 16 rollouts × 4 attempts without the breaker; with it, about the first failures
    assert sent < 40, sent
    assert took < 60, took


def test_the_breaker_pauses_probes_and_closes_when_the_endpoint_answers() -> None:
    async def main() -> list[str]:
        b = CircuitBreaker(3, 0.05, where="http://x (m)", role="teacher")
        seen = []
        for _ in range(3):
            assert await b.before() is False
            b.on_failure("HTTP 500", probe=False)
        assert b.state == "open" and b.opened == 1
        t = time.monotonic()
        probe = await b.before()  # waits out the pause, then probes
        seen.append(f"probe={probe} waited={time.monotonic() - t >= 0.04}")
        waiter = asyncio.ensure_future(b.before())  # another attempt waits for the probe
        await asyncio.sleep(0.01)
        assert not waiter.done()
        b.on_failure("HTTP 500", probe=True)  # the probe failed: failing fast now
        with pytest.raises(CircuitOpen, match="circuit open for role teacher"):
            await waiter
        with pytest.raises(CircuitOpen):
            await b.before()
        await asyncio.sleep(0.06)
        assert await b.before() is True  # a probe per pause still goes through
        b.on_answer()
        assert b.state == "closed" and await b.before() is False
        seen.append(f"opened={b.opened}")
        return seen

    assert asyncio.run(main()) == ["probe=True waited=True", "opened=2"]
    off = CircuitBreaker(0, 1.0, where="x", role="r")
    for _ in range(100):
        off.on_failure("HTTP 500", probe=False)
    assert off.state == "closed"

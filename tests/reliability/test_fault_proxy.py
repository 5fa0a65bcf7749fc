"""An LLM pipeline through the fault-injecting proxy (20% of requests: 429 with and without
``retry-after``, 500, hangs, truncated bodies): it completes with exactly the rollouts of a
clean run, and a hung request costs one request timeout.

Run: PYTHONPATH=. python -m pytest tests/reliability/test_fault_proxy.py -q
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pyarrow.parquet as pq
from faultkit import FaultProxy

from trajsynth.llm.base import ChatRequest, RoleConfig
from trajsynth.llm.client import reset_clients
from trajsynth.llm.openai_backend import OpenAIBackend, aclose_http_clients
from trajsynth.llm.server import spawn_server
from trajsynth.pipeline.runner import run_pipeline
from trajsynth.pipeline.spec import resolve_pipeline


def _pipe(base_url: str) -> dict:
    llm = {
        "*": {
            "backend": "openai",
            "base_url": base_url,
            "model": "sim",
            "api_key": "none",
            "send_metadata": True,
            "timeout_s": 1.0,
            "backoff_base_s": 0.05,
        }
    }
    return {
        "name": "faults",
        "defaults": {"seed": 0, "shard_rows": 100, "llm": llm},
        "stages": [
            {
                "id": "tasks",
                "uses": "magnet_tasks",
                "with": {
                    "tasks_per_domain": 3,
                    "domains": ["math"],
                    "graph": {"similarity": "lexical"},
                },
            },
            {"id": "rollouts", "uses": "rejection_sampling", "from": "tasks", "with": {"n": 2}},
        ],
    }


def _ids(run: Path) -> list[str]:
    ids: list[str] = []
    for folder in (run / "rollouts", run / "rollouts" / "failed"):
        for shard in sorted(folder.glob("*.parquet")):
            ids += pq.read_table(shard, columns=["id"]).column("id").to_pylist()
    return sorted(ids)


def test_twenty_percent_faults_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    reset_clients()
    try:
        with spawn_server("--backend", "sim") as server:
            run_pipeline(resolve_pipeline(_pipe(server.base_url)), out=tmp_path / "clean")
            reset_clients()
            with FaultProxy(server.base_url, rate=0.2, seed=3, hang_s=30, max_requests=5000) as px:
                run_pipeline(resolve_pipeline(_pipe(px.base_url)), out=tmp_path / "faulty")
                counts = dict(px.counts)
    finally:
        reset_clients()
    assert sum(v for k, v in counts.items() if k not in ("ok", "requests")) > 0
    clean, faulty = _ids(tmp_path / "clean"), _ids(tmp_path / "faulty")
    assert clean and faulty == clean  # none lost, none duplicated


def test_a_hung_request_costs_one_timeout() -> None:
    async def ask(base_url: str) -> tuple[float, int]:
        cfg = RoleConfig(
            backend="openai", base_url=base_url, model="sim", api_key="none", timeout_s=1.0,
            backoff_base_s=0.01, max_retries=3,
        )  # fmt: skip
        backend = OpenAIBackend(cfg, role="teacher")
        request = ChatRequest(messages=[{"role": "user", "content": "hi"}])
        start = time.perf_counter()
        reply = await backend.complete(request)
        took = time.perf_counter() - start
        await aclose_http_clients()
        return took, reply.attempts

    with (
        spawn_server("--backend", "sim") as server,
        FaultProxy(server.base_url, faults=("hang",), hang_s=30) as proxy,
    ):
        proxy.rate_schedule = [1.0]  # the first request hangs, no other
        took, attempts = asyncio.run(ask(proxy.base_url))
    assert attempts == 2
    assert 0.9 < took < 2.5

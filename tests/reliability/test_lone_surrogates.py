"""An endpoint that answers some requests with a JSON-escaped lone surrogate in the content
(``"Done \\ud83d"``, valid JSON, and models do emit it): the run completes and every row,
cache line and log line is valid UTF-8.

Run: PYTHONPATH=. python -m pytest tests/reliability/test_lone_surrogates.py -q
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from faultkit import FaultProxy

from trajsynth.llm.client import reset_clients
from trajsynth.llm.server import spawn_server
from trajsynth.pipeline.runner import run_pipeline
from trajsynth.pipeline.spec import resolve_pipeline

PIPE = {
    "name": "surrogates",
    "defaults": {"seed": 0, "shard_rows": 50},
    "stages": [
        {
            "id": "tasks",
            "uses": "magnet_tasks",
            "with": {"tasks_per_domain": 4, "domains": ["math"]},
        },
        {"id": "rollouts", "uses": "rejection_sampling", "from": "tasks", "with": {"n": 2}},
    ],
}


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@pytest.mark.parametrize("cache", [True, False])
def test_run_completes_and_every_row_is_valid_utf8(tmp_path: Path, cache: bool) -> None:
    reset_clients()
    try:
        with (
            spawn_server("--backend", "sim") as server,
            FaultProxy(server.base_url, rate=0.3, faults=("surrogate",), seed=1) as proxy,
        ):
            llm = {
                "*": {
                    "backend": "openai",
                    "base_url": proxy.base_url,
                    "model": "sim",
                    "api_key": "none",
                    "send_metadata": True,
                    "cache": cache,
                }
            }
            raw = {**PIPE, "defaults": {**PIPE["defaults"], "llm": llm}}
            result = run_pipeline(resolve_pipeline(raw), out=tmp_path / "run")
            injected = proxy.counts["surrogate"]
    finally:
        reset_clients()
    assert result.executed == ["tasks", "rollouts"]
    assert injected > 0
    rows = 0
    seen_replacement = False
    for shard in sorted((tmp_path / "run").rglob("*.parquet")):
        for row in pq.read_table(shard).to_pylist():
            rows += 1
            for s in _strings(row):
                s.encode("utf-8")  # raises on a lone surrogate
                assert "\x00" not in s
                seen_replacement |= "\ufffd" in s
    assert rows > 0
    assert seen_replacement  # the damaged replies are in the data, cleaned
    for f in (tmp_path / "run").rglob("*"):
        if f.is_file() and f.suffix in (".jsonl", ".log", ".json"):
            f.read_bytes().decode("utf-8")

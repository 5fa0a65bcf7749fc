"""A run on ``backend: openai_batch`` killed (SIGKILL) while batches are in flight resumes by
collecting those batches: the server sees no batch submitted twice and no request in two
batches, and the resumed run writes every row exactly once — the rows of the same run made
live, uninterrupted. Against `trajsynth serve --backend sim --batch-delay` on 127.0.0.1.

Run: PYTHONPATH=. python -m pytest tests/llm/test_batch_resume.py -q
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from trajsynth.pipeline.runner import run_pipeline
from trajsynth.pipeline.spec import resolve_pipeline

REPO = Path(__file__).resolve().parents[2]
N = 4


def spec(base_url: str, backend: str) -> dict[str, Any]:
    teacher = {
        "backend": backend,
        "base_url": base_url,
        "model": "sim",
        "send_metadata": True,
        "prices": {"prompt_per_mtok": 1.0, "completion_per_mtok": 4.0},
        "batch": {"flush_idle_s": 0.05, "poll_s": 0.05},
    }
    return {
        "name": "rejection-batch",
        "defaults": {"seed": 0, "llm": {"teacher": teacher}},
        "stages": [
            {
                "id": "tasks",
                "uses": "magnet_tasks",
                "with": {
                    "tasks_per_domain": 3,
                    "domains": ["math", "files"],
                    "graph": {"similarity": "lexical"},
                },
            },
            {"id": "rollouts", "uses": "rejection_sampling", "from": "tasks", "with": {"n": N}},
            {"id": "verified", "uses": "verify", "from": "rollouts"},
            {"id": "filtered", "uses": "filter", "from": "verified"},
        ],
    }


def rows(out: Path, *folders: str) -> list[tuple[str, str]]:
    """(id, messages) of every row in the folders' shards (duplicates kept)."""
    found = []
    for folder in folders:
        for shard in sorted((out / folder).glob("*.parquet")):
            t = pq.read_table(shard, columns=["id", "messages"]).to_pylist()
            found += [(r["id"], json.dumps(r["messages"], sort_keys=True)) for r in t]
    return sorted(found)


def get(base_url: str, path: str) -> Any:
    url = base_url.rsplit("/v1", 1)[0] + path
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def journal(out: Path) -> list[dict[str, Any]]:
    path = out / "batches" / "journal.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]


@pytest.mark.slow
def test_killed_run_collects_its_batches_and_writes_every_row_once(
    serve: Any, tmp_path: Path
) -> None:
    server = serve("--batch-delay", "0.5")
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(spec(server.base_url, "openai_batch")))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "trajsynth", "run", str(tmp_path / "p.yaml"), "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=str(REPO))

    # 1) the first run, killed once a batch it recorded is in flight (and at least one done)
    first = subprocess.Popen(
        [*cmd, "-q"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    in_flight: set[str] = set()
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and first.poll() is None:
            events = journal(out)
            submitted = {e["batch"] for e in events if e["event"] == "submitted"}
            collected = {e["batch"] for e in events if e["event"] == "collected"}
            running = {
                b["id"]
                for b in get(server.base_url, "/v1/batches")["data"]
                if b["status"] == "in_progress"
            }
            in_flight = (submitted - collected) & running
            if collected and in_flight:
                os.killpg(first.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert first.returncode == -signal.SIGKILL, first.stderr.read()  # type: ignore[union-attr]
    assert in_flight, "the run ended before a batch was in flight"
    before = server.metrics()

    # 2) resumed: the in-flight batches are collected, nothing is submitted again
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    m = server.metrics()
    assert m["batch_custom_ids_repeated"] == 0  # no request sent in two batches
    assert m["batches_created"] == m["files_uploaded"]  # one batch per uploaded file
    events = journal(out)
    submitted = [e["batch"] for e in events if e["event"] == "submitted"]
    assert len(submitted) == len(set(submitted)) == m["batches_created"]
    collected = {e["batch"] for e in events if e["event"] == "collected"}
    assert collected == set(submitted) and in_flight <= collected
    assert m["batches_created"] > before["batches_created"]  # the rest of the run went on
    assert "cost per accepted trajectory: $" in " ".join(second.stdout.split())

    # 3) every row exactly once, and the rows of the same run made live
    live_out = tmp_path / "live"
    run_pipeline(resolve_pipeline(spec(server.base_url, "openai"), output=str(live_out)),
                 out=live_out)  # fmt: skip
    resumed_rollouts = rows(out, "rollouts", "rollouts/failed")
    assert len({i for i, _ in resumed_rollouts}) == len(resumed_rollouts)
    assert resumed_rollouts == rows(live_out, "rollouts", "rollouts/failed")
    assert len(resumed_rollouts) == N * len(rows(out, "tasks"))
    accepted = rows(out, "filtered")
    assert accepted and accepted == rows(live_out, "filtered")
    assert len({i for i, _ in accepted}) == len(accepted)

"""A stage that yields too few rows fails the run (``min_rows``, default 1 for source stages)
with the reasons it counted, and its empty result is not cached as done.

Run: PYTHONPATH=. python -m pytest tests/cli/test_min_rows.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

PY = [sys.executable, "-m", "trajsynth"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PY, *args], capture_output=True, text=True, timeout=300)


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_source_that_yields_nothing_fails_with_its_reasons(tmp_path: Path) -> None:
    # every gold call is answered from an empty record file: each candidate is dropped
    records = tmp_path / "records.jsonl"
    records.write_text("")
    pipe = write(
        tmp_path / "p.yaml",
        {
            "name": "empty",
            "defaults": {
                "seed": 0,
                "env": {"domains": ["math"], "recording": "replay", "records": str(records)},
            },
            "stages": [
                {
                    "id": "tasks",
                    "uses": "magnet_tasks",
                    "with": {"tasks_per_domain": 2, "graph": {"similarity": "lexical"}},
                }
            ],
        },
    )
    run_dir = tmp_path / "run"
    for _ in range(2):  # the rerun runs the stage again and fails the same way
        res = cli("run", str(pipe), "--out", str(run_dir))
        assert res.returncode != 0
        assert "stage 'tasks' (magnet_tasks) yielded 0 rows, fewer than min_rows=1" in res.stderr
        assert "it counted: dropped.call_failed 12" in res.stderr
        assert "cached" not in res.stderr and "Traceback" not in res.stderr
        state = json.loads((run_dir / "manifest.json").read_text())["stages"]["tasks"]
        assert state["status"] == "failed" and "dropped.call_failed" in state["error"]


def test_min_rows_is_configurable(tmp_path: Path) -> None:
    raw = {"id": "raw", "uses": "synthetic", "with": {"rows": 0}, "min_rows": 0}
    pick = {"id": "pick", "uses": "sample", "from": "raw", "with": {"n": 5}}
    pipe = write(tmp_path / "p.yaml", {"name": "ok", "stages": [raw, pick]})
    res = cli("run", str(pipe), "--out", str(tmp_path / "a"))
    assert res.returncode == 0, res.stderr  # an empty source allowed by min_rows: 0
    raw = {"id": "raw", "uses": "synthetic", "with": {"rows": 3}}
    pipe = write(tmp_path / "q.yaml", {"name": "ok", "stages": [raw, {**pick, "min_rows": 4}]})
    res = cli("run", str(pipe), "--out", str(tmp_path / "b"))
    assert res.returncode != 0
    assert "stage 'pick' (sample) yielded 3 rows, fewer than min_rows=4" in res.stderr
    raw = {"id": "raw", "uses": "synthetic", "with": {"rows": 0}}
    pipe = write(tmp_path / "r.yaml", {"name": "ok", "stages": [raw]})
    res = cli("run", str(pipe), "--out", str(tmp_path / "c"))
    assert res.returncode != 0 and "yielded 0 rows, fewer than min_rows=1" in res.stderr

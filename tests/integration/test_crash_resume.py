"""Exactly-once under SIGKILL: kill a running pipeline at random moments, rerun it, and the
final output holds exactly the rows of an uninterrupted run (no duplicate, none missing).

The pipeline has all three stage kinds (a source, a map stage run in a process pool with a
side output, global stages), small shards so that kills land between and inside commits, and
is killed as a whole process group (the driver and its workers), as a crash would.

Run: python -m pytest tests/integration/test_crash_resume.py -q
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from trajsynth.store import read_table

PIPELINE = {
    "name": "crash",
    # synthetic rows are marked successful at random: half the final output is not
    "defaults": {
        "seed": 7,
        "shard_rows": 250,
        "workers": 2,
        "pool_min_rows": 0,
        "allow_unverified": True,
    },
    "stages": [
        {
            "id": "raw",
            "uses": "synthetic",
            "with": {"rows": 8000, "batch_rows": 100, "duplicate_rate": 0.05},
        },
        {"id": "parts", "uses": "split", "from": "raw", "with": {"eval_fraction": 0.3}},
        {"id": "evalpick", "uses": "sample", "from": "parts:eval", "with": {"n": 900}},
        {"id": "final", "uses": "concat", "from": ["parts", "evalpick", "raw"]},
    ],
}
SINKS = ("final", "parts", "parts/eval", "evalpick")


def start(pipe: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "trajsynth", "run", str(pipe), "--out", str(out), "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def wait_until_running(run: Path, stage: str, proc: subprocess.Popen) -> bool:
    """Poll the manifest until ``stage`` is running; False if the run ended first."""
    while proc.poll() is None:
        try:
            manifest = json.loads((run / "manifest.json").read_text())
        except (OSError, ValueError):
            manifest = {"stages": {}}
        if manifest["stages"].get(stage, {}).get("status") == "running":
            return True
        time.sleep(0.02)
    return False


def ids_of(run: Path, stage: str) -> list[str]:
    return read_table(run / stage, columns=["id"]).column("id").to_pylist()


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume(tmp_path: Path) -> None:
    pipe = tmp_path / "p.yaml"
    pipe.write_text(yaml.safe_dump(PIPELINE))

    # the reference: one uninterrupted run, timed to choose the kill points
    ref = tmp_path / "ref"
    proc = start(pipe, ref)
    assert proc.wait(timeout=600) == 0, proc.stderr.read().decode()
    expected = {s: ids_of(ref, s) for s in SINKS}
    assert len(expected["final"]) == len(set(expected["final"])) == 8000

    rng = random.Random(1234)
    run = tmp_path / "run"
    kills = 0
    stages_hit: set[str] = set()
    # Each attempt waits until a chosen stage is running, then kills after a random delay, so
    # the kills land in every kind of stage: the source (twice), the map stage in its process
    # pool (twice), and both global stages.
    for target in ("raw", "raw", "parts", "parts", "evalpick", "final"):
        proc = start(pipe, run)
        if wait_until_running(run, target, proc):
            time.sleep(rng.uniform(0.0, 0.6))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                kills += 1
        proc.wait(timeout=600)
        manifest = json.loads((run / "manifest.json").read_text())
        stages_hit |= {sid for sid, st in manifest["stages"].items() if st["status"] == "running"}
        # what the manifest says is committed really is on disk, in full
        for sid, st in manifest["stages"].items():
            for name, out in st["outputs"].items():
                folder = run / sid if name == "main" else run / sid / name
                for shard in out["shards"]:
                    assert (folder / shard["file"]).stat().st_size == shard["bytes"]
    assert kills >= 5, f"only {kills} kills landed mid-run"
    assert len(stages_hit) >= 3, f"kills only ever interrupted {stages_hit}"

    proc = start(pipe, run)
    assert proc.wait(timeout=600) == 0, proc.stderr.read().decode()
    for sink in SINKS:
        got = ids_of(run, sink)
        assert len(got) == len(set(got)), f"{sink}: duplicate ids after resume"
        assert sorted(got) == sorted(expected[sink]), f"{sink}: rows lost or added"
    # and the content matches too, not just the ids
    final = read_table(run / "final", columns=["id", "goal", "success"])
    ref_final = read_table(ref / "final", columns=["id", "goal", "success"])
    assert final.sort_by("id").equals(ref_final.sort_by("id"))
    manifest = json.loads((run / "manifest.json").read_text())
    assert all(st["status"] == "done" for st in manifest["stages"].values())
    assert sum(st["resumes"] for st in manifest["stages"].values()) >= 1
    assert not list(run.rglob(".tmp-*"))

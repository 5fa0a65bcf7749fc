"""The Ray executor runs the same stages, unchanged, and writes the same rows.

Run: python -m pytest tests/pipeline/test_ray.py -q   (skipped without the `ray` extra)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trajsynth.core import sockets
from trajsynth.pipeline import run_pipeline
from trajsynth.pipeline.spec import resolve_pipeline
from trajsynth.store import read_table

ray = pytest.importorskip("ray")

PIPE = {
    "name": "ray",
    "defaults": {"seed": 2, "shard_rows": 100, "pool_min_rows": 0},
    "stages": [
        {"id": "raw", "uses": "synthetic", "with": {"rows": 600}},
        {"id": "parts", "uses": "split", "from": "raw", "with": {"eval_fraction": 0.3}},
        {"id": "pick", "uses": "sample", "from": "parts:eval", "with": {"n": 40}},
    ],
}


@pytest.mark.slow
def test_ray_executor_matches_local(tmp_path: Path) -> None:
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}},
        _temp_dir=sockets.ray_temp_dir(),  # None: Ray's default fits its socket paths
    )
    try:
        local = run_pipeline(resolve_pipeline(PIPE), out=tmp_path / "local")
        remote = run_pipeline(
            resolve_pipeline(PIPE, overrides=["defaults.executor=ray"]), out=tmp_path / "ray"
        )
    finally:
        ray.shutdown()
    assert remote.executed == local.executed == ["raw", "parts", "pick"]
    assert len(remote.manifest.stages["parts"].units) == 6  # one Ray task per input shard
    for stage in ("parts", "parts/eval", "pick"):
        a = read_table(tmp_path / "local" / stage, columns=["id", "goal"]).sort_by("id")
        b = read_table(tmp_path / "ray" / stage, columns=["id", "goal"]).sort_by("id")
        assert a.equals(b), stage

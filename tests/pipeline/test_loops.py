"""Loops and artifacts: a loop block unrolls into per-iteration stages wired by `carry`, and
`needs:` passes one stage's artifact folder (a checkpoint) to another, with caching.

Run: python -m pytest tests/pipeline/test_loops.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trajsynth.core import ConfigError
from trajsynth.pipeline import run_pipeline
from trajsynth.pipeline.spec import resolve_pipeline
from trajsynth.stages import GlobalStage, StageConfig, register


@register
class FitCounter(GlobalStage):
    """Test stage: 'trains' by counting rows; writes a checkpoint chained to the one it needs."""

    name = "test_fit_counter"
    makes_artifact = True

    class Config(StageConfig):
        pass

    def process(self, batches, ctx):
        rows = sum(b.num_rows for b in batches)
        previous = [json.loads((p / "ckpt.json").read_text()) for p in ctx.needed_artifacts()]
        (ctx.artifacts_dir / "ckpt.json").write_text(
            json.dumps({"iteration": ctx.iteration, "rows": rows, "previous": previous})
        )
        yield from ()


PIPE = {
    "name": "loop",
    "defaults": {"seed": 1, "shard_rows": 50},
    "stages": [
        {"id": "raw", "uses": "synthetic", "with": {"rows": 160}},
        {
            "loop": "round",
            "iterations": 3,
            "carry": {
                "data": {"init": "raw", "next": "shrink"},
                "model": {"init": None, "next": "fit"},
            },
            "stages": [
                {"id": "fit", "uses": "test_fit_counter", "from": "$data", "needs": ["$model"]},
                {"id": "shrink", "uses": "sample", "from": "$data", "with": {"fraction": 0.5}},
            ],
        },
        {"id": "final", "uses": "concat", "from": "round.shrink"},
    ],
}


def test_loop_unrolls_with_carried_values() -> None:
    p = resolve_pipeline(PIPE)
    assert p.order == [
        "raw",
        "round1.fit",
        "round1.shrink",
        "round2.fit",
        "round2.shrink",
        "round3.fit",
        "round3.shrink",
        "final",
    ]
    assert [str(r) for r in p.stages["round1.fit"].inputs] == ["raw"]
    assert p.stages["round1.fit"].needs == []
    assert [str(r) for r in p.stages["round3.fit"].inputs] == ["round2.shrink"]
    assert p.stages["round3.fit"].needs == ["round2.fit"]
    assert [str(r) for r in p.stages["final"].inputs] == ["round3.shrink"]
    assert [p.stages[f"round{k}.fit"].iteration for k in (1, 2, 3)] == [1, 2, 3]


def test_loop_runs_chains_artifacts_and_caches(tmp_path: Path) -> None:
    result = run_pipeline(resolve_pipeline(PIPE), out=tmp_path)
    ckpt = json.loads((tmp_path / "artifacts" / "round3.fit" / "ckpt.json").read_text())
    assert ckpt["iteration"] == 3
    assert [c["iteration"] for c in ckpt["previous"]] == [2]
    assert ckpt["previous"][0]["previous"][0]["iteration"] == 1
    rows = [ckpt["previous"][0]["previous"][0]["rows"], ckpt["previous"][0]["rows"], ckpt["rows"]]
    assert rows[0] == 160 and rows[0] > rows[1] > rows[2] > 0  # each round sees half the data
    state = result.manifest.stages["round3.fit"]
    assert state.artifact_fingerprint and state.artifact_files == {
        "ckpt.json": (tmp_path / "artifacts" / "round3.fit" / "ckpt.json").stat().st_size
    }

    again = run_pipeline(resolve_pipeline(PIPE), out=tmp_path)
    assert again.executed == []
    # an artifact that disappears makes its stage (and what needs it) run again
    (tmp_path / "artifacts" / "round2.fit" / "ckpt.json").unlink()
    assert run_pipeline(resolve_pipeline(PIPE), out=tmp_path).executed == ["round2.fit"]
    # fewer iterations: the unchanged first rounds are reused
    fewer = run_pipeline(
        resolve_pipeline(PIPE, overrides=["stages.round.iterations=2"]), out=tmp_path
    )
    assert fewer.executed == ["final"]


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda p: p["stages"][1]["stages"][0].update({"from": "$nope"}),
            r"stage 'round1.fit': \$nope is not carried by loop 'round'",
        ),
        (
            lambda p: p["stages"][1]["carry"]["data"].update({"next": "ghost"}),
            r"loop 'round': carry.data.next: 'ghost' is not a stage of the loop",
        ),
        (
            lambda p: p["stages"][1]["stages"][1].update({"needs": ["raw"]}),
            r"stage 'round1.shrink': needs: 'raw' \(synthetic\) makes no artifact",
        ),
        (
            lambda p: p["stages"][1]["stages"][1].update({"wth": {}}),
            r"stage 'round.shrink': wth: unknown field",
        ),
        (
            lambda p: p["stages"][1].update({"iterations": 0}),
            r"loop 'round': iterations: Input should be greater than or equal to 1",
        ),
    ],
)
def test_loop_errors_name_the_stage(edit, message) -> None:
    import copy

    pipe = copy.deepcopy(PIPE)
    edit(pipe)
    with pytest.raises(ConfigError, match=message):
        resolve_pipeline(pipe)

"""A stage that ran before and runs again says why: in ``RunResult.reasons``, in
``logs/run.log`` and (tests/cli/test_cli.py) in the console summary. A shard changed on disk is
named with its recorded and present fingerprints; a missing one, a changed setting, an
upstream stage that ran again, a failure started over from and ``--force`` are each said.

Run: python -m pytest tests/pipeline/test_rerun_reasons.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trajsynth.core.errors import StageFailed
from trajsynth.core.ids import file_fingerprint
from trajsynth.pipeline.runner import run_pipeline
from trajsynth.store.manifest import RunManifest

PIPE = {
    "name": "reasons",
    "defaults": {"seed": 0, "shard_rows": 20},
    "stages": [
        {"id": "raw", "uses": "synthetic", "with": {"rows": 40}},
        {"id": "pick", "uses": "sample", "from": "raw", "with": {"n": 10}},
    ],
}


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_each_rerun_says_why(tmp_path: Path) -> None:
    pipe = tmp_path / "p.yaml"
    pipe.write_text(yaml.safe_dump(PIPE, sort_keys=False))
    out = tmp_path / "run"
    first = run_pipeline(str(pipe), out=out)
    assert first.executed == ["raw", "pick"] and first.reasons == {}  # a first run needs none
    again = run_pipeline(str(pipe), out=out)
    assert again.skipped == ["raw", "pick"] and again.reasons == {}

    shard = out / "raw" / "part-00000.parquet"
    recorded = RunManifest.load(out / "manifest.json").stages["raw"].outputs["main"].shards[0]
    size = shard.stat().st_size
    _flip_a_byte(shard)
    assert shard.stat().st_size == size  # the same size: only the content fingerprint tells
    why = (
        f"shard raw/part-00000.parquet changed on disk (content fingerprint "
        f"{file_fingerprint(shard)[:12]}, recorded {recorded.fingerprint[:12]})"
    )
    changed = run_pipeline(str(pipe), out=out)
    assert changed.reasons["raw"] == why
    assert f"stage raw runs again: {why}" in (out / "logs" / "run.log").read_text()
    if "pick" in changed.executed:  # only when raw's new rows differ from the old ones
        assert changed.reasons["pick"] == "the output of stage 'raw' changed (it ran again)"

    shard.unlink()
    missing = run_pipeline(str(pipe), out=out)
    assert missing.reasons["raw"] == "shard raw/part-00000.parquet is missing"

    reset = run_pipeline(str(pipe), out=out, overrides=["stages.pick.with.n=5"])
    assert reset.skipped == ["raw"]
    assert reset.reasons["pick"].startswith("its settings or input files changed (cache key ")

    forced = run_pipeline(str(pipe), out=out, force=True)
    assert forced.reasons == {"raw": "--force", "pick": "--force"}


def test_a_failed_stage_says_it_starts_over(tmp_path: Path) -> None:
    spec = {
        "name": "fails",
        "stages": [
            {"id": "raw", "uses": "synthetic", "with": {"rows": 3}},
            {"id": "pick", "uses": "sample", "from": "raw", "with": {"n": 5}, "min_rows": 4},
        ],
    }
    pipe = tmp_path / "p.yaml"
    pipe.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(StageFailed, match="fewer than min_rows=4"):
        run_pipeline(str(pipe), out=tmp_path / "run")
    with pytest.raises(StageFailed):
        run_pipeline(str(pipe), out=tmp_path / "run")
    log = (tmp_path / "run" / "logs" / "run.log").read_text()
    # sample is a global stage: it cannot resume mid-way (a map stage's reason: "it failed")
    assert "stage pick runs again: it failed (a global stage starts over: it cannot" in log

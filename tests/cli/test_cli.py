"""The CLI end to end, as a user runs it (subprocesses): errors are one message and a
non-zero exit, never a traceback; run/stage/stats/show/export work on real shards.

Run: python -m pytest tests/cli -q
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

PY = [sys.executable, "-m", "trajsynth"]


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PY, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


RAW = {"id": "raw", "uses": "synthetic", "with": {"rows": 50}}


@pytest.mark.parametrize(
    "second, needle",
    [
        (
            {"id": "pick", "uses": "no_such_stage", "from": "raw"},
            "stage 'pick': uses: unknown stage",
        ),
        (
            {"id": "pick", "uses": "sample", "from": "raw", "with": {"n": 1, "bogus": 1}},
            "stage 'pick': with.bogus: unknown field",
        ),
        (
            {"id": "pick", "uses": "split", "from": "pick"},
            "stage 'pick': from: stages form a cycle",
        ),
    ],
)
def test_bad_pipelines_fail_cleanly(tmp_path: Path, second: dict, needle: str) -> None:
    pipe = write(tmp_path / "p.yaml", {"name": "bad", "stages": [RAW, second]})
    for command in ("validate", "run"):
        res = cli(command, str(pipe), *(["--out", str(tmp_path / "r")] if command == "run" else []))
        assert res.returncode == 2, res.stderr
        assert needle in res.stderr
        assert "Traceback" not in res.stderr + res.stdout


def test_user_errors_on_data_commands(tmp_path: Path) -> None:
    res = cli("stats", str(tmp_path / "missing"))
    assert res.returncode == 2 and "does not exist" in res.stderr
    (tmp_path / "junk.parquet").write_bytes(b"junk")
    res = cli("show", str(tmp_path / "junk.parquet"))
    assert res.returncode == 2 and "junk.parquet" in res.stderr and "Traceback" not in res.stderr
    res = cli(
        "stage",
        "sample",
        "--in",
        str(tmp_path / "missing"),
        "--out",
        str(tmp_path / "o"),
        "--set",
        "n=3",
    )
    assert res.returncode == 2 and "does not exist" in res.stderr


def test_run_stats_show_export(tmp_path: Path) -> None:
    pipe = write(
        tmp_path / "p.yaml",
        {
            "name": "ok",
            "defaults": {"seed": 5, "shard_rows": 20},
            "stages": [RAW, {"id": "pick", "uses": "sample", "from": "raw", "with": {"n": 12}}],
        },
    )
    run_dir = tmp_path / "run"
    res = cli("run", str(pipe), "--out", str(run_dir))
    assert res.returncode == 0, res.stderr
    assert "raw (synthetic): 0 → 50 rows" in res.stderr
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["stages"]["pick"]["outputs"]["main"]["shards"][0]["rows"] == 12

    res = cli("stats", str(run_dir / "raw"), "--json")
    stats = json.loads(res.stdout)
    assert stats["rows"] == 50 and stats["by_method"][0]["value"] == "synthetic"
    assert 0 <= stats["success_rate"] <= 1

    res = cli("show", str(run_dir / "pick"), "--index", "2")
    assert res.returncode == 0 and "goal:" in res.stdout and "assistant" in res.stdout

    res = cli("export", str(run_dir / "pick"), "--format", "trl", "--out", str(tmp_path / "trl"))
    assert res.returncode == 0, res.stderr
    lines = (tmp_path / "trl" / "train.jsonl").read_text().splitlines()
    assert len(lines) == 12 and set(json.loads(lines[0])) == {"id", "messages", "tools"}


def test_stage_command_and_makefile_style_chaining(tmp_path: Path) -> None:
    raw, picked = tmp_path / "raw", tmp_path / "picked"
    assert cli("stage", "synthetic", "--out", str(raw), "--set", "rows=30", "-q").returncode == 0
    res = cli("stage", "sample", "--in", str(raw), "--out", str(picked), "--set", "n=7")
    assert res.returncode == 0, res.stderr
    assert "7 rows" in res.stdout
    assert (picked / "manifest.json").exists() and len(list(picked.glob("part-*.parquet"))) == 1
    res = cli(
        "stage",
        "split",
        "--in",
        str(raw),
        "--out",
        str(tmp_path / "sp"),
        "--set",
        "eval_fraction=0.5",
        "-q",
    )
    assert res.returncode == 0, res.stderr
    assert list((tmp_path / "sp" / "eval").glob("part-*.parquet"))


def test_stages_lists_configs() -> None:
    res = cli("stages", "--json")
    info = json.loads(res.stdout)
    assert {"sample", "concat", "split", "synthetic"} <= set(info)
    assert "n" in info["sample"]["config"] and info["split"]["outputs"] == ["train", "eval"]


def test_a_rerun_says_why_in_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from trajsynth.cli import main

    pipe = write(tmp_path / "p.yaml", {"name": "ok", "stages": [RAW]})
    run_dir = tmp_path / "run"
    main(["run", str(pipe), "--out", str(run_dir), "-q"])
    shard = run_dir / "raw" / "part-00000.parquet"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    capsys.readouterr()
    main(["run", str(pipe), "--out", str(run_dir)])
    out, err = capsys.readouterr()
    why = "shard raw/part-00000.parquet changed on disk (content fingerprint "
    row = next(line for line in out.splitlines() if line.startswith("│ raw "))
    assert "│ reran  │" in row
    line = next(line for line in out.splitlines() if line.startswith("raw reran: "))
    assert line.startswith(f"raw reran: {why}") and ", recorded " in line
    assert "raw (synthetic): 0 → 50 rows" in err and f"— reran: {why}" in err
    assert f"stage raw runs again: {why}" in (run_dir / "logs" / "run.log").read_text()


def test_a_stage_s_findings_are_printed_kept_and_logged(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``Stage.findings`` reads the stage's metrics merged over its units (two shards here):
    ``trajsynth run`` prints each under the stage's line, the manifest keeps them, run.log has
    them, and a cached rerun prints them again."""
    from trajsynth.cli import main
    from trajsynth.stages import MapStage, StageConfig, register

    @register
    class CountOdd(MapStage):
        """Test stage: passes its rows and counts the odd ones."""

        name = "test_count_odd"

        class Config(StageConfig):
            pass

        def process(self, batches, ctx):
            for b in batches:
                ctx.metrics.inc("odd", sum(i % 2 for i in range(b.num_rows)))
                yield b

        def findings(self, metrics):
            odd = metrics.get("counters", {}).get("odd", 0)
            return [f"{odd} odd rows over every unit"] if odd else []

    raw = {**RAW, "shard_rows": 25}
    odd = {"id": "odd", "uses": "test_count_odd", "from": "raw"}
    pipe = write(tmp_path / "p.yaml", {"name": "ok", "stages": [raw, odd]})
    run_dir = tmp_path / "run"
    said = "24 odd rows over every unit"  # 12 of each unit's 25 rows
    for cached in (False, True):
        capsys.readouterr()
        main(["run", str(pipe), "--out", str(run_dir)])
        err = capsys.readouterr().err
        line = next(i for i, x in enumerate(err.splitlines()) if "odd (test_count_odd)" in x)
        assert ("(cached)" in err.splitlines()[line]) == cached
        assert err.splitlines()[line + 1].strip() == f"! {said}"
    state = json.loads((run_dir / "manifest.json").read_text())["stages"]["odd"]
    assert state["findings"] == [said]
    assert f"stage odd: {said}" in (run_dir / "logs" / "run.log").read_text()

"""The quality commands as a user runs them: a pipeline through score → filter → dedup →
diversity → difficulty → balance, then ``filter`` / ``dedup`` / ``balance`` on its shards,
``stats`` on the run folder, ``report`` as HTML and Markdown, ``import tau-trajectories``,
and the one-line errors. Commands run in-process through ``trajsynth.cli.main`` (one
subprocess checks the error path end to end).

Run: python -m pytest tests/cli/test_quality_cli.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trajsynth.cli import main
from trajsynth.store.manifest import RunManifest
from trajsynth.store.shards import count_rows, read_table


def cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def _plan(folder: Path) -> dict:
    return RunManifest.load(folder / "manifest.json").stages["balance"].metrics["values"]["plan"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("quality-run")
    pipeline = {
        "name": "quality",
        "defaults": {"seed": 3, "shard_rows": 200},
        "stages": [
            {"id": "raw", "uses": "synthetic", "with": {"rows": 400, "duplicate_rate": 0.2}},
            {"id": "scored", "uses": "score", "from": "raw"},
            {"id": "filtered", "uses": "filter", "from": "scored", "with": {"min_quality": 0.6}},
            {"id": "deduped", "uses": "dedup", "from": "filtered"},
            {
                "id": "clustered",
                "uses": "diversity",
                "from": "deduped",
                "with": {"embedder": "tfidf"},
            },
            {"id": "graded", "uses": "difficulty", "from": "clustered"},
            {"id": "balanced", "uses": "balance", "from": "graded", "with": {"keep_all": True}},
        ],
    }
    (root / "p.yaml").write_text(yaml.safe_dump(pipeline, sort_keys=False))
    main(["run", str(root / "p.yaml"), "--out", str(root / "run"), "-q"])
    return root / "run"


def test_pipeline_manifest_holds_the_quality_counts(run_dir: Path) -> None:
    m = RunManifest.load(run_dir / "manifest.json")
    f = m.stages["filtered"].metrics["counters"]
    assert f["rows_in"] == 400 and f["kept"] + f["dropped"] == 400
    d = m.stages["deduped"].metrics["counters"]
    assert d["exact_duplicates"] > 0 and d["kept"] == count_rows(run_dir / "deduped")
    plan = m.stages["balanced"].metrics["values"]["plan"]
    assert plan["size"] == count_rows(run_dir / "balanced")


def test_filter_dedup_balance_commands(run_dir: Path, tmp_path: Path, capsys) -> None:
    code, out, _ = cli(
        capsys,
        "filter",
        str(run_dir / "scored"),
        "--out",
        str(tmp_path / "f"),
        "--min-quality",
        "0.8",
        "--no-too-easy",
    )
    assert code == 0
    assert "low_quality" in out and "quality < 0.8" in out and "kept" in out
    assert "too_easy" in out and "off" in out
    counters = (
        RunManifest.load(tmp_path / "f" / "manifest.json").stages["filter"].metrics["counters"]
    )
    assert "dropped.too_easy" not in counters
    assert counters["kept"] == count_rows(tmp_path / "f")
    q = (
        read_table(str(tmp_path / "f"), columns=["quality_score"])
        .column("quality_score")
        .to_pylist()
    )
    assert min(q) >= 0.8

    code, out, _ = cli(capsys, "dedup", str(run_dir / "scored"), "--out", str(tmp_path / "d"))
    assert code == 0 and "exact duplicates" in out and "near duplicates (Jaccard ≥ 0.85)" in out

    code, out, _ = cli(
        capsys,
        "balance",
        str(run_dir / "graded"),
        "--out",
        str(tmp_path / "b"),
        "--mix",
        "0.3,0.5,0.2",
        "--size",
        "40",
    )
    assert code == 0 and "short by" in out and "downsampled every bucket" in out
    plan = _plan(tmp_path / "b")
    # the heuristic calls no synthetic row hard: keeping the mix leaves nothing
    assert plan["requested"] == 40 and plan["available"]["hard"] == 0 and plan["size"] == 0
    assert plan["shortfalls"] == {"hard": 8}
    args = ["--out", str(tmp_path / "b2"), "--size", "40", "--keep-all"]
    code, out, _ = cli(capsys, "balance", str(run_dir / "graded"), *args)
    plan = _plan(tmp_path / "b2")
    assert code == 0 and plan["final"] == {"easy": 12, "medium": 20, "hard": 0}
    assert count_rows(tmp_path / "b2") == 32

    code, _, err = cli(
        capsys, "balance", str(run_dir / "graded"), "--out", str(tmp_path / "x"), "--mix", "1,2"
    )
    assert code == 2 and "--mix" in err


def test_stats_on_a_run_folder(run_dir: Path, capsys) -> None:
    code, out, _ = cli(capsys, "stats", str(run_dir), "--json")
    assert code == 0
    stats = json.loads(out)
    assert stats["stage"] == "balanced"
    assert sum(stats["quality_histogram"]["counts"]) == stats["rows"]
    assert stats["clusters"]["clusters"] >= 1
    stages = stats["quality_stages"]
    assert [r["rule"] for r in stages["filter"][0]["rules"]][:2] == ["invalid_calls", "incoherent"]
    assert stages["dedup"][0]["exact_duplicates"] > 0 and stages["balance"][0]["keep_all"] is True
    code, out, _ = cli(capsys, "stats", str(run_dir / "filtered"))
    assert code == 0 and "quality_score histogram" in out and "dropped (first rule)" in out


def test_report_html_and_markdown(run_dir: Path, tmp_path: Path, capsys) -> None:
    code, _out, _ = cli(capsys, "report", str(run_dir), "--out", str(tmp_path / "r.html"))
    assert code == 0
    html = (tmp_path / "r.html").read_text()
    for needle in (
        "Quality distribution",
        "Filter rules",
        "Difficulty mix",
        "Clusters",
        "Success per capability",
    ):
        assert needle in html
    assert html.count("data:image/png;base64,") == 4
    code, _out, _ = cli(capsys, "report", str(run_dir), "--out", str(tmp_path / "r.md"))
    assert code == 0
    pngs = sorted(p.name for p in (tmp_path / "r_files").glob("*.png"))
    assert pngs == ["capabilities.png", "clusters.png", "difficulty.png", "quality.png"]
    assert "| invalid_calls |" in (tmp_path / "r.md").read_text()


def test_import_tau_trajectories(external_dir: Path, tmp_path: Path, capsys) -> None:
    src = external_dir / "tau-bench/historical_trajectories/gpt-4o-airline.json"
    code, out, _ = cli(
        capsys, "import", "tau-trajectories", str(src), "--out", str(tmp_path / "tau")
    )
    assert code == 0 and "200 trajectories (84 successes, 50 tasks)" in out
    assert count_rows(tmp_path / "tau") == 200


def test_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "trajsynth",
            "report",
            str(tmp_path),
            "--out",
            str(tmp_path / "r.html"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and "no manifest.json" in res.stderr
    assert "Traceback" not in res.stderr + res.stdout

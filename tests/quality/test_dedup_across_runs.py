"""Dedup against earlier runs (``dedup``'s ``against``): a new row that duplicates a row of
an earlier run's shards (exactly, or near) is dropped even when it would have won the tie,
duplicates among the new rows are still removed, and the earlier rows are never written.

Run: python -m pytest tests/quality/test_dedup_across_runs.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest
from qrows import BOOK, GOAL, WEATHER, row

from trajsynth.core.errors import ConfigError
from trajsynth.pipeline import run_pipeline
from trajsynth.pipeline.spec import resolve_pipeline
from trajsynth.store import ShardWriter, read_table

LIMA = "How warm is it in Lima right now"

EARLIER = [
    row("a1", GOAL, BOOK, quality_score=0.5),
    row("b1", "What is the weather in Oslo today", WEATHER, quality_score=0.8),
]
NEW = [
    # the same task as a1 (normalised), of higher quality: without `against` it would stay
    row("n1", "please, BOOK a flight to  Paris for next Monday morning!", BOOK, quality_score=0.9),
    row("n2", GOAL + " thanks", BOOK, quality_score=0.7),  # a near copy of a1
    row("n3", LIMA, WEATHER, quality_score=0.8),
    row("n4", LIMA, WEATHER, quality_score=0.6),  # an exact copy of n3, among the new rows
    row("n5", GOAL, WEATHER, quality_score=0.9),  # same words, other actions: distinct
]


def _write(folder: Path, rows: list) -> Path:
    with ShardWriter(folder, shard_rows=2) as w:
        w.write(rows)
    return folder


def _dedup(tmp_path: Path, name: str, inputs: list[Path], against: list[str]):
    pipe = {
        "name": name,
        "stages": [
            {
                "id": "d",
                "uses": "dedup",
                "from": [str(p) for p in inputs],
                "with": {"against": against},
            }
        ],
    }
    return run_pipeline(resolve_pipeline(pipe), out=tmp_path / name)


def test_rows_of_an_earlier_run_win_and_are_not_written(tmp_path: Path) -> None:
    earlier = _write(tmp_path / "earlier", EARLIER)
    new = _write(tmp_path / "new", NEW)
    alone = _dedup(tmp_path, "alone", [new], [])
    assert sorted(read_table(alone.output("d"), columns=["id"]).column("id").to_pylist()) == [
        "n1",
        "n3",
        "n5",
    ]
    result = _dedup(tmp_path, "across", [new, earlier], [str(earlier)])
    ids = read_table(result.output("d"), columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == ["n3", "n5"]
    counters = result.manifest.stages["d"].metrics["counters"]
    assert counters["rows"] == 5 and counters["earlier_rows"] == 2
    assert (counters["exact_duplicates"], counters["near_duplicates"], counters["kept"]) == (
        2,
        1,
        2,
    )
    # the same rows again: nothing new
    again = _dedup(tmp_path, "again", [earlier, earlier], [str(earlier)])
    assert read_table(again.output("d"), columns=["id"]).num_rows == 0


def test_against_must_name_an_input(tmp_path: Path) -> None:
    new = _write(tmp_path / "new", NEW)
    with pytest.raises(ConfigError, match="names no input"):
        _dedup(tmp_path, "bad", [new], [str(tmp_path / "elsewhere")])

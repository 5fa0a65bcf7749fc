"""Routing a stage's named outputs to their folders and writing them as shards: the one
function the runner and the executors' map units share.

Run: python -m pytest tests/pipeline/test_outputs.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trajsynth.core import to_batch
from trajsynth.pipeline.outputs import write_outputs
from trajsynth.stages import Emit
from trajsynth.stages.plumbing.synthetic import synthetic_row
from trajsynth.store import ShardWriter, read_table


def rows(n: int, start: int = 0):
    return [synthetic_row(i, seed=1) for i in range(start, start + n)]


def ids(folder: Path) -> list[str]:
    return read_table(folder).column("id").to_pylist()


def test_named_outputs_go_to_their_folders_cut_into_shards(tmp_path: Path) -> None:
    produced = [
        to_batch(rows(5)),
        Emit("failed", rows(3, start=100)),
        Emit("kept", to_batch(rows(4, start=5))),  # the first declared output is the main one
        Emit("failed", to_batch(rows(2, start=103))),
    ]
    writers = write_outputs(
        produced,
        stage_dir=tmp_path,
        outputs=("kept", "failed"),
        writer=lambda name, folder: ShardWriter(folder, shard_rows=4),
        where="stage 'x'",
    )
    assert set(writers) == {"main", "failed"}
    assert [s.rows for s in writers["main"].shards] == [4, 4, 1]
    assert [s.rows for s in writers["failed"].shards] == [4, 1]
    assert ids(tmp_path) == [r.id for r in rows(9)]
    assert ids(tmp_path / "failed") == [r.id for r in rows(5, start=100)]


def test_one_shard_per_output_named_after_the_unit(tmp_path: Path) -> None:
    (tmp_path / "failed").mkdir()
    other = tmp_path / "failed" / ".tmp-1-part-00002.parquet"  # another unit, writing now
    other.write_bytes(b"x")
    writers = write_outputs(
        [to_batch(rows(3)), Emit("failed", rows(2, start=10)), to_batch(rows(2, start=3))],
        stage_dir=tmp_path,
        outputs=("main", "failed"),
        writer=lambda _, folder: ShardWriter(folder, shard_rows=None, start_index=7, clean=False),
        where="stage 'x'",
    )
    assert [(s.file, s.rows) for s in writers["main"].shards] == [("part-00007.parquet", 5)]
    assert [(s.file, s.rows) for s in writers["failed"].shards] == [("part-00007.parquet", 2)]
    assert other.exists()


def test_undeclared_outputs_and_emits_from_sources_are_refused(tmp_path: Path) -> None:
    def write(produced, **kw):
        return write_outputs(
            produced,
            stage_dir=tmp_path,
            outputs=("main", "failed"),
            writer=lambda name, folder: ShardWriter(folder),
            where="stage 'x'",
            **kw,
        )

    with pytest.raises(ValueError, match="stage 'x' emitted to undeclared output 'other'"):
        write([Emit("other", rows(1))])
    with pytest.raises(ValueError, match="Emit is not allowed"):
        write([Emit("failed", rows(1))], side_outputs=False)
    # nothing buffered by a stage that failed is committed
    with pytest.raises(ValueError):
        write([to_batch(rows(2)), Emit("other", rows(1))])
    assert not list(tmp_path.glob("part-*.parquet"))

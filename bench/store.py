"""Shard store throughput vs plain pyarrow, in the same process on the same rows.

What it measures: rows/s of writing a table through `ShardWriter` (schema conformance, shard
cutting, fsync, atomic rename, content fingerprint) against one `pyarrow.parquet.write_table`
call, and rows/s of streaming it back with `iter_batches` (version check per file) against
`pyarrow.parquet.read_table`, for all columns and for a 3-column projection. Both sides use
the same compression. Each figure is the best of several repetitions, to keep other load on
the machine out of the ratio. Target: ratio >= 0.9 on write and read.

Rows through stages: rows/s of a row stage that derives each row unchanged (Arrow → records
→ Arrow, what every row stage pays) and of the `verify` stage (format and call-match layers:
tools and ground truth parsed), against the floor of any row-wise stage, pyarrow's own
`to_pylist` → `from_pylist` of the same batch.

Run: python bench/store.py [--rows 200000] [--stage-rows 4000]
The last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from trajsynth.core import Trajectory, conform, to_batch
from trajsynth.stages import Context, Emit, RowStage, build_stage
from trajsynth.stages.plumbing.synthetic import synthetic_row
from trajsynth.store import DEFAULT_COMPRESSION, ShardWriter, iter_batches


def make_table(rows: int, distinct: int = 20_000) -> pa.Table:
    base = pa.Table.from_batches([to_batch(synthetic_row(i, 1) for i in range(distinct))])
    reps = -(-rows // distinct)
    return pa.concat_tables([base] * reps).slice(0, rows).combine_chunks()


class Identity(RowStage):
    """Every row derived unchanged: the conversions a row stage pays, and nothing else."""

    name = "bench_identity"

    def process_row(self, row: Trajectory, ctx: Context) -> list[Trajectory]:
        return [row.derive(stage_id="bench")]


def task_rows(rows: int) -> pa.RecordBatch:
    """Synthetic trajectories with ground truth (their own calls, as 8 rollouts per task
    would share), so that verify parses tools and ground truth and matches calls."""
    out = []
    for i in range(rows):
        row = synthetic_row(i // 8, 1)
        steps = [[{"name": c.name, "arguments": c.parsed_arguments()}] for c in row.calls()]
        gt = {"turns": [{"request": row.goal, "steps": steps}]}
        out.append(row.derive(id=f"{row.id}-{i % 8}", ground_truth=gt))
    return to_batch(out)


def through(stage: RowStage, batch: pa.RecordBatch) -> None:
    for out in stage.process(iter([batch]), Context()):
        conform(out.data if isinstance(out, Emit) else out)


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--shard-rows", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--stage-rows", type=int, default=4000)
    args = ap.parse_args()

    table = make_table(args.rows)
    batches = table.to_batches(max_chunksize=10_000)
    tmp = Path(tempfile.mkdtemp(prefix="trajsynth-bench-store-"))
    plain_file = tmp / "plain.parquet"
    ours_dir = tmp / "ours"
    projection = ["id", "success", "num_tool_calls"]

    def write_plain() -> None:
        pq.write_table(table, plain_file, compression=DEFAULT_COMPRESSION)

    def write_ours() -> None:
        if ours_dir.exists():
            shutil.rmtree(ours_dir)
        with ShardWriter(ours_dir, shard_rows=args.shard_rows) as w:
            for b in batches:
                w.write(b)

    def read_plain() -> None:
        pq.read_table(plain_file)

    def read_ours() -> None:
        for _ in iter_batches(ours_dir):
            pass

    def read_plain_proj() -> None:
        pq.read_table(plain_file, columns=projection)

    def read_ours_proj() -> None:
        for _ in iter_batches(ours_dir, columns=projection):
            pass

    figures = {}
    for name, ours, plain in [
        ("write", write_ours, write_plain),
        ("read", read_ours, read_plain),
        ("read_projected", read_ours_proj, read_plain_proj),
    ]:
        # interleave so that both sides see the same machine conditions
        t_plain = best(plain, args.repeat)
        t_ours = best(ours, args.repeat)
        figures[name] = (args.rows / t_ours, args.rows / t_plain)

    tasks = task_rows(args.stage_rows)

    def floor() -> None:
        pa.RecordBatch.from_pylist(tasks.to_pylist(), schema=tasks.schema)

    t_floor = best(floor, args.repeat)
    stages = {"row_stage": Identity(), "verify": build_stage("verify", {})}
    for stage in stages.values():
        stage.setup(Context())
        through(stage, tasks.slice(0, 16))  # imports and first calls out of the figure
    stage_figures = {
        name: args.stage_rows / best(lambda s=stage: through(s, tasks), max(2, args.repeat // 2))
        for name, stage in stages.items()
    }
    floor_rate = args.stage_rows / t_floor

    size_ours = sum(p.stat().st_size for p in ours_dir.glob("*.parquet"))
    size_plain = plain_file.stat().st_size
    shutil.rmtree(tmp)

    print(f"{args.rows:,} rows, {DEFAULT_COMPRESSION}, shards of {args.shard_rows:,} rows")
    print(f"{'operation':<16}{'trajsynth rows/s':>18}{'pyarrow rows/s':>18}{'ratio':>8}")
    for name, (ours, plain) in figures.items():
        print(f"{name:<16}{ours:>18,.0f}{plain:>18,.0f}{ours / plain:>8.2f}")
    print(f"bytes: trajsynth {size_ours:,} vs plain {size_plain:,}")
    print(f"\n{args.stage_rows:,} rows through stages (8 per task)")
    print(f"{'stage':<16}{'rows/s':>18}{'pyarrow floor':>18}{'ratio':>8}")
    for name, rate in stage_figures.items():
        print(f"{name:<16}{rate:>18,.0f}{floor_rate:>18,.0f}{rate / floor_rate:>8.2f}")
    print(
        json.dumps(
            {
                "bench": "store",
                "rows": args.rows,
                "write_rows_per_s": round(figures["write"][0]),
                "plain_write_rows_per_s": round(figures["write"][1]),
                "write_ratio": round(figures["write"][0] / figures["write"][1], 3),
                "read_rows_per_s": round(figures["read"][0]),
                "plain_read_rows_per_s": round(figures["read"][1]),
                "read_ratio": round(figures["read"][0] / figures["read"][1], 3),
                "projected_read_ratio": round(
                    figures["read_projected"][0] / figures["read_projected"][1], 3
                ),
                "row_stage_rows_per_s": round(stage_figures["row_stage"]),
                "verify_rows_per_s": round(stage_figures["verify"]),
                "pylist_floor_rows_per_s": round(floor_rate),
            }
        )
    )


if __name__ == "__main__":
    main()

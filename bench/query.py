"""Benchmark: ``trajsynth query`` over the synthetic rows of ``bench/scale.py``.

    PYTHONPATH=. python bench/query.py [--rows 1000000] [--shard-rows 50000]

Writes ``--rows`` rows (scale.py's generator: three domains, 1–6 calls per row, scores and
difficulty labels) as shards of a run (a manifest records their fingerprints, so every read
is verified), then times, each in a fresh ``trajsynth query`` process as a user runs it:

- a filtered count: ``--domain travel --outcome success --min-quality 0.8 --where
  "num_tool_calls >= 3" --count``;
- a ``--steps`` slice of 1,000 step rows of the hard rows of one domain, as JSONL;
- a row listing (``--limit 1000``) as Parquet.

Goal: each ≤ 10 s. The last line is one JSON object: ``rows``, ``count_s``, ``steps_s``,
``rows_s``, ``count``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.scale import make_rows  # noqa: E402
from trajsynth.store.manifest import OutputState, RunManifest, ShardRecord, StageState  # noqa: E402
from trajsynth.store.shards import write_shard  # noqa: E402


def build(run: Path, rows: int, shard_rows: int) -> float:
    start = time.perf_counter()
    records = []
    for k, s in enumerate(range(0, rows, shard_rows)):
        info = write_shard(
            make_rows(s, min(shard_rows, rows - s)), run / "data" / f"part-{k:05d}.parquet"
        )
        records.append(ShardRecord.of(info))
    RunManifest(
        pipeline="bench",
        stages={
            "data": StageState(
                uses="synthetic", status="done", outputs={"main": OutputState(shards=records)}
            )
        },
    ).save(run / "manifest.json")
    return time.perf_counter() - start


def timed(args: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "trajsynth", "query", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    secs = time.perf_counter() - start
    if res.returncode != 0:
        raise SystemExit(f"query failed: {res.stderr}")
    return secs, res.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--shard-rows", type=int, default=50_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        build_s = build(run, args.rows, args.shard_rows)
        data = str(run / "data")
        count_s, out = timed(
            [data, "--domain", "travel", "--outcome", "success", "--min-quality", "0.8",
             "--where", "num_tool_calls >= 3", "--count"]
        )  # fmt: skip
        count = int(out.strip())
        steps_s, out = timed(
            [data, "--domain", "files", "--difficulty", "hard", "--steps", "--limit", "1000",
             "--format", "jsonl"]
        )  # fmt: skip
        step_rows = len(out.splitlines())
        rows_s, _ = timed(
            [data, "--method", "bench", "--limit", "1000", "--format", "parquet", "--out",
             str(Path(tmp) / "rows.parquet")]
        )  # fmt: skip
    result = {
        "rows": args.rows,
        "build_s": round(build_s, 1),
        "count": count,
        "count_s": round(count_s, 2),
        "step_rows": step_rows,
        "steps_s": round(steps_s, 2),
        "rows_s": round(rows_s, 2),
    }
    print(f"{'measure':<12}{'value':>14}")
    for k, v in result.items():
        print(f"{k:<12}{v:>14}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

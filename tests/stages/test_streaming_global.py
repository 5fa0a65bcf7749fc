"""Streaming global stages (dedup, balance, sample, concat): the same rows as the methods on
one table in memory, whatever the sharding; the same output under the inline, local (process
pool) and Ray executors; and no pass reads more than one shard's rows at a time.

Run: python -m pytest tests/stages/test_streaming_global.py -q
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from trajsynth.core import sockets, to_batch
from trajsynth.pipeline import run_pipeline
from trajsynth.pipeline.executors import LocalExecutor
from trajsynth.pipeline.spec import resolve_pipeline
from trajsynth.quality.balance import balance
from trajsynth.quality.dedup import dedup
from trajsynth.stages import Context, ContextSpec, ShardSet, build_stage, kinds
from trajsynth.stages.plumbing.synthetic import synthetic_row
from trajsynth.stages.plumbing.utility import hash_unit
from trajsynth.store import read_table

SEED = 3


def rows_table(n: int = 600) -> pa.Table:
    """Synthetic rows with exact (re-drawn) and near (a word added) duplicates, quality
    scores with ties and gaps, difficulty labels, clusters and repeated task ids."""
    rng = random.Random(5)
    rows = []
    for i in range(n):
        r = synthetic_row(i, 7, duplicate_rate=0.3)
        update = {
            "quality_score": rng.choice([None, 0.5, 0.7, 0.9, rng.random()]),
            "difficulty": rng.choice(["easy", "medium", "medium", "hard", None]),
            "cluster_id": rng.randrange(4),
            "task_id": f"t{rng.randrange(n // 3)}",
        }
        if rng.random() < 0.15:
            update["goal"] = r.goal + " thanks"
        rows.append(r.model_copy(update=update))
    return pa.Table.from_batches([to_batch(rows)])


def shard_set(table: pa.Table, size: int, tmp_path: Path) -> ShardSet:
    parts = [table.slice(s, size) for s in range(0, table.num_rows, size)]
    return ShardSet(shards=parts, rows=[p.num_rows for p in parts], spill_dir=tmp_path)


def run_stage(uses: str, config: dict, shards: ShardSet) -> tuple[list[str], Context]:
    stage = build_stage(uses, config)
    ctx = Context(ContextSpec(stage_id=uses, seed=SEED))
    out = [
        pa.Table.from_batches([b]) if isinstance(b, pa.RecordBatch) else b
        for b in stage.process_shards(shards, ctx)
    ]
    ids = [i for t in out for i in t.column("id").to_pylist()]
    return ids, ctx


@pytest.mark.parametrize("size", [37, 1000])
def test_dedup_streams_to_the_same_survivors(tmp_path: Path, size: int) -> None:
    table = rows_table()
    ids, ctx = run_stage("dedup", {}, shard_set(table, size, tmp_path))
    q = table.column("quality_score").cast(pa.float64()).fill_null(np.nan).to_numpy()
    oracle = dedup(
        table.column("id"), table.column("goal"), table.column("messages"), q, seed=1 + SEED
    )
    expected = table.filter(pa.array(oracle.keep)).column("id").to_pylist()
    assert ids == expected
    counters = ctx.metrics.snapshot()["counters"]
    assert counters["exact_duplicates"] == oracle.counts["exact_duplicates"] > 50
    assert counters["near_duplicates"] == oracle.counts["near_duplicates"] > 10
    assert ctx.metrics.snapshot()["values"]["lsh"] == oracle.info


def test_empty_shards_change_nothing(tmp_path: Path) -> None:
    table = rows_table(200)
    plain = shard_set(table, 70, tmp_path / "a")
    empty = table.slice(0, 0)
    gappy = ShardSet(
        shards=[empty, *plain.shards[:2], empty, plain.shards[2]],
        rows=[0, *plain.rows[:2], 0, plain.rows[2]],
        spill_dir=tmp_path / "b",
    )
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for uses in ("dedup", "balance", "concat", "sample"):
        config = {"n": 20} if uses == "sample" else {}
        assert run_stage(uses, config, gappy)[0] == run_stage(uses, config, plain)[0]


@pytest.mark.parametrize("config", [{}, {"size": 150}, {"mix": "1,1,1", "keep_all": True}])
def test_balance_streams_to_the_same_rows(tmp_path: Path, config: dict) -> None:
    table = rows_table()
    ids, ctx = run_stage("balance", config, shard_set(table, 41, tmp_path))
    cfg = build_stage("balance", config).config
    oracle = balance(
        table.column("id"),
        table.column("difficulty"),
        domain=table.column("domain"),
        cluster=table.column("cluster_id"),
        mix=cfg.mix,
        size=cfg.size,
        keep_all=cfg.keep_all,
        seed=SEED,
    )
    assert ids == table.filter(pa.array(oracle.keep)).column("id").to_pylist()
    assert 0 < len(ids) < table.num_rows
    assert ctx.metrics.snapshot()["values"]["plan"] == oracle.plan.as_dict()


@pytest.mark.parametrize(
    "config", [{"n": 50}, {"n": 30, "by": "task"}, {"fraction": 0.2}, {"n": 10_000}]
)
def test_sample_keeps_the_smallest_hash_ranks_in_input_order(tmp_path: Path, config) -> None:
    table = rows_table()
    ids, _ = run_stage("sample", config, shard_set(table, 53, tmp_path))
    key = "task_id" if config.get("by") == "task" else "id"
    rank = hash_unit(table.column(key).to_pylist(), f"{SEED}:sample")
    if "fraction" in config:
        keep = rank < config["fraction"]
    else:
        distinct = np.unique(rank)
        keep = rank <= distinct[min(config["n"], len(distinct)) - 1]
    assert ids == table.filter(pa.array(keep)).column("id").to_pylist()


def test_concat_keeps_the_first_row_of_each_id(tmp_path: Path) -> None:
    table = rows_table(200)
    doubled = pa.concat_tables([table, table.slice(50, 80), table.slice(0, 10)])
    ids, ctx = run_stage("concat", {}, shard_set(doubled, 23, tmp_path))
    assert ids == table.column("id").to_pylist()
    assert ctx.metrics.snapshot()["counters"]["repeated_ids_dropped"] == 90


def test_a_pass_never_reads_more_than_one_shard(tmp_path: Path, monkeypatch) -> None:
    """A counting reader: the largest read is one shard, the rows are never turned into
    Trajectory objects, and dedup + balance read every shard a bounded number of times."""
    table = rows_table()
    reads: list[int] = []
    real = kinds.read_shard

    def counting(ref, columns=None):
        t = real(ref, columns)
        reads.append(t.num_rows)
        return t

    def no_records(*a, **k):
        raise AssertionError("a streaming stage built Trajectory objects")

    monkeypatch.setattr(kinds, "read_shard", counting)
    for module in ("quality.dedup", "quality.balance", "plumbing.utility"):
        monkeypatch.setattr(f"trajsynth.stages.{module}.read_shard", counting)
    monkeypatch.setattr(kinds, "to_records", no_records)
    for uses in ("dedup", "balance", "concat"):
        reads.clear()
        run_stage(uses, {}, shard_set(table, 40, tmp_path))
        assert max(reads) <= 40
        assert len(reads) <= 4 * 15  # a few passes over 15 shards


PIPE = {
    "name": "stream",
    "defaults": {"seed": 4, "shard_rows": 97, "pool_min_rows": 0, "workers": 2},
    "stages": [
        {"id": "raw", "uses": "synthetic", "with": {"rows": 900, "duplicate_rate": 0.3}},
        {"id": "labelled", "uses": "difficulty", "from": "raw"},
        {"id": "unique", "uses": "dedup", "from": "labelled"},
        {
            "id": "mixed",
            "uses": "balance",
            "from": "unique",
            "with": {"mix": "1,2,1", "keep_all": True},
        },
        {"id": "pick", "uses": "sample", "from": "mixed", "with": {"n": 120}},
        {"id": "both", "uses": "concat", "from": ["pick", "unique"]},
    ],
}
STAGES = ("labelled", "unique", "mixed", "pick", "both")


def outputs(run: Path) -> dict[str, list[str]]:
    return {s: read_table(run / s, columns=["id"]).column("id").to_pylist() for s in STAGES}


def test_inline_and_process_pool_give_the_same_rows(tmp_path: Path) -> None:
    inline = run_pipeline(
        resolve_pipeline(PIPE), out=tmp_path / "inline", executor=LocalExecutor(1, 1, 10**9)
    )
    pool = LocalExecutor(2, 2, 0)
    try:
        run_pipeline(resolve_pipeline(PIPE), out=tmp_path / "local", executor=pool)
    finally:
        pool.close()
    a, b = outputs(tmp_path / "inline"), outputs(tmp_path / "local")
    assert a == b
    assert 0 < len(a["pick"]) == 120 < len(a["mixed"]) < len(a["unique"]) < 900
    assert len(a["both"]) == len(a["unique"])  # pick ⊂ unique: the union is unique
    assert inline.manifest.stages["unique"].metrics["counters"]["exact_duplicates"] > 100
    assert not (tmp_path / "local" / ".spill").exists()


@pytest.mark.slow
def test_ray_gives_the_same_rows(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}},
        _temp_dir=sockets.ray_temp_dir(),  # None: Ray's default fits its socket paths
    )
    try:
        run_pipeline(resolve_pipeline(PIPE), out=tmp_path / "local")
        run_pipeline(
            resolve_pipeline(PIPE, overrides=["defaults.executor=ray"]), out=tmp_path / "ray"
        )
    finally:
        ray.shutdown()
    assert outputs(tmp_path / "ray") == outputs(tmp_path / "local")

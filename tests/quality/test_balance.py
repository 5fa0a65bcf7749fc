"""Balance: the target mix within ±2% when the buckets allow it, shortfalls reported and
handled both ways (keep the mix / keep all), water filling across domains and clusters,
independence from input order, unlabelled rows, and the ``balance`` stage.

Run: python -m pytest tests/quality/test_balance.py -q
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from trajsynth.core import ConfigError, Trajectory, to_batch
from trajsynth.quality.balance import balance, plan_mix, water_fill
from trajsynth.stages import Context, ContextSpec, build_stage


def columns(spec: list[tuple[str | None, str, int, int]]):
    """(ids, difficulty, domain, cluster) arrays from (difficulty, domain, cluster, count)."""
    ids, diff, dom, clu = [], [], [], []
    for d, domain, cluster, count in spec:
        for _ in range(count):
            ids.append(f"r{len(ids):05d}")
            diff.append(d)
            dom.append(domain)
            clu.append(cluster)
    return pa.array(ids), pa.array(diff, pa.string()), pa.array(dom), pa.array(clu, pa.int64())


AMPLE = [(d, dom, c, 60) for d in ("easy", "medium", "hard") for dom in "ab" for c in range(5)]


def shares(keep: np.ndarray, diff: pa.Array) -> dict[str, float]:
    kept = np.asarray(diff.to_pylist(), dtype=object)[keep]
    return {b: float(np.mean(kept == b)) for b in ("easy", "medium", "hard")}


def test_target_mix_within_two_percent_when_buckets_allow() -> None:
    ids, diff, dom, clu = columns(AMPLE)  # 600 rows per bucket
    for size, mix in [(1000, (0.3, 0.5, 0.2)), (777, (0.3, 0.5, 0.2)), (600, (0.5, 0.25, 0.25))]:
        res = balance(ids, diff, domain=dom, cluster=clu, size=size, mix=mix)
        assert int(res.keep.sum()) == size and not res.plan.shortfalls
        got = shares(res.keep, diff)
        for b, want in zip(("easy", "medium", "hard"), mix, strict=True):
            assert abs(got[b] - want) <= 0.02
    res = balance(ids, diff, domain=dom, cluster=clu, size=1000)
    assert res.plan.final == {"easy": 300, "medium": 500, "hard": 200}


def test_shortfalls_are_reported_and_handled_both_ways() -> None:
    ids, diff, dom, clu = columns(
        [("easy", "a", 0, 1000), ("medium", "a", 0, 1000), ("hard", "a", 0, 1000)]
    )
    keep_mix = balance(ids, diff, domain=dom, cluster=clu)  # size = all 3000 rows
    plan = keep_mix.plan
    assert plan.targets == {"easy": 900, "medium": 1500, "hard": 600}
    assert plan.shortfalls == {"medium": 500}
    assert plan.final == {"easy": 600, "medium": 1000, "hard": 400}  # mix kept: 2000 rows
    assert shares(keep_mix.keep, diff) == pytest.approx({"easy": 0.3, "medium": 0.5, "hard": 0.2})
    keep_all = balance(ids, diff, domain=dom, cluster=clu, keep_all=True)
    assert keep_all.plan.final == {"easy": 900, "medium": 1000, "hard": 600}
    assert int(keep_all.keep.sum()) == 2500
    p = plan_mix({"easy": 10, "medium": 0, "hard": 10}, size=100)
    assert p.shortfalls == {"easy": 20, "medium": 50, "hard": 10} and p.size == 0


def test_rows_are_spread_across_domains_and_clusters() -> None:
    # easy: domain a has 900 rows in one cluster, domain b 100 rows in four clusters
    spec = [("easy", "a", 0, 900)] + [("easy", "b", c, 25) for c in range(4)]
    spec += [("medium", "a", 0, 500), ("hard", "a", 0, 200)]
    ids, diff, dom, clu = columns(spec)
    res = balance(ids, diff, domain=dom, cluster=clu, size=1000)
    assert res.plan.final["easy"] == 300
    kept_easy = [
        (d, c)
        for d, c, k, x in zip(
            dom.to_pylist(), clu.to_pylist(), res.keep, diff.to_pylist(), strict=True
        )
        if k and x == "easy"
    ]
    # water filling over 5 strata of sizes 900, 25, 25, 25, 25: the small ones give all
    assert sum(1 for d, _ in kept_easy if d == "b") == 100
    assert sum(1 for d, _ in kept_easy if d == "a") == 200
    assert water_fill(np.array([900, 25, 25, 25, 25]), 300).tolist() == [200, 25, 25, 25, 25]


def test_choice_is_seeded_and_independent_of_order() -> None:
    ids, diff, dom, clu = columns(AMPLE)
    a = balance(ids, diff, domain=dom, cluster=clu, size=500, seed=1)
    kept = {i for i, k in zip(ids.to_pylist(), a.keep, strict=True) if k}
    order = list(range(len(ids)))
    random.Random(3).shuffle(order)
    idx = pa.array(order)
    b = balance(
        ids.take(idx), diff.take(idx), domain=dom.take(idx), cluster=clu.take(idx), size=500, seed=1
    )
    assert {i for i, k in zip(ids.take(idx).to_pylist(), b.keep, strict=True) if k} == kept
    c = balance(ids, diff, domain=dom, cluster=clu, size=500, seed=2)
    assert {i for i, k in zip(ids.to_pylist(), c.keep, strict=True) if k} != kept


def test_unlabelled_rows_are_dropped_and_counted() -> None:
    ids, diff, dom, clu = columns(
        [("easy", "a", 0, 30), ("medium", "a", 0, 50), ("hard", "a", 0, 20), (None, "a", 0, 7)]
    )
    res = balance(ids, diff, domain=dom, cluster=clu)
    assert res.unlabelled == 7 and int(res.keep.sum()) == 100


def test_balance_stage_plan_metrics_and_errors() -> None:
    rows = [
        Trajectory(id=f"t{i}", task_id=f"t{i}", difficulty=d, domain="x")
        for i, d in enumerate(["easy"] * 30 + ["medium"] * 30 + ["hard"] * 30)
    ]
    stage = build_stage("balance", {"mix": "30,50,20", "size": 50})
    ctx = Context(ContextSpec(stage_id="b"))
    out = list(stage.process(iter([to_batch(rows)]), ctx))
    assert sum(b.num_rows for b in out) == 50
    plan = ctx.metrics.snapshot()["values"]["plan"]
    assert plan["final"] == {"easy": 15, "medium": 25, "hard": 10} and plan["shortfalls"] == {}
    with pytest.raises(ConfigError, match="mix"):
        build_stage("balance", {"mix": "1,2"})
    unlabelled = [r.derive(difficulty=None) for r in rows]
    with pytest.raises(ConfigError, match="no row has a difficulty"):
        list(build_stage("balance", {}).process(iter([to_batch(unlabelled)]), ctx))

"""Dedup: planted exact and near duplicates are removed and distinct rows kept; the survivor
is the highest-quality copy, then the lowest id; the outcome does not depend on input order;
MinHash estimates, exact Jaccard and LSH recall checked against plain Python sets.

Run: python -m pytest tests/quality/test_dedup.py -q
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from qrows import BOOK, GOAL, WEATHER, call, row

from trajsynth.core import to_batch
from trajsynth.quality.columns import tokens
from trajsynth.quality.dedup import (
    EXACT,
    KEEP,
    NEAR,
    SEMANTIC,
    ShingleSets,
    dedup,
    jaccard_pairs,
    lsh_candidates,
    minhash_signatures,
    optimal_bands,
    priority_rank,
    shingles,
)
from trajsynth.stages import Context, ContextSpec, build_stage
from trajsynth.stages.plumbing.synthetic import synthetic_row


def table(rows):
    return pa.Table.from_batches([to_batch(rows)])


def run(rows, **kw):
    t = table(rows)
    q = np.array([np.nan if r.quality_score is None else r.quality_score for r in rows])
    return dedup(t.column("id"), t.column("goal"), t.column("messages"), q, **kw)


PLANTED = [
    row("a1", GOAL, BOOK, quality_score=0.5),
    row("a2", "please, BOOK a flight to  Paris for next Monday morning!", BOOK, quality_score=0.9),
    row("a3", GOAL + " thanks", BOOK, quality_score=0.7),  # near: J = 11/12
    row("a4", GOAL, WEATHER, quality_score=0.9),  # same goal, other actions: J = 8/13
    row("b1", "What is the weather in Oslo today", WEATHER, quality_score=0.8),
    row("c1", "How warm is it in Lima right now", WEATHER, quality_score=0.8),
]


def test_planted_duplicates_are_removed_and_distinct_rows_kept() -> None:
    res = run(PLANTED)
    reason = dict(zip([r.id for r in PLANTED], res.reason.tolist(), strict=True))
    assert reason == {"a1": EXACT, "a2": KEEP, "a3": NEAR, "a4": KEEP, "b1": KEEP, "c1": KEEP}
    # the survivor of the exact pair is a2 (quality 0.9 beats 0.5); a3 is a near copy of it
    ids = [r.id for r in PLANTED]
    assert ids[res.duplicate_of[0]] == "a2" and ids[res.duplicate_of[2]] == "a2"
    assert res.counts == {
        "rows": 6,
        "kept": 4,
        "exact_duplicates": 1,
        "near_duplicates": 1,
        "semantic_duplicates": 0,
    }


def test_survivor_rule_quality_then_lowest_id() -> None:
    rows = [
        row("z9", GOAL, BOOK, quality_score=0.8),
        row("b2", GOAL, BOOK, quality_score=0.8),
        row("b1", GOAL, BOOK, quality_score=None),  # no score: ranked last
        row("c7", GOAL, BOOK, quality_score=0.3),
    ]
    res = run(rows)
    assert [r.id for r, k in zip(rows, res.keep, strict=True) if k] == ["b2"]
    rank = priority_rank(pa.array(["z9", "b2", "b1", "c7"]), np.array([0.8, 0.8, np.nan, 0.3]))
    assert rank.tolist() == [1, 0, 3, 2]


def test_parallel_call_order_does_not_matter() -> None:
    a = row(
        "p1",
        GOAL,
        [
            ("think", "t", [call("get_weather", city="x"), call("convert", amount="1")], [{}, {}]),
            ("say", "ok"),
        ],
    )
    b = row(
        "p2",
        GOAL,
        [
            ("think", "t", [call("convert", amount="2"), call("get_weather", city="y")], [{}, {}]),
            ("say", "ok"),
        ],
    )
    assert run([a, b]).reason.tolist() == [KEEP, EXACT]


def test_outcome_is_independent_of_input_order() -> None:
    rows = [synthetic_row(i, 3, duplicate_rate=0.3) for i in range(300)]
    rows += [r.derive(id=f"near-{r.id}", goal=r.goal + " thanks") for r in rows[:40]]
    kept = {r.id for r, k in zip(rows, run(rows).keep, strict=True) if k}
    shuffled = rows[:]
    random.Random(0).shuffle(shuffled)
    assert {r.id for r, k in zip(shuffled, run(shuffled).keep, strict=True) if k} == kept


def test_exact_count_matches_an_independent_grouping() -> None:
    rows = [synthetic_row(i, 5, duplicate_rate=0.25) for i in range(400)]
    groups = {
        (
            " ".join(r.goal.lower().replace(",", " ").replace(".", " ").split()),
            tuple(c.name for c in r.calls()),
        )
        for r in rows
    }
    res = run(rows, near=False)
    assert res.counts["exact_duplicates"] == len(rows) - len(groups) > 50


def test_minhash_estimates_jaccard_and_jaccard_is_exact() -> None:
    rng = np.random.default_rng(7)
    base = rng.integers(0, 2**63, size=(300, 60), dtype=np.uint64)
    other = base.copy()
    swapped = rng.integers(0, 31, size=300)  # 0..30 of 60 replaced
    for i, k in enumerate(swapped):
        other[i, :k] = rng.integers(0, 2**63, size=k, dtype=np.uint64)
    values = np.concatenate([base, other], axis=0).ravel()
    sets = ShingleSets(values, np.arange(0, 600 * 60 + 1, 60))
    pairs = np.stack([np.arange(300), np.arange(300, 600)], axis=1)
    exact = jaccard_pairs(sets, pairs)
    truth = [len(sets.of(i) & sets.of(j)) / len(sets.of(i) | sets.of(j)) for i, j in pairs]
    assert exact.tolist() == pytest.approx(truth)
    sig = minhash_signatures(sets, 128)
    est = (sig[:, pairs[:, 0]] == sig[:, pairs[:, 1]]).mean(axis=0)
    err = np.abs(est - exact)
    assert err.mean() < 0.03 and err.max() < 0.15
    # single-threaded and threaded signatures are identical
    assert np.array_equal(sig, minhash_signatures(sets, 128, workers=1))
    # LSH recall: every pair with Jaccard ≥ 0.85 is a candidate
    cand = {
        tuple(p) for p in lsh_candidates(sig, *optimal_bands(0.85, 128), np.arange(600)).tolist()
    }
    high = [tuple(p) for p, j in zip(pairs.tolist(), exact, strict=True) if j >= 0.85]
    assert len(high) >= 40 and all(p in cand for p in high)


def test_shingles_are_goal_trigrams_plus_action_bigrams() -> None:
    t = table([row("s", "Book a flight to Paris", BOOK), row("t", "Hi", [("say", "hello")])])
    sets = shingles(tokens(t.column("goal")), t.column("messages"))
    # 5 words → 3 trigrams; ^ search, search book, book $ → 3 bigrams; "Hi": 1 gram + "^ $"
    assert np.diff(sets.offsets).tolist() == [6, 2]
    assert optimal_bands(0.85, 128) == (15, 8)


def test_semantic_pass_uses_the_embedding_neighbours() -> None:
    rows = [
        row("s1", "Book me a flight to Paris on Monday", BOOK, quality_score=0.6),
        row("s2", "On Monday, fly me to Paris: book it", BOOK, quality_score=0.9),
        row("s3", "What is the weather in Oslo", WEATHER, quality_score=0.9),
    ]

    def fake_embed(texts: list[str]) -> np.ndarray:  # the two Paris goals point the same way
        return np.array([[1.0, 0.0] if "paris" in t.lower() else [0.0, 1.0] for t in texts])

    res = run(rows, semantic=True, semantic_threshold=0.99, embed=fake_embed)
    assert res.reason.tolist() == [SEMANTIC, KEEP, KEEP]
    assert run(rows).reason.tolist() == [KEEP, KEEP, KEEP]  # MinHash alone misses them


@pytest.mark.slow
def test_semantic_dedup_with_the_offline_minilm_model() -> None:
    pytest.importorskip("sentence_transformers")
    rows = [
        row("m1", "Book me a flight to Paris on Monday morning", BOOK, quality_score=0.9),
        row("m2", "Book a flight to Paris for me on Monday morning", BOOK, quality_score=0.5),
        row("m3", "Delete every file in my downloads folder", WEATHER, quality_score=0.5),
    ]
    res = run(rows, near=False, semantic=True, semantic_threshold=0.9)
    assert res.reason.tolist() == [KEEP, SEMANTIC, KEEP]


def test_dedup_stage_counts_and_order() -> None:
    stage = build_stage("dedup", {})
    ctx = Context(ContextSpec(stage_id="d"))
    batches = [to_batch(PLANTED[:3]), to_batch(PLANTED[3:])]
    out = list(stage.process(iter(batches), ctx))
    assert [i for b in out for i in b.column("id").to_pylist()] == ["a2", "a4", "b1", "c1"]
    c = ctx.metrics.snapshot()["counters"]
    assert (c["exact_duplicates"], c["near_duplicates"], c["kept"]) == (1, 1, 4)
    off = build_stage("dedup", {"near": False})
    out = list(off.process(iter(batches), Context(ContextSpec(stage_id="d"))))
    assert [i for b in out for i in b.column("id").to_pylist()] == ["a2", "a3", "a4", "b1", "c1"]

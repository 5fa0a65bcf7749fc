"""Difficulty (pass@k, the heuristic's features and score, labels, calibration, both stages)
and diversity (TF-IDF clusters, entropy, representatives, the stage; MiniLM embeddings in a
slow test).

Run: python -m pytest tests/quality/test_difficulty_diversity.py -q
"""

from __future__ import annotations

import numpy as np
import pytest
from qrows import call, conversation, dicts, row

from trajsynth.core import to_batch
from trajsynth.quality.difficulty import (
    dependency_depth,
    fit_weights,
    heuristic_features,
    heuristic_score,
    label,
    measured_score,
)
from trajsynth.quality.diversity import cluster_summary, embed_texts, kmeans, size_entropy
from trajsynth.quality.trace import parse_trace
from trajsynth.stages import Context, ContextSpec, build_stage

# search → book the flight it found → pay for the booking it made; a second user turn
CHAIN = [
    ("think", "s", [call("search_flights", destination="Paris")], [{"flights": ["FL77"]}]),
    ("think", "b", [call("book_flight", flight_id="FL77")], [{"booking": "BK9"}]),
    ("think", "p", [call("convert", amount="BK9")], [{"ok": True}]),
    ("user", "Also, what about Lima?"),
    ("say", "Booked FL77 (BK9)."),
]


def test_measured_difficulty_and_labels() -> None:
    assert measured_score(4, 4) == 0.0 and measured_score(4, 0) == 1.0
    assert measured_score(4, 3) == 0.25 and measured_score(8, 2, k=2) == pytest.approx(
        1 - (1 - (6 * 5) / (8 * 7))
    )
    # 3 of 4 rollouts pass → easy; 2 of 4 → medium; 1 of 4 → hard
    assert label(np.array([0.25, 0.5, 0.75])).tolist() == ["easy", "medium", "hard"]
    assert label(0.4, easy_below=0.5) == "easy"


def test_heuristic_features_on_a_dependent_chain() -> None:
    msgs = conversation("Book a flight to Paris and pay", CHAIN)
    trace = parse_trace(dicts(msgs))
    said = "book a flight to paris and pay\nalso, what about lima?"
    assert dependency_depth(trace, said) == 3  # FL77 and BK9 came from results
    f = heuristic_features(dicts(msgs), ["dependent_calls", "multi_call"])
    assert f.tolist() == pytest.approx([3 / 6, 1 / 3, 2 / 3, 0.5])
    # 0.3·0.5 + 0.15·(1/3) + 0.3·(2/3) + 0.25·0.5
    assert float(heuristic_score(f)) == pytest.approx(0.525)
    one = heuristic_features(
        dicts(
            conversation(
                "Weather?",
                [("think", "w", [call("get_weather", city="Oslo")], [{"t": 1}]), ("say", "1")],
            )
        ),
        ["single_call"],
    )
    assert float(heuristic_score(one)) == pytest.approx(0.3 / 6)


def test_fit_weights_recovers_a_linear_difficulty() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((200, 4))
    true = np.array([0.1, 0.2, 0.3, 0.1])
    y = x @ true + 0.05
    fit = fit_weights(x, y)
    assert fit.weights == pytest.approx([0.1, 0.2, 0.3, 0.1, 0.05], abs=1e-9)
    assert fit.r2 == pytest.approx(1.0)
    assert fit_weights(x[:5], y[:5]).r2 is None  # too few rows: defaults kept


def test_difficulty_stages() -> None:
    measured = [
        row(f"m{i}", "Book", CHAIN, rollouts_total=4, rollouts_passed=p)
        for i, p in enumerate([4, 3, 2, 1, 0] * 5)
    ]
    unmeasured = [
        row(
            "h1",
            "Book a flight to Paris and pay",
            CHAIN,
            capabilities=["dependent_calls", "multi_call"],
        )
    ]
    ctx = Context(ContextSpec(stage_id="d"))
    out = next(
        iter(build_stage("difficulty", {}).process(iter([to_batch(measured + unmeasured)]), ctx))
    )
    labels = out.column("difficulty").to_pylist()
    assert labels[:5] == ["easy", "easy", "medium", "hard", "hard"]
    assert labels[-1] == "medium" and out.column("difficulty_score").to_pylist()[
        -1
    ] == pytest.approx(0.525)
    c = ctx.metrics.snapshot()["counters"]
    assert (c["measured"], c["heuristic"]) == (25, 1)
    # calibrate: 25 measured rows share one set of features, so the fit is the mean (0.5)
    ctx = Context(ContextSpec(stage_id="c"))
    stage = build_stage("difficulty_calibrate", {"min_rows": 20})
    out = next(iter(stage.process(iter([to_batch(measured + unmeasured)]), ctx)))
    calib = ctx.metrics.snapshot()["values"]["calibration"]
    assert calib["fitted"] and calib["rows"] == 25
    assert out.column("difficulty_score").to_pylist()[-1] == pytest.approx(0.5)


GROUPS = [f"What is the weather in {c} today?" for c in ("Oslo", "Lima", "Rome", "Kyiv", "Pune")]
GROUPS += [f"Delete the file {f}.txt from my downloads folder" for f in ("a", "b", "c", "d", "e")]


def test_tfidf_kmeans_separates_two_kinds_of_goal() -> None:
    vectors = embed_texts(GROUPS, "tfidf")
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    labels, centroids = kmeans(vectors, 2, seed=0)
    assert len(set(labels[:5])) == 1 and len(set(labels[5:])) == 1 and labels[0] != labels[5]
    summary = cluster_summary(labels, GROUPS, vectors, centroids)
    assert summary["clusters"] == 2 and summary["normalized_entropy"] == pytest.approx(1.0)
    reps = {c["representative"] for c in summary["largest"]}
    assert any("weather" in r for r in reps) and any("Delete" in r for r in reps)
    assert size_entropy([6, 2])[0] == pytest.approx(0.8112781, abs=1e-6)


def test_diversity_stage_writes_cluster_ids() -> None:
    rows = [row(f"g{i}", g, [("say", "ok")]) for i, g in enumerate(GROUPS)]
    ctx = Context(ContextSpec(stage_id="v", seed=1))
    stage = build_stage("diversity", {"embedder": "tfidf", "clusters": 2, "top": 2})
    out = next(iter(stage.process(iter([to_batch(rows)]), ctx)))
    ids = out.column("cluster_id").to_pylist()
    assert len(set(ids[:5])) == 1 and len(set(ids[5:])) == 1 and ids[0] != ids[5]
    summary = ctx.metrics.snapshot()["values"]["clusters"]
    assert summary["clusters"] == 2 and [c["size"] for c in summary["largest"]] == [5, 5]


@pytest.mark.slow
def test_minilm_embeddings_are_offline_normalised_and_cached() -> None:
    pytest.importorskip("sentence_transformers")
    from trajsynth.core.embeddings import cosine_similarity, embed

    texts = ["Book a flight to Paris", "Reserve a plane ticket to Paris", "Delete my files"]
    v = embed(texts)
    assert v.shape == (3, 384) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)
    sim = cosine_similarity(v)
    assert sim[0, 1] > sim[0, 2] + 0.2
    assert np.array_equal(embed(texts[:1]), v[:1])  # from the cache
    labels, _ = kmeans(embed_texts(GROUPS, "minilm"), 2)
    assert len(set(labels[:5])) == 1 and labels[0] != labels[5]

"""Diversity: embed each trajectory, cluster with k-means, summarise the clusters.

Strategy diversity is measured by clustering trajectory embeddings: several clusters mean
several strategies (the quality rules in docs/methods.md). The steps:

1) **text** (:func:`trajectory_texts`): the goal, then the action skeleton (``goal | a b c``),
   so two trajectories cluster together when they ask similar things *and* act alike;
2) **embed** (:func:`embed_texts`): all-MiniLM-L6-v2 unit vectors
   (:mod:`trajsynth.core.embeddings`, offline), or, with ``embedder="tfidf"``, TF-IDF of
   word uni- and bigrams reduced to 64 dimensions by truncated SVD (scikit-learn; no torch,
   for very large sets or machines without the ``embed`` extra);
3) **cluster** (:func:`kmeans`): k-means (scikit-learn; mini-batch above 20,000 rows) with
   ``k`` given or ``round(sqrt(n / 2))`` clamped to [2, 100], seeded;
4) **summarise** (:func:`cluster_summary`): cluster count, size entropy (bits, and divided by
   ``log2 k`` so 1 means equal sizes), and the largest clusters with the goal nearest their
   centroid as the representative.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

__all__ = [
    "auto_k",
    "cluster_summary",
    "embed_texts",
    "kmeans",
    "size_entropy",
    "trajectory_texts",
]

Embedder = Literal["minilm", "tfidf"]


def trajectory_texts(goals: Sequence[str | None], skeletons: Sequence[str]) -> list[str]:
    """``goal | skeleton`` per row (just the goal when there are no calls)."""
    return [f"{g or ''} | {s}" if s else (g or "") for g, s in zip(goals, skeletons, strict=True)]


def embed_texts(texts: Sequence[str], embedder: Embedder = "minilm", seed: int = 0) -> np.ndarray:
    """Unit vectors for ``texts`` (step 2)."""
    if embedder == "minilm":
        from ..core.embeddings import embed

        return embed(list(texts))
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.preprocessing import normalize

    if not texts:
        return np.zeros((0, 64), dtype=np.float32)
    tfidf = TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True).fit_transform(texts)
    dims = min(64, tfidf.shape[1] - 1, tfidf.shape[0] - 1)
    if dims < 2:
        return normalize(tfidf.toarray()).astype(np.float32)
    reduced = TruncatedSVD(n_components=dims, random_state=seed).fit_transform(tfidf)
    return normalize(reduced).astype(np.float32)


def auto_k(n: int) -> int:
    """``round(sqrt(n / 2))`` clamped to [2, 100] (and to n).

    >>> auto_k(200), auto_k(5), auto_k(10**6)
    (10, 2, 100)
    """
    return max(1, min(n, max(2, min(100, round(math.sqrt(n / 2))))))


def kmeans(vectors: np.ndarray, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(labels, centroids)`` of k-means with ``k`` clusters (step 3)."""
    n = len(vectors)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros((0, vectors.shape[1]), dtype=np.float32)
    k = max(1, min(k, n))
    if n > 20_000:
        from sklearn.cluster import MiniBatchKMeans

        model: Any = MiniBatchKMeans(
            n_clusters=k, random_state=seed % (2**32), batch_size=4096, n_init=3
        )
    else:
        from sklearn.cluster import KMeans

        model = KMeans(n_clusters=k, random_state=seed % (2**32), n_init=3)
    labels = model.fit_predict(vectors)
    return labels.astype(np.int64), model.cluster_centers_.astype(np.float32)


def size_entropy(sizes: Sequence[int]) -> tuple[float, float]:
    """Shannon entropy of the cluster-size distribution in bits, and that over ``log2 k``.

    >>> size_entropy([5, 5, 5, 5]), size_entropy([10, 0])
    ((2.0, 1.0), (0.0, 0.0))
    """
    s = np.asarray([x for x in sizes if x > 0], dtype=np.float64)
    if len(s) <= 1:
        return 0.0, 0.0
    p = s / s.sum()
    h = float(-(p * np.log2(p)).sum())
    return h, h / math.log2(len(s))


def cluster_summary(
    labels: np.ndarray,
    goals: Sequence[str | None],
    vectors: np.ndarray | None = None,
    centroids: np.ndarray | None = None,
    top: int = 5,
) -> dict[str, Any]:
    """Step 4: count, entropy and the ``top`` largest clusters with a representative goal.

    The representative is the goal nearest the centroid when vectors are given, else the goal
    of the cluster's first row.
    """
    labels = np.asarray(labels)
    if len(labels) == 0:
        return {"clusters": 0, "entropy_bits": 0.0, "normalized_entropy": 0.0, "largest": []}
    ids, sizes = np.unique(labels, return_counts=True)
    h, hn = size_entropy(sizes.tolist())
    largest = []
    for idx in np.argsort(-sizes, kind="stable")[:top]:
        c = ids[idx]
        members = np.flatnonzero(labels == c)
        if vectors is not None and centroids is not None and c < len(centroids):
            d = np.linalg.norm(vectors[members] - centroids[c], axis=1)
            rep = members[int(np.argmin(d))]
        else:
            rep = members[0]
        largest.append(
            {"cluster": int(c), "size": int(sizes[idx]), "representative": goals[rep] or ""}
        )
    return {
        "clusters": len(ids),
        "entropy_bits": h,
        "normalized_entropy": hn,
        "sizes": {int(c): int(s) for c, s in zip(ids, sizes, strict=True)},
        "largest": largest,
    }

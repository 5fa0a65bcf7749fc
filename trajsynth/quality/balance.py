"""Difficulty balancing: stratified sampling to a target mix (30% easy / 50% medium / 20% hard
by default, the reference mix), spread across domains and diversity clusters.

1) **plan** (:func:`plan_mix`): the requested size ``N`` (default: every labelled row) is
   split over the buckets by the mix with the largest-remainder method, so the targets add up
   to ``N`` exactly. A bucket holding fewer rows than its target is *short*; the plan records
   by how much. Then, by the ``keep_all`` flag:
   - keep the mix (default): ``N`` shrinks to the largest size whose targets every bucket can
     fill, so the proportions hold and every bucket is downsampled alike;
   - keep all: short buckets give every row they have, the others keep their targets, and the
     mix is off by what was short;
2) **spread** (:func:`water_fill`): inside a bucket, the rows are grouped into strata by
   (domain, cluster_id) and the bucket's target is shared out max-min fairly (water filling):
   every stratum gets the same number of rows, except those that have fewer, which give all;
   so small domains and rare clusters are kept before large ones are thinned;
3) **pick**: inside a stratum, rows are taken by a seeded hash of their id (a uniform random
   choice that does not depend on input order or sharding); the output keeps input order.

Rows without a difficulty label cannot be placed and are dropped (counted as ``unlabelled``).
Everything runs on whole columns with numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .columns import as_array, hash_strings

__all__ = [
    "BUCKETS",
    "BalancePlan",
    "BalanceResult",
    "apportion",
    "balance",
    "balance_codes",
    "bucket_codes",
    "id_hashes",
    "plan_mix",
    "stratum_values",
    "water_fill",
]

BUCKETS = ("easy", "medium", "hard")


def apportion(total: int, mix: tuple[float, ...]) -> np.ndarray:
    """Split ``total`` by ``mix`` with the largest-remainder method (sums to ``total``).

    >>> apportion(10, (0.3, 0.5, 0.2)).tolist(), apportion(7, (0.3, 0.5, 0.2)).tolist()
    ([3, 5, 2], [2, 4, 1])
    """
    w = np.asarray(mix, dtype=np.float64)
    w = w / w.sum()
    exact = w * total
    base = np.floor(exact + 1e-9).astype(np.int64)
    rest = int(total - base.sum())
    if rest > 0:
        order = np.lexsort((np.arange(len(w)), -(exact - base)))
        base[order[:rest]] += 1
    return base


@dataclass
class BalancePlan:
    """How many rows each bucket gives, and why."""

    mix: tuple[float, ...]
    available: dict[str, int]
    requested: int  # N asked for (or every labelled row)
    targets: dict[str, int]  # per bucket, before shortfalls
    shortfalls: dict[str, int]  # per short bucket: rows missing from its target
    final: dict[str, int]  # per bucket: rows actually taken
    keep_all: bool

    @property
    def size(self) -> int:
        return sum(self.final.values())

    def achieved_mix(self) -> dict[str, float]:
        total = self.size
        return {b: (v / total if total else 0.0) for b, v in self.final.items()}

    def as_dict(self) -> dict[str, Any]:
        return {
            "mix": dict(zip(BUCKETS, self.mix, strict=True)),
            "available": self.available,
            "requested": self.requested,
            "targets": self.targets,
            "shortfalls": self.shortfalls,
            "final": self.final,
            "size": self.size,
            "achieved_mix": self.achieved_mix(),
            "keep_all": self.keep_all,
        }


def plan_mix(
    available: dict[str, int],
    mix: tuple[float, ...] = (0.3, 0.5, 0.2),
    size: int | None = None,
    keep_all: bool = False,
) -> BalancePlan:
    """Step 1 of the module docstring.

    >>> p = plan_mix({"easy": 500, "medium": 300, "hard": 50})
    >>> p.targets, p.shortfalls
    ({'easy': 255, 'medium': 425, 'hard': 170}, {'medium': 125, 'hard': 120})
    >>> p.final
    {'easy': 75, 'medium': 125, 'hard': 50}
    >>> plan_mix({"easy": 500, "medium": 300, "hard": 50}, keep_all=True).final
    {'easy': 255, 'medium': 300, 'hard': 50}
    """
    counts = np.array([available.get(b, 0) for b in BUCKETS], dtype=np.int64)
    requested = int(counts.sum()) if size is None else int(size)
    targets = apportion(requested, mix)
    short = np.maximum(targets - counts, 0)
    if not short.any():
        final = targets
    elif keep_all:
        final = np.minimum(targets, counts)
    else:
        w = np.asarray(mix, dtype=np.float64) / float(np.sum(mix))
        ratios = [counts[i] / w[i] for i in range(len(w)) if w[i] > 0]
        n = min(requested, int(np.floor(min(ratios) + 1e-9))) if ratios else 0
        while n > 0 and np.any(apportion(n, mix) > counts):
            n -= 1
        final = apportion(n, mix)
    return BalancePlan(
        mix=tuple(float(x) for x in mix),
        available={b: int(c) for b, c in zip(BUCKETS, counts, strict=True)},
        requested=requested,
        targets={b: int(t) for b, t in zip(BUCKETS, targets, strict=True)},
        shortfalls={b: int(s) for b, s in zip(BUCKETS, short, strict=True) if s > 0},
        final={b: int(f) for b, f in zip(BUCKETS, final, strict=True)},
        keep_all=keep_all,
    )


def water_fill(sizes: np.ndarray, quota: int, tiebreak: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair allocation of ``quota`` over strata of ``sizes`` (step 2).

    The strata that cannot take the common level give everything; the remainder after the
    common level goes one each to the strata first in ``tiebreak`` order.

    >>> water_fill(np.array([1, 10, 10, 3]), 12).tolist()
    [1, 4, 4, 3]
    >>> water_fill(np.array([5, 5]), 7, tiebreak=np.array([1, 0])).tolist()
    [3, 4]
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    m = len(sizes)
    quota = int(min(quota, sizes.sum()))
    if m == 0 or quota <= 0:
        return np.zeros(m, dtype=np.int64)
    s = np.sort(sizes)
    before = np.concatenate([[0], np.cumsum(s)[:-1]])
    # total allocated if the level were s[k]: everything below plus s[k] for the rest
    at_level = before + s * (m - np.arange(m))
    k = int(np.searchsorted(at_level, quota, side="right"))
    if k >= m:
        return sizes.copy()
    level = (quota - before[k]) // (m - k)
    alloc = np.minimum(sizes, level)
    rest = quota - int(alloc.sum())
    if rest > 0:
        room = np.flatnonzero(sizes > alloc)
        order = room[np.argsort(tiebreak[room] if tiebreak is not None else room, kind="stable")]
        alloc[order[:rest]] += 1
    return alloc


@dataclass
class BalanceResult:
    keep: np.ndarray  # bool per row
    plan: BalancePlan
    unlabelled: int
    strata: dict[str, int] = field(default_factory=dict)  # bucket → number of strata


def _codes(col: pa.Array | pa.ChunkedArray | None, n: int) -> np.ndarray:
    if col is None:
        return np.zeros(n, dtype=np.int64)
    arr = stratum_values(col)
    return (
        as_array(pc.dictionary_encode(arr)).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    )


def bucket_codes(difficulty: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Bucket index of each row (0 easy, 1 medium, 2 hard; -1 unlabelled)."""
    diff = pc.fill_null(as_array(difficulty).cast(pa.string()), "")
    bucket = np.full(len(diff), -1, dtype=np.int64)
    for i, b in enumerate(BUCKETS):
        bucket[pc.equal(diff, b).to_numpy(zero_copy_only=False)] = i
    return bucket


def stratum_values(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A strata column (domain, cluster) as the strings whose codes :func:`balance` uses."""
    return pc.fill_null(as_array(col).cast(pa.string()), "\x00")


def id_hashes(ids: pa.Array | pa.ChunkedArray, seed: int) -> np.ndarray:
    """The seeded hash of each id that orders rows inside a stratum (step 3)."""
    return hash_strings(as_array(ids).cast(pa.string()), seed=seed)


def balance(
    ids: pa.Array | pa.ChunkedArray,
    difficulty: pa.Array | pa.ChunkedArray,
    *,
    domain: pa.Array | pa.ChunkedArray | None = None,
    cluster: pa.Array | pa.ChunkedArray | None = None,
    mix: tuple[float, ...] = (0.3, 0.5, 0.2),
    size: int | None = None,
    keep_all: bool = False,
    seed: int = 0,
) -> BalanceResult:
    """Steps 1–3 over whole columns; returns the keep mask and the plan."""
    n = len(ids)
    return balance_codes(
        bucket_codes(difficulty),
        _codes(domain, n),
        _codes(cluster, n),
        id_hashes(ids, seed),
        mix=mix,
        size=size,
        keep_all=keep_all,
        seed=seed,
    )


def balance_codes(
    bucket: np.ndarray,
    dom: np.ndarray,
    clu: np.ndarray,
    h: np.ndarray,
    *,
    mix: tuple[float, ...] = (0.3, 0.5, 0.2),
    size: int | None = None,
    keep_all: bool = False,
    seed: int = 0,
) -> BalanceResult:
    """Steps 1–3 on fixed-width codes: ``bucket`` (:func:`bucket_codes`), domain and cluster
    codes numbered in order of first appearance, and the id hashes (:func:`id_hashes`). Works
    the same whether the codes came from one table or were gathered shard by shard."""
    n = len(bucket)
    labelled = bucket >= 0
    available = {b: int(np.sum(bucket == i)) for i, b in enumerate(BUCKETS)}
    plan = plan_mix(available, mix, size, keep_all)

    # strata: (bucket, domain, cluster) → one code
    key = (
        (bucket + 1) * (dom.max(initial=0) + 1) * (clu.max(initial=0) + 1)
        + dom * (clu.max(initial=0) + 1)
        + clu
    )
    stratum_key, stratum = np.unique(key, return_inverse=True)
    stratum = stratum.reshape(-1)
    sizes = np.bincount(stratum, minlength=len(stratum_key))
    stratum_bucket = np.zeros(len(stratum_key), dtype=np.int64) - 1
    stratum_bucket[stratum] = bucket
    alloc = np.zeros(len(stratum_key), dtype=np.int64)
    tiebreak = hash_strings(pa.array([str(k) for k in stratum_key]), seed=seed)
    strata_count: dict[str, int] = {}
    for i, b in enumerate(BUCKETS):
        members = np.flatnonzero(stratum_bucket == i)
        strata_count[b] = len(members)
        alloc[members] = water_fill(sizes[members], plan.final[b], tiebreak[members])

    # pick by seeded hash of the id inside each stratum
    order = np.lexsort((h, stratum))
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n) - starts[stratum[order]]
    keep = labelled & (pos < alloc[stratum])
    return BalanceResult(
        keep=keep, plan=plan, unlabelled=int(n - labelled.sum()), strata=strata_count
    )

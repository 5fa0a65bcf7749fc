"""Deduplication: exact, MinHash-LSH near duplicates, and (optional) semantic duplicates.

Two trajectories are duplicates when they ask the same thing and do the same thing. What is
compared is the *normalised goal* (lowercase, punctuation removed, :func:`normalize_text`)
and the *action skeleton* (tool names in call order, parallel calls sorted:
:func:`~trajsynth.quality.columns.action_skeletons`), never the argument values or the wording
of replies. The steps, in the order :func:`dedup` runs them:

1) **exact**: rows with an equal (normalised goal, skeleton) pair form a group;
2) **shingles** (:func:`shingles`): goal word ``k``-grams (``k`` = 3; a goal of fewer words is
   one shingle) plus action bigrams of the skeleton framed by start/end markers (``^ a``,
   ``a b``, ``b $``; no calls gives ``^ $``), each a 64-bit content hash;
3) **MinHash** (Broder 1997) (:func:`minhash_signatures`): ``num_perm`` hash functions
   ``h_k(x) = ⌊(a_k · x mod 2^64) / 2^32⌋`` with odd random ``a_k`` (multiply-shift,
   Dietzfelbinger et al. 1997), applied to whole blocks of shingles at once with numpy, and the
   minimum per row and function: signature matrix ``(num_perm, rows)`` of uint32;
4) **LSH banding** (Indyk & Motwani 1998; Leskovec et al., *Mining of Massive Datasets* §3.4):
   ``b`` bands of ``r`` rows (:func:`optimal_bands`: at least 99% of pairs at the threshold
   become candidates, with the fewest false positives below it; 15 × 8 for 0.85 and 128);
   rows whose band values agree in any band are candidate pairs;
5) **verification**: a candidate pair is a near duplicate when the *exact* Jaccard similarity
   of the two shingle sets is ≥ ``threshold`` (0.85 by default, the reference rule), so the
   outcome does not depend on MinHash's estimation error, only on LSH recall (≈1 at the
   threshold with the default 128 permutations). Only candidates whose signatures agree on
   at least ``threshold − 0.15`` of their values are checked exactly (the estimate's standard
   deviation at 0.85 and 128 permutations is 0.03, so none within reach is skipped);
6) **semantic** (optional): unit embeddings of goal + skeleton from all-MiniLM-L6-v2
   (:mod:`trajsynth.core.embeddings`); pairs with cosine ≥ ``semantic_threshold``;
7) **survivors** (:func:`greedy_survivors`): rows are visited by priority, highest
   ``quality_score`` first (missing scores last), then lowest ``id``; a row is dropped when it
   duplicates a row already kept, and records which one. So every dropped row has a better
   kept twin, no two kept rows are duplicates, and the outcome does not depend on the order of
   the input.

Deviations from a textbook pipeline: (a) verification uses exact Jaccard instead of the
signature estimate (cheap here, and it makes the result reproducible); (b) an LSH bucket of
more than ``max_bucket`` rows is linked as a star to its best row instead of all pairs,
which bounds memory on pathological inputs (such rows almost always share one shingle set).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .columns import action_skeletons, as_array, hash_strings, mix64, tokens

__all__ = [
    "DedupResult",
    "ShingleSets",
    "band_keys",
    "bucket_pairs",
    "dedup",
    "exact_drops",
    "exact_groups",
    "exact_keys",
    "greedy_survivors",
    "jaccard_pairs",
    "lsh_candidates",
    "minhash_signatures",
    "optimal_bands",
    "priority_rank",
    "shingles",
    "signature_agreement",
    "unique_pairs",
]

KEEP, EXACT, NEAR, SEMANTIC = 0, 1, 2, 3
REASONS = {KEEP: "kept", EXACT: "exact", NEAR: "near", SEMANTIC: "semantic"}

_GOAL_SALT = np.uint64(0x9E3779B97F4A7C15)
_ACTION_SALT = np.uint64(0xC2B2AE3D27D4EB4F)
_COMBINE = np.uint64(0xFF51AFD7ED558CCD)


# --------------------------------------------------------------------------------------
# 1) exact
# --------------------------------------------------------------------------------------


def exact_groups(goal_norm: pa.Array, skeleton: pa.Array) -> np.ndarray:
    """Group code per row: equal codes ⇔ equal (normalised goal, skeleton)."""
    key = pc.binary_join_element_wise(goal_norm, skeleton, "\x1f")
    encoded = pc.dictionary_encode(key)
    return as_array(encoded).indices.to_numpy(zero_copy_only=False).astype(np.int64)


def exact_keys(goal_tokens: pa.Array, names: pa.Array, name_offsets: np.ndarray) -> pa.Array:
    """The (normalised goal, skeleton) key of each row as one string (equal ⇔ exact twins)."""
    lists = pa.ListArray.from_arrays(pa.array(name_offsets.astype(np.int32)), names)
    skeleton = pc.fill_null(pc.binary_join(lists, " "), "")
    goal_norm = pc.fill_null(pc.binary_join(goal_tokens, " "), "")
    return pc.binary_join_element_wise(goal_norm, skeleton, "\x1f")


def exact_drops(group: np.ndarray, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows dropped as exact duplicates, the kept leader of each): in every group the row of
    best ``rank`` is kept. ``group`` may be any integer code per row (equal ⇔ same group)."""
    n = len(group)
    order = np.lexsort((rank, group))
    g_sorted = group[order]
    head = np.ones(n, dtype=bool)
    head[1:] = g_sorted[1:] != g_sorted[:-1]
    leader = order[np.maximum.accumulate(np.where(head, np.arange(n), 0))]
    return order[~head], leader[~head]


# --------------------------------------------------------------------------------------
# 2) shingles
# --------------------------------------------------------------------------------------


@dataclass
class ShingleSets:
    """Shingle hashes of every row: row ``r`` owns ``values[offsets[r]:offsets[r+1]]``."""

    values: np.ndarray  # uint64
    offsets: np.ndarray  # int64, (rows + 1,)

    @property
    def rows(self) -> int:
        return len(self.offsets) - 1

    def of(self, r: int) -> set[int]:
        return set(self.values[self.offsets[r] : self.offsets[r + 1]].tolist())

    def subset(self, rows: np.ndarray) -> ShingleSets:
        """The sets of ``rows``, in that order."""
        values, owner = _gather(self, rows)
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner, minlength=len(rows)), out=offsets[1:])
        return ShingleSets(values=values, offsets=offsets)


def _hash_tokens(tokens: pa.Array, seed: int) -> np.ndarray:
    """Hash every token, hashing each distinct token once."""
    if len(tokens) == 0:
        return np.zeros(0, dtype=np.uint64)
    enc = as_array(pc.dictionary_encode(tokens))
    return hash_strings(enc.dictionary, seed=seed)[enc.indices.to_numpy(zero_copy_only=False)]


def _combine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return mix64(a * _COMBINE + b)


def shingles(
    goal_tokens: pa.Array | pa.ChunkedArray,
    skeleton: pa.Array | pa.ChunkedArray | tuple[pa.Array, np.ndarray],
    k: int = 3,
) -> ShingleSets:
    """Goal word ``k``-grams and action bigrams of every row (see the module docstring).

    ``goal_tokens`` is the goals' :func:`~trajsynth.quality.columns.tokens` (a list array);
    ``skeleton`` the ``messages`` column, or its ``(names, offsets)`` from
    :func:`~trajsynth.quality.columns.action_skeletons` when already computed.
    """
    words_list = as_array(goal_tokens)
    n = len(words_list)
    # goal word k-grams
    words = pc.list_flatten(words_list)
    w_row = pc.list_parent_indices(words_list).to_numpy(zero_copy_only=False).astype(np.int64)
    nonempty = pc.not_equal(words, "").to_numpy(zero_copy_only=False)
    words = words.filter(pa.array(nonempty))
    w_row = w_row[nonempty]
    wh = _hash_tokens(words, seed=1)
    w_count = np.bincount(w_row, minlength=n)
    w_start = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(w_count, out=w_start[1:])
    total = len(wh)
    # grams per row: one per window of k words, or one of all the words when fewer than k
    g_count = np.where(w_count >= k, w_count - k + 1, (w_count > 0).astype(np.int64))

    # action bigrams with ^/$ markers: sequence per row = ^ n1 .. nm $
    if isinstance(skeleton, tuple):
        names, n_off = skeleton
    else:
        names, _n_row, n_off = action_skeletons(skeleton)
    nh = _hash_tokens(names, seed=2)
    m = len(nh)
    a_count = np.diff(n_off) + 1
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(g_count + a_count, out=offsets[1:])
    values = np.empty(offsets[-1], dtype=np.uint64)

    # goal grams of rows with at least k words, written at their place in each row
    if total >= k:
        pos = np.arange(total - k + 1)
        pos = pos[w_row[pos] == w_row[pos + k - 1]]
        g = wh[pos]
        for t in range(1, k):
            g = _combine(g, wh[pos + t])
        rows = w_row[pos]
        values[offsets[rows] + (pos - w_start[rows])] = g ^ _GOAL_SALT
    # rows with 1..k-1 words: one gram of all their words, first in the row
    short = np.flatnonzero((w_count > 0) & (w_count < k))
    if len(short):
        s_vals = wh[w_start[short]]
        for t in range(1, k - 1):
            more = w_count[short] > t
            if not more.any():
                break
            s_vals[more] = _combine(s_vals[more], wh[w_start[short[more]] + t])
        values[offsets[short]] = s_vals ^ _GOAL_SALT

    seq = np.empty(m + 2 * n, dtype=np.uint64)
    name_rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(n_off))
    seq[np.arange(m) + 2 * name_rows + 1] = nh
    start_pos = n_off[:-1] + 2 * np.arange(n)
    end_pos = n_off[1:] + 2 * np.arange(n) + 1
    seq[start_pos] = np.uint64(0x5EED5EED5EED5EED)  # ^
    seq[end_pos] = np.uint64(0xE0DE0DE0DE0DE0D0)  # $
    first = np.ones(m + 2 * n, dtype=bool)
    first[end_pos] = False
    bi_pos = np.flatnonzero(first)  # row r's bigrams start at n_off[r] + r
    act_rows = np.repeat(np.arange(n, dtype=np.int64), a_count)
    within = np.arange(len(bi_pos)) - (n_off[act_rows] + act_rows)
    values[offsets[act_rows] + g_count[act_rows] + within] = (
        _combine(seq[bi_pos], seq[bi_pos + 1]) ^ _ACTION_SALT
    )
    return ShingleSets(values=values, offsets=offsets)


# --------------------------------------------------------------------------------------
# 3) MinHash
# --------------------------------------------------------------------------------------


def _multipliers(num_perm: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2**63, size=num_perm, dtype=np.uint64)
    return (a << np.uint64(1)) | np.uint64(1)


def minhash_signatures(
    sets: ShingleSets,
    num_perm: int = 128,
    *,
    seed: int = 1,
    block: int = 2048,
    workers: int | None = None,
) -> np.ndarray:
    """MinHash signatures, shape ``(num_perm, rows)``, uint32 (see step 3).

    Rows are processed in blocks of about ``block`` shingles: one ``(num_perm, block)``
    uint64 multiply and ``np.minimum.reduceat`` per row; the high 32 bits of the minimum are
    the minimum of the high 32 bits. numpy releases the GIL inside both, so blocks run on
    ``workers`` threads (default: the CPU count, at most 8). Every row must have at least one
    shingle (:func:`shingles` guarantees it).
    """
    n = sets.rows
    a = _multipliers(num_perm, seed)[:, None]
    sig = np.empty((num_perm, n), dtype=np.uint32)
    if n == 0:
        return sig
    offsets = sets.offsets
    if np.any(np.diff(offsets) == 0):
        raise ValueError("every row needs at least one shingle")
    # row blocks of about `block` shingles each
    cuts = np.searchsorted(offsets, np.arange(0, offsets[-1], block), side="right") - 1
    cuts = np.unique(np.concatenate([cuts, [n]]))
    spans = list(itertools.pairwise(cuts.tolist()))
    widest = max(int(offsets[r1] - offsets[r0]) for r0, r1 in spans)
    workers = max(1, min(workers or os.cpu_count() or 1, 8, len(spans)))

    def run(part: list[tuple[int, int]]) -> None:
        buf = np.empty((num_perm, widest), dtype=np.uint64)
        with np.errstate(over="ignore"):
            for r0, r1 in part:
                s0, s1 = offsets[r0], offsets[r1]
                out = buf[:, : s1 - s0]
                np.multiply(a, sets.values[None, s0:s1], out=out)
                low = np.minimum.reduceat(out, offsets[r0:r1] - s0, axis=1)
                sig[:, r0:r1] = low >> np.uint64(32)

    if workers == 1:
        run(spans)
    else:
        from concurrent.futures import ThreadPoolExecutor

        chunks = [spans[i::workers] for i in range(workers)]
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(run, chunks))
    return sig


# --------------------------------------------------------------------------------------
# 4) LSH banding
# --------------------------------------------------------------------------------------


def optimal_bands(threshold: float, num_perm: int, recall: float = 0.99) -> tuple[int, int]:
    """``(b, r)`` with ``b·r ≤ num_perm`` whose chance of making a pair *at* the threshold a
    candidate, ``1 − (1 − t^r)^b``, is at least ``recall``, and which among those has the
    smallest false-positive area ``∫₀ᵗ 1 − (1 − s^r)^b ds``.

    datasketch's ``MinHashLSH`` instead minimises equally weighted false-positive and
    false-negative areas, which at 0.85 and 128 permutations gives (8, 16): only 46% of pairs
    at the threshold become candidates. Candidates are verified exactly here, so a false
    positive costs a little time and a false negative a missed duplicate; recall comes first.

    >>> optimal_bands(0.85, 128)
    (15, 8)
    """
    best: tuple[int, int] | None = None
    best_fp = float("inf")
    s = np.linspace(0.0, threshold, 201)
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            if 1 - (1 - threshold**r) ** b < recall:
                continue
            y = 1 - (1 - s**r) ** b
            fp = float(np.sum((y[1:] + y[:-1]) * np.diff(s)) / 2)
            if fp < best_fp:
                best, best_fp = (b, r), fp
    if best is None:  # no split reaches the recall: take the most sensitive one
        best = (num_perm, 1)
    return best


def _run_pairs(starts: np.ndarray, sizes: np.ndarray, order: np.ndarray) -> np.ndarray:
    """All pairs (as int64 rows of a (P, 2) array) within each run of ``order``."""
    counts = sizes * (sizes - 1) // 2
    if counts.sum() == 0:
        return np.zeros((0, 2), dtype=np.int64)
    # position t in a run pairs with the (size - 1 - t) later positions
    elem_start = np.repeat(starts, sizes)
    elem_t = np.arange(len(elem_start)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    elem_size = np.repeat(sizes, sizes)
    later = elem_size - 1 - elem_t
    first = np.repeat(elem_start + elem_t, later)
    k = np.arange(len(first)) - np.repeat(np.cumsum(later) - later, later)
    second = first + 1 + k
    return np.stack([order[first], order[second]], axis=1)


def band_keys(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """One uint64 key per band and row ``(bands, rows)``: equal keys ⇔ (almost surely) equal
    signature values in that band. A row's keys depend on its signature only, so they can be
    computed shard by shard."""
    n = sig.shape[1]
    out = np.empty((bands, n), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for band in range(bands):
            key = np.full(n, np.uint64(band + 1), dtype=np.uint64)
            for c in range(band * rows, (band + 1) * rows):
                key *= _COMBINE
                key += sig[c]
            out[band] = mix64(key)
    return out


def bucket_pairs(key: np.ndarray, rank: np.ndarray, *, max_bucket: int = 256) -> np.ndarray:
    """Pairs ``(P, 2)`` of rows whose ``key`` (one band) is equal; a bucket of more than
    ``max_bucket`` rows is linked as a star to its best-ranked row."""
    n = len(key)
    order = np.argsort(key)
    sk = key[order]
    edge = np.flatnonzero(np.diff(sk) != 0) + 1
    starts = np.concatenate([[0], edge]).astype(np.int64)
    sizes = np.diff(np.concatenate([starts, [n]]))
    multi = sizes > 1
    starts, sizes = starts[multi], sizes[multi]
    if not len(starts):
        return np.zeros((0, 2), dtype=np.int64)
    small = sizes <= max_bucket
    found = [_run_pairs(starts[small], sizes[small], order)]
    for s, z in zip(starts[~small], sizes[~small], strict=True):
        members = order[s : s + z]
        best = members[np.argmin(rank[members])]
        others = members[members != best]
        found.append(np.stack([np.full(len(others), best), others], axis=1))
    return np.concatenate(found).astype(np.int64)


def unique_pairs(found: list[np.ndarray], n: int) -> np.ndarray:
    """The distinct pairs among ``found``, each as ``i < j``, sorted."""
    found = [f for f in found if len(f)]
    if not found:
        return np.zeros((0, 2), dtype=np.int64)
    pairs = np.sort(np.concatenate(found), axis=1)
    code = np.sort(pairs[:, 0] * np.int64(n) + pairs[:, 1])
    code = code[np.concatenate([[True], code[1:] != code[:-1]])]
    return np.stack([code // n, code % n], axis=1)


def lsh_candidates(
    sig: np.ndarray, bands: int, rows: int, rank: np.ndarray, *, max_bucket: int = 256
) -> np.ndarray:
    """Candidate pairs ``(P, 2)`` (each ``i < j``, unique): rows that agree on any band."""
    keys = band_keys(sig, bands, rows)
    found = [bucket_pairs(k, rank, max_bucket=max_bucket) for k in keys]
    return unique_pairs(found, sig.shape[1])


# --------------------------------------------------------------------------------------
# 5) verification
# --------------------------------------------------------------------------------------


def _gather(sets: ShingleSets, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated shingles of ``rows`` and, for each element, its position in ``rows``."""
    starts = sets.offsets[rows]
    sizes = sets.offsets[rows + 1] - starts
    owner = np.repeat(np.arange(len(rows), dtype=np.int64), sizes)
    within = np.arange(len(owner)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return sets.values[np.repeat(starts, sizes) + within], owner


def signature_agreement(
    sig: np.ndarray, pairs: np.ndarray, *, floor: float = 0.0, chunk: int = 65_536
) -> np.ndarray:
    """Share of equal MinHash values of each pair: the estimate of their Jaccard similarity.

    With ``floor`` > 0, pairs are first compared on a quarter of the values, and a pair whose
    quarter estimate is below ``floor − 0.2`` is reported as 0 without the full comparison
    (with 128 permutations, floor 0.7: a pair of Jaccard 0.85 is cut with probability about
    2·10⁻⁸, 5.5 standard deviations of the 32-value estimate).
    """
    out = np.zeros(len(pairs), dtype=np.float64)
    if len(pairs) == 0:
        return out
    by_row = np.ascontiguousarray(sig.T)  # (rows, num_perm): one row's values together
    quarter = max(1, by_row.shape[1] // 4)
    head = np.ascontiguousarray(by_row[:, :quarter])
    for start in range(0, len(pairs), chunk):
        p = pairs[start : start + chunk]
        if floor > 0:
            rough = (head[p[:, 0]] == head[p[:, 1]]).mean(axis=1)
            keep = np.flatnonzero(rough >= floor - 0.2)
            p = p[keep]
            out[start + keep] = (by_row[p[:, 0]] == by_row[p[:, 1]]).mean(axis=1)
        else:
            out[start : start + len(p)] = (by_row[p[:, 0]] == by_row[p[:, 1]]).mean(axis=1)
    return out


def jaccard_pairs(sets: ShingleSets, pairs: np.ndarray) -> np.ndarray:
    """Exact Jaccard similarity of the shingle *sets* of each pair, vectorised over pairs.

    The rows involved become a sparse 0/1 matrix (row × distinct shingle, scipy CSR);
    ``|A ∩ B|`` of every pair is the sum of the element-wise product of its two rows.

    >>> s = ShingleSets(np.array([1, 2, 3, 2, 3, 4, 1, 1], np.uint64), np.array([0, 3, 6, 8]))
    >>> jaccard_pairs(s, np.array([[0, 1], [0, 2]])).tolist()
    [0.5, 0.3333333333333333]
    """
    import scipy.sparse as sp

    if len(pairs) == 0:
        return np.zeros(0, dtype=np.float64)
    rows, inverse = np.unique(pairs.ravel(), return_inverse=True)
    vals, owner = _gather(sets, rows)
    _distinct, col = np.unique(vals, return_inverse=True)
    x = sp.csr_matrix(
        (np.ones(len(vals), dtype=np.float32), (owner, col)),
        shape=(len(rows), len(_distinct)),
    )
    x.data[:] = 1.0  # a shingle repeated within a row counts once (set semantics)
    inverse = inverse.reshape(-1, 2)
    a, b = x[inverse[:, 0]], x[inverse[:, 1]]
    inter = np.asarray(a.multiply(b).sum(axis=1)).ravel()
    union = np.diff(a.indptr) + np.diff(b.indptr) - inter
    return inter / np.maximum(union, 1)


# --------------------------------------------------------------------------------------
# 7) survivors
# --------------------------------------------------------------------------------------


def priority_rank(ids: pa.Array | pa.ChunkedArray, quality: np.ndarray | None) -> np.ndarray:
    """Rank of each row in survivor order: highest quality first (NaN last), then lowest id."""
    n = len(ids)
    q = np.zeros(n) if quality is None else np.nan_to_num(quality, nan=-np.inf)
    id_rank = pc.rank(as_array(ids), sort_keys="ascending", tiebreaker="first").to_numpy()
    order = np.lexsort((id_rank, -q))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    return rank


def greedy_survivors(n: int, pairs: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """``duplicate_of`` per row (-1 = kept): visit rows by rank, drop a row that pairs with a
    row already kept, naming the best such row.

    >>> greedy_survivors(4, np.array([[0, 1], [1, 2], [2, 3]]), np.array([1, 0, 2, 3])).tolist()
    [1, -1, 1, -1]
    """
    dup_of = np.full(n, -1, dtype=np.int64)
    if len(pairs) == 0:
        return dup_of
    a = np.concatenate([pairs[:, 0], pairs[:, 1]])
    b = np.concatenate([pairs[:, 1], pairs[:, 0]])
    # neighbours of each node sorted by the neighbour's rank
    order = np.lexsort((rank[b], a))
    a, b = a[order], b[order]
    nodes, starts = np.unique(a, return_index=True)
    ends = np.append(starts[1:], len(a))
    visit = np.argsort(rank[nodes], kind="stable")
    kept = np.zeros(n, dtype=bool)
    nb = b.tolist()
    kept_list = kept  # numpy bool lookups on Python ints are fast enough here
    for idx in visit.tolist():
        node = int(nodes[idx])
        twin = -1
        for j in range(int(starts[idx]), int(ends[idx])):
            other = nb[j]
            if kept_list[other]:
                twin = other
                break  # neighbours are sorted by rank: the first kept one is the best
        if twin >= 0:
            dup_of[node] = twin
        else:
            kept[node] = True
    return dup_of


# --------------------------------------------------------------------------------------
# the whole pass
# --------------------------------------------------------------------------------------


@dataclass
class DedupResult:
    """What :func:`dedup` decided, per row, plus counts and timings."""

    reason: np.ndarray  # int8 per row: KEEP, EXACT, NEAR or SEMANTIC
    duplicate_of: np.ndarray  # int64 per row: index of the kept twin, -1 when kept
    counts: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def keep(self) -> np.ndarray:
        return self.reason == KEEP


def dedup(
    ids: pa.Array | pa.ChunkedArray,
    goals: pa.Array | pa.ChunkedArray,
    messages: pa.Array | pa.ChunkedArray,
    quality: np.ndarray | None = None,
    *,
    exact: bool = True,
    near: bool = True,
    threshold: float = 0.85,
    num_perm: int = 128,
    shingle_size: int = 3,
    bands: tuple[int, int] | None = None,
    seed: int = 1,
    semantic: bool = False,
    semantic_threshold: float = 0.95,
    embed: Callable[[list[str]], np.ndarray] | None = None,
    prefilter_margin: float = 0.15,
) -> DedupResult:
    """Run steps 1–7 of the module docstring over whole columns; see :class:`DedupResult`."""
    import time

    n = len(ids)
    reason = np.zeros(n, dtype=np.int8)
    dup_of = np.full(n, -1, dtype=np.int64)
    seconds: dict[str, float] = {}
    info: dict[str, Any] = {}
    t0 = time.perf_counter()
    rank = priority_rank(ids, quality)
    goal_tokens = tokens(goals)
    names, _row, name_offsets = action_skeletons(messages)
    seconds["prepare"] = time.perf_counter() - t0

    # 1) exact
    if exact and n:
        t0 = time.perf_counter()
        key = exact_keys(goal_tokens, names, name_offsets)
        encoded = as_array(pc.dictionary_encode(key)).indices.to_numpy(zero_copy_only=False)
        dropped, leader = exact_drops(encoded.astype(np.int64), rank)
        reason[dropped] = EXACT
        dup_of[dropped] = leader
        seconds["exact"] = time.perf_counter() - t0

    # 2)–5) near duplicates among the rows still kept
    if near and n:
        t0 = time.perf_counter()
        alive = np.flatnonzero(reason == KEEP)
        sets = shingles(goal_tokens, (names, name_offsets), k=shingle_size)
        if len(alive) < n:
            sets = sets.subset(alive)
        seconds["shingles"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        sig = minhash_signatures(sets, num_perm, seed=seed)
        seconds["minhash"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        b, r = bands or optimal_bands(threshold, num_perm)
        sub_rank = rank[alive]
        cand = lsh_candidates(sig, b, r, sub_rank)
        # estimated similarity first (cheap), exact Jaccard for the plausible pairs only
        floor = threshold - prefilter_margin
        plausible = cand[signature_agreement(sig, cand, floor=floor) >= floor]
        sim = jaccard_pairs(sets, plausible)
        edges = plausible[sim >= threshold - 1e-12]
        local_dup = greedy_survivors(len(alive), edges, sub_rank)
        hit = local_dup >= 0
        reason[alive[hit]] = NEAR
        dup_of[alive[hit]] = alive[local_dup[hit]]
        seconds["lsh_verify"] = time.perf_counter() - t0
        info.update(
            bands=b,
            rows_per_band=r,
            candidates=len(cand),
            verified=len(plausible),
            near_pairs=len(edges),
        )

    # 6) semantic duplicates among the rows still kept
    if semantic and n:
        t0 = time.perf_counter()
        if embed is None:
            from ..core.embeddings import embed as embed_texts

            embed = embed_texts
        from ..core.embeddings import similar_pairs

        alive = np.flatnonzero(reason == KEEP)
        lists = pa.ListArray.from_arrays(pa.array(name_offsets.astype(np.int32)), names)
        skel = pc.fill_null(pc.binary_join(lists, " "), "").take(pa.array(alive)).to_pylist()
        goals_alive = pc.fill_null(as_array(goals).take(pa.array(alive)), "").to_pylist()
        texts = [f"{g} | {s}" if s else g for g, s in zip(goals_alive, skel, strict=True)]
        vectors = embed(texts)
        i, j, _s = similar_pairs(vectors, semantic_threshold)
        local_dup = greedy_survivors(len(alive), np.stack([i, j], axis=1), rank[alive])
        hit = local_dup >= 0
        reason[alive[hit]] = SEMANTIC
        dup_of[alive[hit]] = alive[local_dup[hit]]
        seconds["semantic"] = time.perf_counter() - t0

    counts = {
        "rows": n,
        "kept": int(np.sum(reason == KEEP)),
        "exact_duplicates": int(np.sum(reason == EXACT)),
        "near_duplicates": int(np.sum(reason == NEAR)),
        "semantic_duplicates": int(np.sum(reason == SEMANTIC)),
    }
    return DedupResult(
        reason=reason, duplicate_of=dup_of, counts=counts, seconds=seconds, info=info
    )

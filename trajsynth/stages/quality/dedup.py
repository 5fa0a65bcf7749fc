"""``dedup``: exact, MinHash-LSH near and (optionally) semantic duplicates removed, the best
copy kept (:mod:`trajsynth.quality.dedup` holds the method and its steps).

Dedup compares all rows, but it streams: no pass holds more than one shard's rows, and the
driver keeps only fixed-width columns of every row (a 128-bit exact key, the quality score
and the survivor rank, ~40 bytes a row). The decisions are those of
:func:`~trajsynth.quality.dedup.dedup` on one table in memory, row for row:

1) **sketch** (per shard, in the executor's workers): from ``goal`` and ``messages`` the
   exact key (normalised goal + action skeleton, as a 128-bit hash), the shingles, their
   MinHash signature and its LSH band keys, which are spilled to the run folder; the
   ``quality_score`` comes back with the exact key;
2) **rank** every row as the method does (highest ``quality_score`` first, then lowest id),
   reading only the ``id`` column, and drop exact duplicates (the best row of each group
   stays);
3) **bands** (one task per LSH band, the shuffle by band key): the rows still kept that
   share a band key are candidate pairs (a bucket of more than 256 rows is linked as a star
   to its best row);
4) **verify** (per shard): the shingles and signatures of the candidate rows only are
   rebuilt, pairs whose signatures agree on at least ``threshold − 0.15`` of their values
   are checked with the exact Jaccard similarity, and near duplicates are linked;
5) **survivors** per connected component of that graph (greedy by rank, as the method);
6) read the shards again and yield the survivors in input order; count each kind of
   duplicate in the metrics.

With ``semantic: true`` the embedding pass needs every row's vector at once, and the stage
falls back to the in-memory method over the ``id``/``goal``/``messages``/``quality_score``
columns.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from ...core.errors import ConfigError
from ...core.location import load_array, save_array
from ...quality.columns import action_skeletons, hash_strings, tokens
from ...quality.dedup import (
    EXACT,
    KEEP,
    NEAR,
    ShingleSets,
    band_keys,
    bucket_pairs,
    dedup,
    exact_drops,
    exact_keys,
    greedy_survivors,
    jaccard_pairs,
    minhash_signatures,
    optimal_bands,
    priority_rank,
    shingles,
    signature_agreement,
    unique_pairs,
)
from ..context import Context
from ..kinds import (
    Output,
    ShardRef,
    ShardSet,
    StageConfig,
    StreamingGlobalStage,
    read_shard,
    shard_columns,
)
from ..registry import register

__all__ = ["Dedup", "DedupConfig"]

#: the method's prefilter margin and largest fully linked LSH bucket
_MARGIN = 0.15
_MAX_BUCKET = 256


class DedupConfig(StageConfig):
    exact: bool = Field(True, description="Drop exact duplicates (normalised goal + skeleton).")
    near: bool = Field(True, description="Drop near duplicates (MinHash LSH, exact Jaccard).")
    threshold: float = Field(
        0.85,
        gt=0,
        le=1,
        description="Jaccard similarity at or above which rows are near duplicates.",
    )
    num_perm: int = Field(128, ge=8, le=1024, description="MinHash permutations.")
    shingle_size: int = Field(3, ge=1, le=8, description="Words per goal shingle.")
    semantic: bool = Field(
        False, description="Also drop semantic duplicates (all-MiniLM-L6-v2 embeddings)."
    )
    semantic_threshold: float = Field(
        0.95,
        gt=0,
        le=1,
        description="Cosine similarity at or above which rows are semantic duplicates.",
    )
    chunk_rows: int = Field(50_000, ge=1, description="Rows per yielded batch.")
    against: list[str] = Field(
        default_factory=list,
        description="Inputs of this stage (as `from:` names them: earlier runs' shards) to "
        "dedup against: a row that duplicates one of theirs is dropped, and their own rows "
        "are never written, so a task already trained on is not trained again.",
    )


@register
class Dedup(StreamingGlobalStage[DedupConfig]):
    """Remove exact, near (MinHash LSH, Jaccard ≥ 0.85) and semantic duplicates."""

    name = "dedup"

    def process_shards(self, shards: ShardSet, ctx: Context) -> Iterator[Output]:
        cfg = self.config
        n = shards.total_rows
        if n == 0:
            return
        seed = 1 + ctx.seed
        earlier = self._earlier_rows(shards)
        if cfg.semantic:
            if earlier.any():
                raise ConfigError("dedup: `against` works with exact and near dedup, not semantic")
            keep, counts, info, seconds = self._in_memory(shards, seed)
        else:
            keep, counts, info, seconds = self._streaming(shards, seed, earlier)
        # 6) survivors, in input order (rows of earlier runs are never written)
        keep &= ~earlier
        for i, (start, end) in enumerate(zip(shards.offsets, shards.offsets[1:], strict=False)):
            mask = keep[start:end]
            if mask.any():
                kept = shards.read(i).filter(pa.array(mask))
                for s in range(0, kept.num_rows, cfg.chunk_rows):
                    yield kept.slice(s, cfg.chunk_rows)
            ctx.advance(end - start)
        for name, value in counts.items():
            ctx.metrics.inc(name, value)
        ctx.metrics.set("lsh", info)
        ctx.metrics.set("seconds", {k: round(v, 3) for k, v in seconds.items()})

    def _earlier_rows(self, shards: ShardSet) -> np.ndarray:
        """Per row: does it come from an input named in ``against`` (an earlier run)?"""
        earlier = np.zeros(shards.total_rows, dtype=bool)
        if not self.config.against:
            return earlier
        known = set(shards.inputs)
        missing = [a for a in self.config.against if a not in known]
        if missing:
            raise ConfigError(
                f"dedup: against {missing} names no input of this stage (inputs: {sorted(known)})",
                hint="list the earlier runs' shards in `from:` too, and name them in `against`",
            )
        for i, name in enumerate(shards.inputs):
            if name in self.config.against:
                earlier[shards.offsets[i] : shards.offsets[i + 1]] = True
        return earlier

    def _streaming(
        self, shards: ShardSet, seed: int, earlier: np.ndarray | None = None
    ) -> tuple[np.ndarray, dict, dict, dict]:
        cfg = self.config
        n = shards.total_rows
        if earlier is None:
            earlier = np.zeros(n, dtype=bool)
        spill = str(shards.spill_dir)
        bands, rows = optimal_bands(cfg.threshold, cfg.num_perm)
        seconds: dict[str, float] = {}
        info: dict[str, Any] = {}
        # 1) sketch every shard
        t0 = time.perf_counter()
        with_quality = any("quality_score" in shard_columns(ref) for ref in shards.shards)
        sketch = (cfg.exact, cfg.near, cfg.num_perm, cfg.shingle_size, seed, bands, rows)
        args = [(ref, i, spill, with_quality, *sketch) for i, ref in enumerate(shards.shards)]
        scans = shards.map(_sketch, args)
        quality = np.concatenate([s[0] for s in scans]) if with_quality else None
        exact_key = np.concatenate([s[1] for s in scans]) if cfg.exact else None
        del scans
        seconds["sketch"] = time.perf_counter() - t0
        # 2) rank, exact duplicates
        t0 = time.perf_counter()
        ids = pa.chunked_array(
            [shards.read(i, ["id"]).column("id").combine_chunks() for i in range(len(shards))]
        )
        rank = priority_rank(ids, quality)
        rank[earlier] -= n  # an earlier run's row outranks every new one: it is the survivor
        del ids, quality
        reason = np.zeros(n, dtype=np.int8)
        if exact_key is not None:
            dropped, _leader = exact_drops(_group_codes(exact_key), rank)
            reason[dropped] = EXACT
            del exact_key, dropped, _leader
        seconds["exact"] = time.perf_counter() - t0
        if cfg.near:
            # 3) candidate pairs, one task per band
            t0 = time.perf_counter()
            alive = np.flatnonzero(reason == KEEP)
            sub_rank = rank[alive]
            save_array(spill, "alive.npy", alive)
            save_array(spill, "rank.npy", sub_rank)
            found = shards.map(_band_pairs, [(spill, b, len(shards)) for b in range(bands)])
            cand = unique_pairs(found, len(alive))
            del found
            seconds["lsh"] = time.perf_counter() - t0
            # 4) verify the candidates
            t0 = time.perf_counter()
            edges, verified = self._verify(shards, alive, cand, seed)
            # 5) survivors per component (earlier runs' rows all stand: none drops another)
            if earlier.any() and len(edges):
                edges = edges[~(earlier[alive[edges[:, 0]]] & earlier[alive[edges[:, 1]]])]
            local_dup = greedy_survivors(len(alive), edges, sub_rank)
            reason[alive[local_dup >= 0]] = NEAR
            seconds["verify"] = time.perf_counter() - t0
            info.update(
                bands=bands,
                rows_per_band=rows,
                candidates=len(cand),
                verified=verified,
                near_pairs=len(edges),
            )
        new = reason[~earlier]
        counts = {
            "rows": len(new),
            "kept": int(np.sum(new == KEEP)),
            "exact_duplicates": int(np.sum(new == EXACT)),
            "near_duplicates": int(np.sum(new == NEAR)),
            "semantic_duplicates": 0,
        }
        if earlier.any():
            counts["earlier_rows"] = int(earlier.sum())
        return reason == KEEP, counts, info, seconds

    def _verify(
        self, shards: ShardSet, alive: np.ndarray, cand: np.ndarray, seed: int
    ) -> tuple[np.ndarray, int]:
        """Near-duplicate edges among the candidate pairs (alive-local indices), and how
        many pairs were checked exactly."""
        cfg = self.config
        if len(cand) == 0:
            return np.zeros((0, 2), dtype=np.int64), 0
        local = np.unique(cand.ravel())  # sorted alive-local rows
        rows = alive[local]  # sorted global rows
        cut = np.searchsorted(rows, shards.offsets)
        args = [
            (
                shards.shards[i],
                rows[cut[i] : cut[i + 1]] - shards.offsets[i],
                cfg.num_perm,
                cfg.shingle_size,
                seed,
            )
            for i in range(len(shards))
            if cut[i + 1] > cut[i]
        ]
        parts = shards.map(_sketch_rows, args)
        sig = np.concatenate([p[0] for p in parts], axis=1)
        values = np.concatenate([p[1] for p in parts])
        sizes = np.concatenate([np.diff(p[2]) for p in parts])
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        sets = ShingleSets(values=values, offsets=offsets)
        del parts
        pos = np.searchsorted(local, cand)  # candidate pairs as positions in `sig` / `sets`
        floor = cfg.threshold - _MARGIN
        plausible = signature_agreement(sig, pos, floor=floor) >= floor
        sim = jaccard_pairs(sets, pos[plausible])
        edges = cand[plausible][sim >= cfg.threshold - 1e-12]
        return edges, int(plausible.sum())

    def _in_memory(self, shards: ShardSet, seed: int) -> tuple[np.ndarray, dict, dict, dict]:
        cfg = self.config
        cols = ["id", "goal", "messages"]
        parts = []
        for i in range(len(shards)):
            names = shard_columns(shards.shards[i])
            t = shards.read(i, cols + (["quality_score"] if "quality_score" in names else []))
            parts.append(t)
        table = pa.concat_tables(parts, promote_options="default")
        quality = None
        if "quality_score" in table.schema.names:
            q = pc.fill_null(table.column("quality_score").cast(pa.float64()), np.nan)
            quality = q.to_numpy(zero_copy_only=False)
        result = dedup(
            table.column("id"),
            table.column("goal"),
            table.column("messages"),
            quality,
            exact=cfg.exact,
            near=cfg.near,
            threshold=cfg.threshold,
            num_perm=cfg.num_perm,
            shingle_size=cfg.shingle_size,
            seed=seed,
            semantic=cfg.semantic,
            semantic_threshold=cfg.semantic_threshold,
        )
        return result.keep, result.counts, result.info, result.seconds


def _group_codes(keys: np.ndarray) -> np.ndarray:
    """A group code per row from its (hi, lo) 64-bit key pair (equal pairs, equal codes)."""
    order = np.lexsort((keys[:, 1], keys[:, 0]))
    sk = keys[order]
    new = np.ones(len(keys), dtype=np.int64)
    if len(keys) > 1:
        new[1:] = np.any(sk[1:] != sk[:-1], axis=1)
    new[0] = 0
    group = np.empty(len(keys), dtype=np.int64)
    group[order] = np.cumsum(new)
    return group


def _features(t: pa.Table) -> tuple[pa.Array, pa.Array, np.ndarray]:
    goal_tokens = tokens(t.column("goal"))
    names, _row, name_offsets = action_skeletons(t.column("messages"))
    return goal_tokens, names, name_offsets


def _sketch(
    ref: ShardRef,
    index: int,
    spill: str,
    with_quality: bool,
    exact: bool,
    near: bool,
    num_perm: int,
    shingle_size: int,
    seed: int,
    bands: int,
    rows: int,
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Step 1 on one shard: (quality per row, exact key per row ``(n, 2)``); the LSH band
    keys ``(bands, n)`` go to ``spill/bands-<index>.npy``."""
    has_quality = "quality_score" in shard_columns(ref)
    t = read_shard(ref, ["goal", "messages"] + (["quality_score"] if has_quality else []))
    quality = None
    if with_quality:
        if has_quality:
            q = pc.fill_null(t.column("quality_score").cast(pa.float64()), np.nan)
            quality = q.to_numpy()
        else:
            quality = np.full(t.num_rows, np.nan)
    if t.num_rows == 0:
        if near:
            save_array(spill, f"bands-{index:05d}.npy", np.zeros((bands, 0), np.uint64))
        return quality, np.zeros((0, 2), np.uint64) if exact else None
    goal_tokens, names, name_offsets = _features(t)
    key = None
    if exact:
        strings = exact_keys(goal_tokens, names, name_offsets)
        key = np.stack([hash_strings(strings, seed=11), hash_strings(strings, seed=12)], axis=1)
    if near:
        sets = shingles(goal_tokens, (names, name_offsets), k=shingle_size)
        sig = minhash_signatures(sets, num_perm, seed=seed)
        save_array(spill, f"bands-{index:05d}.npy", band_keys(sig, bands, rows))
    return quality, key


def _band_pairs(spill: str, band: int, shard_count: int) -> np.ndarray:
    """Step 3 for one band: candidate pairs (alive-local indices) of the rows still kept."""
    key = np.concatenate(
        [load_array(spill, f"bands-{i:05d}.npy", mmap=True)[band] for i in range(shard_count)]
    )
    alive = load_array(spill, "alive.npy")
    rank = load_array(spill, "rank.npy")
    return bucket_pairs(key[alive], rank, max_bucket=_MAX_BUCKET)


def _sketch_rows(
    ref: ShardRef, local_rows: np.ndarray, num_perm: int, shingle_size: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 4 on one shard: the signatures ``(num_perm, m)`` and shingle sets (values,
    offsets) of ``local_rows`` only."""
    t = read_shard(ref, ["goal", "messages"]).take(pa.array(local_rows))
    goal_tokens, names, name_offsets = _features(t)
    sets = shingles(goal_tokens, (names, name_offsets), k=shingle_size)
    return minhash_signatures(sets, num_perm, seed=seed), sets.values, sets.offsets

"""``balance``: stratified sampling to the target difficulty mix (30/50/20 by default), spread
across domains and clusters (:mod:`trajsynth.quality.balance` holds the method).

It streams, in two passes over the input shards, so memory does not grow with the rows'
size (only ~20 bytes per row are held):

1) count strata: per shard (in the executor's workers), read only ``id``, ``difficulty``,
   ``domain`` and ``cluster_id`` and turn them into a bucket code, domain and cluster codes
   and a seeded hash of the id; the driver joins the shards' codes in input order;
2) plan the per-bucket sizes for ``size`` rows (default: all), recording shortfalls, and
   either shrink to keep the mix (default) or keep all of a short bucket (``keep_all``);
3) share each bucket's size across (domain, cluster) strata by water filling and pick rows by
   the hash of their id; then read the shards again and yield the chosen rows in input
   order; the plan, the mix before and after and the shortfalls go to the metrics (and so to
   the manifest and the report). The choice is the same as on one table in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, field_validator

from ...core.errors import ConfigError
from ...quality.balance import BUCKETS, balance_codes, bucket_codes, id_hashes, stratum_values
from ..context import Context
from ..kinds import Output, ShardRef, ShardSet, StageConfig, StreamingGlobalStage, read_shard
from ..registry import register

__all__ = ["Balance", "BalanceConfig", "parse_mix"]


def parse_mix(value: Any) -> tuple[float, float, float]:
    """``"0.3,0.5,0.2"``, ``[30, 50, 20]`` or a tuple → three shares that sum to 1."""
    if isinstance(value, str):
        parts: list[Any] = [p for p in value.replace(" ", "").split(",") if p]
    else:
        parts = list(value)
    try:
        shares = [float(p) for p in parts]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"mix {value!r}: three numbers (easy, medium, hard)") from exc
    if len(shares) != 3 or any(s < 0 for s in shares) or sum(shares) <= 0:
        raise ValueError(f"mix {value!r}: three non-negative numbers (easy, medium, hard)")
    total = sum(shares)
    return (shares[0] / total, shares[1] / total, shares[2] / total)


class BalanceConfig(StageConfig):
    mix: tuple[float, float, float] = Field(
        (0.3, 0.5, 0.2),
        description="Target shares of easy, medium, hard (normalised to sum to 1).",
    )
    size: int | None = Field(None, ge=0, description="Rows wanted (default: every labelled row).")
    keep_all: bool = Field(
        False,
        description="When a bucket is short: keep every row of it and the others' targets "
        "(mix off) instead of downsampling all buckets to keep the mix.",
    )

    @field_validator("mix", mode="before")
    @classmethod
    def _mix(cls, value: Any) -> tuple[float, float, float]:
        return parse_mix(value)


_COLUMNS = ("id", "difficulty", "domain", "cluster_id")


@register
class Balance(StreamingGlobalStage[BalanceConfig]):
    """Sample to the easy/medium/hard mix, spread across domains and clusters."""

    name = "balance"
    reads = ("difficulty",)

    def process_shards(self, shards: ShardSet, ctx: Context) -> Iterator[Output]:
        cfg = self.config
        if shards.total_rows == 0:
            return
        # 1) count strata: codes of every row, shard by shard
        scans = shards.map(_scan, [(ref, ctx.seed) for ref in shards.shards])
        if sum(s[0] for s in scans) == 0:
            raise ConfigError(
                "balance: no row has a difficulty label",
                hint="run the `difficulty` stage first",
            )
        bucket = np.concatenate([s[1] for s in scans]).astype(np.int64)
        dom = _join_codes([(s[2], s[3]) for s in scans])
        clu = _join_codes([(s[4], s[5]) for s in scans])
        h = np.concatenate([s[6] for s in scans])
        del scans
        # 2)-3) plan, spread, pick
        result = balance_codes(
            bucket, dom, clu, h, mix=cfg.mix, size=cfg.size, keep_all=cfg.keep_all, seed=ctx.seed
        )
        del bucket, dom, clu, h
        kept = 0
        for i, (start, end) in enumerate(zip(shards.offsets, shards.offsets[1:], strict=False)):
            if end == start:
                continue
            mask = result.keep[start:end]
            if mask.any():
                part = shards.read(i).filter(pa.array(mask))
                kept += part.num_rows
                yield part
            ctx.advance(end - start)
        plan = result.plan
        ctx.metrics.set("plan", plan.as_dict())
        ctx.metrics.inc("rows_in", shards.total_rows)
        ctx.metrics.inc("kept", kept)
        ctx.metrics.inc("unlabelled", result.unlabelled)
        for b in BUCKETS:
            ctx.metrics.inc(f"before.{b}", plan.available[b])
            ctx.metrics.inc(f"after.{b}", plan.final[b])
        for b, n in plan.shortfalls.items():
            ctx.metrics.inc(f"short.{b}", n)
        if plan.shortfalls:
            short = ", ".join(f"{b} short by {n:,}" for b, n in plan.shortfalls.items())
            ctx.log.warning(
                "balance: %s; %s", short, "kept all" if cfg.keep_all else "downsampled to keep mix"
            )


def _scan(ref: ShardRef, seed: int) -> tuple[Any, ...]:
    """Pass 1 on one shard: (labelled rows, bucket codes, domain codes and values, cluster
    codes and values, id hashes); codes number the shard's values in order of appearance."""
    t = read_shard(ref, ["id", "difficulty", "domain", "cluster_id"])
    out: list[Any] = [t.num_rows - t.column("difficulty").null_count]
    out.append(bucket_codes(t.column("difficulty")).astype(np.int8))
    for name in ("domain", "cluster_id"):
        enc = pc.dictionary_encode(stratum_values(t.column(name)))
        out.append(enc.indices.to_numpy(zero_copy_only=False).astype(np.int32))
        out.append(enc.dictionary.to_pylist())
    out.append(id_hashes(t.column("id"), seed))
    return tuple(out)


def _join_codes(parts: list[tuple[np.ndarray, list[str]]]) -> np.ndarray:
    """Per-shard codes renumbered by first appearance over all shards in order (what one
    dictionary encoding of the whole column gives)."""
    seen: dict[str, int] = {}
    out = []
    for codes, values in parts:
        remap = np.array([seen.setdefault(v, len(seen)) for v in values], dtype=np.int64)
        out.append(remap[codes] if len(codes) else np.zeros(0, dtype=np.int64))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

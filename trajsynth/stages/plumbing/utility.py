"""Utility stages every pipeline needs: ``sample``, ``concat`` and ``split``.

All three are deterministic and independent of how the input is sharded: ``sample`` ranks
rows by a seeded hash of their id, ``split`` assigns a task by a hash of its ``task_id``, and
``concat`` keeps the first row of each id in input order.

``sample`` and ``concat`` stream in bounded memory: a first pass over the shards (in the
executor's workers) reads only the key column and returns one number per row (the rank of
the key; a 128-bit hash of the id), the driver decides which rows stay, and a second pass
reads the shards again and yields those rows in input order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, model_validator

from ...quality.columns import hash_strings
from ..context import Context
from ..kinds import (
    Emit,
    MapStage,
    Output,
    ShardRef,
    ShardSet,
    StageConfig,
    StreamingGlobalStage,
    read_shard,
)
from ..registry import register

__all__ = ["Concat", "Sample", "Split", "hash_unit"]


def hash_unit(values: list[str], salt: str) -> np.ndarray:
    """Each value's position in [0, 1) from a keyed BLAKE2b hash (stable across processes)."""
    key = salt.encode()[:64]
    out = np.empty(len(values), dtype=np.float64)
    for i, v in enumerate(values):
        digest = hashlib.blake2b(str(v).encode(), digest_size=8, key=key).digest()
        out[i] = int.from_bytes(digest, "big") / 2.0**64
    return out


class SampleConfig(StageConfig):
    n: int | None = Field(
        default=None, ge=0, description="Number of rows (by=row) or tasks (by=task) to keep."
    )
    fraction: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Share of rows to keep (instead of n)."
    )
    by: Literal["row", "task"] = Field(
        default="row",
        description="row: sample rows; task: sample tasks and keep every row of a chosen task.",
    )

    @model_validator(mode="after")
    def _one_of(self) -> SampleConfig:
        if (self.n is None) == (self.fraction is None):
            raise ValueError("give exactly one of n or fraction")
        return self


@register
class Sample(StreamingGlobalStage[SampleConfig]):
    """Keep N rows (or a fraction), chosen uniformly at random by a seeded hash of their id."""

    name = "sample"

    def process_shards(self, shards: ShardSet, ctx: Context) -> Iterator[Output]:
        cfg = self.config
        salt = f"{ctx.seed}:{ctx.stage_id}"
        key_column = "id" if cfg.by == "row" else "task_id"
        # 1) the rank of every row's key, shard by shard
        ranks = shards.map(_ranks, [(ref, key_column, salt) for ref in shards.shards])
        if cfg.fraction is not None:
            threshold, strict = float(cfg.fraction), True
        else:
            n = cfg.n or 0
            distinct = np.unique(np.concatenate(ranks)) if ranks else np.zeros(0)
            if n == 0:
                threshold = -np.inf
            elif len(distinct) >= n:
                threshold = float(distinct[n - 1])  # the n smallest distinct keys
            else:
                threshold = np.inf
            strict = False
        # 2) the chosen rows, in input order
        for i, rank in enumerate(ranks):
            mask = rank < threshold if strict else rank <= threshold
            if mask.any():
                yield shards.read(i).filter(pa.array(mask))
            ctx.advance(len(rank))


def _ranks(ref: ShardRef, key_column: str, salt: str) -> np.ndarray:
    """Pass 1 of ``sample`` on one shard: each row's key rank in [0, 1)."""
    return hash_unit(read_shard(ref, [key_column]).column(key_column).to_pylist(), salt)


class ConcatConfig(StageConfig):
    drop_repeated_ids: bool = Field(
        default=True, description="Keep only the first row of each id (a true union)."
    )


@register
class Concat(StreamingGlobalStage[ConcatConfig]):
    """Union of all inputs, in input order; a row whose id was already seen is dropped."""

    name = "concat"
    inputs_range = (1, None)

    def process_shards(self, shards: ShardSet, ctx: Context) -> Iterator[Output]:
        cfg = self.config
        if not cfg.drop_repeated_ids:
            for i in range(len(shards)):
                yield shards.read(i)
                ctx.advance(shards.rows[i])
            return
        # 1) a 128-bit hash of every id; the first row of each hash stays
        parts = shards.map(_id_hashes, [(ref,) for ref in shards.shards])
        keys = np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.uint64)
        del parts
        keep = np.zeros(len(keys), dtype=bool)
        if len(keys):
            _, first = np.unique(keys, axis=0, return_index=True)
            keep[first] = True
        del keys
        dropped = int(len(keep) - keep.sum())
        if dropped:
            ctx.metrics.inc("repeated_ids_dropped", dropped)
        # 2) those rows, in input order
        for i, (start, end) in enumerate(zip(shards.offsets, shards.offsets[1:], strict=False)):
            mask = keep[start:end]
            if mask.any():
                yield shards.read(i).filter(pa.array(mask))
            ctx.advance(end - start)


def _id_hashes(ref: ShardRef) -> np.ndarray:
    """Pass 1 of ``concat`` on one shard: two independent 64-bit hashes of each id."""
    ids = read_shard(ref, ["id"]).column("id")
    return np.stack([hash_strings(ids, seed=1), hash_strings(ids, seed=2)], axis=1)


class SplitConfig(StageConfig):
    eval_fraction: float = Field(
        default=0.1, ge=0.0, le=1.0, description="Share of tasks sent to the eval output."
    )
    salt: str = Field(default="", description="Change to draw a different split.")


@register
class Split(MapStage[SplitConfig]):
    """Train/eval split by a stable hash of task_id, so a task never lands in both."""

    name = "split"
    outputs = ("train", "eval")

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        for batch in batches:
            u = hash_unit(batch.column("task_id").to_pylist(), f"split:{cfg.salt}")
            is_eval = pa.array(u < cfg.eval_fraction)
            yield batch.filter(pc.invert(is_eval))
            yield Emit("eval", batch.filter(is_eval))
            ctx.metrics.inc("eval_rows", int(np.sum(u < cfg.eval_fraction)))

"""Utility stages every pipeline needs: ``sample``, ``concat`` and ``split``.

All three are deterministic and independent of how the input is sharded: ``sample`` ranks
rows by a seeded hash of their id, ``split`` assigns a task by a hash of its ``task_id``, and
``concat`` keeps the first row of each id in input order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, model_validator

from .context import Context
from .kinds import Emit, GlobalStage, MapStage, Output, StageConfig
from .registry import register

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
class Sample(GlobalStage[SampleConfig]):
    """Keep N rows (or a fraction), chosen uniformly at random by a seeded hash of their id."""

    name = "sample"

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        salt = f"{ctx.seed}:{ctx.stage_id}"
        key_column = "id" if cfg.by == "row" else "task_id"
        if cfg.fraction is not None:
            for batch in batches:
                rank = hash_unit(batch.column(key_column).to_pylist(), salt)
                yield batch.filter(pa.array(rank < cfg.fraction))
            return
        n = cfg.n or 0
        kept: list[pa.Table] = []
        ranks: list[np.ndarray] = []
        seqs: list[np.ndarray] = []
        seen = 0
        threshold = np.inf
        for batch in batches:
            rank = hash_unit(batch.column(key_column).to_pylist(), salt)
            seq = np.arange(seen, seen + batch.num_rows)
            seen += batch.num_rows
            mask = rank <= threshold
            if mask.any():
                kept.append(pa.Table.from_batches([batch]).filter(pa.array(mask)))
                ranks.append(rank[mask])
                seqs.append(seq[mask])
            total = sum(len(r) for r in ranks)
            if total > 2 * n + 4096:  # compact: keep the n best so far
                kept, ranks, seqs, threshold = _keep_best(kept, ranks, seqs, n)
        if not kept:
            return
        kept, ranks, seqs, _ = _keep_best(kept, ranks, seqs, n)
        table, order = kept[0], np.argsort(seqs[0], kind="stable")
        yield table.take(pa.array(order))  # the chosen rows, in input order


def _keep_best(kept: list[pa.Table], ranks: list[np.ndarray], seqs: list[np.ndarray], n: int):
    """Keep the rows whose key rank is among the ``n`` smallest distinct ranks."""
    table = pa.concat_tables(kept)
    rank = np.concatenate(ranks)
    seq = np.concatenate(seqs)
    distinct = np.unique(rank)
    if n == 0:
        threshold = -np.inf
    elif len(distinct) >= n:
        threshold = distinct[n - 1]
    else:  # fewer than n keys seen so far: every later row may still be chosen
        threshold = np.inf
    keep = np.flatnonzero(rank <= threshold)
    return [table.take(pa.array(keep))], [rank[keep]], [seq[keep]], threshold


class ConcatConfig(StageConfig):
    drop_repeated_ids: bool = Field(
        default=True, description="Keep only the first row of each id (a true union)."
    )


@register
class Concat(GlobalStage[ConcatConfig]):
    """Union of all inputs, in input order; a row whose id was already seen is dropped."""

    name = "concat"
    inputs_range = (1, None)

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        seen: set[str] = set()
        for batch in batches:
            if not cfg.drop_repeated_ids:
                yield batch
                continue
            ids = batch.column("id").to_pylist()
            mask = []
            for i in ids:
                mask.append(i not in seen)
                seen.add(i)
            dropped = len(ids) - sum(mask)
            if dropped:
                ctx.metrics.inc("repeated_ids_dropped", dropped)
            yield batch.filter(pa.array(mask, type=pa.bool_()))


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

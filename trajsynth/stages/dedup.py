"""``dedup``: exact, MinHash-LSH near and (optionally) semantic duplicates removed, the best
copy kept (:mod:`trajsynth.quality.dedup` holds the method and its steps).

1) gather every row (dedup compares all pairs, so it is a global stage);
2) run :func:`~trajsynth.quality.dedup.dedup` on the ``id``, ``goal``, ``messages`` and
   ``quality_score`` columns: exact groups, then near duplicates (Jaccard ≥ ``threshold`` on
   goal and skeleton shingles), then, with ``semantic: true``, embedding neighbours;
3) yield the survivors in input order; count each kind of duplicate in the metrics.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from ..quality.dedup import dedup
from .common.columns import gather_table
from .context import Context
from .kinds import GlobalStage, Output, StageConfig
from .registry import register

__all__ = ["Dedup", "DedupConfig"]


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


@register
class Dedup(GlobalStage[DedupConfig]):
    """Remove exact, near (MinHash LSH, Jaccard ≥ 0.85) and semantic duplicates."""

    name = "dedup"

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        # 1) every row
        table = gather_table(batches)
        if table is None:
            return
        quality = None
        if "quality_score" in table.schema.names:
            q = pc.fill_null(table.column("quality_score").cast(pa.float64()), np.nan)
            quality = q.to_numpy(zero_copy_only=False)
        # 2) the three passes
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
            seed=1 + ctx.seed,
            semantic=cfg.semantic,
            semantic_threshold=cfg.semantic_threshold,
        )
        # 3) survivors, in input order
        kept = table.filter(pa.array(result.keep))
        for start in range(0, kept.num_rows, cfg.chunk_rows):
            yield kept.slice(start, cfg.chunk_rows)
        for name, value in result.counts.items():
            ctx.metrics.inc(name, value)
        ctx.metrics.set("lsh", result.info)
        ctx.metrics.set("seconds", {k: round(v, 3) for k, v in result.seconds.items()})

"""``diversity``: embeddings → k-means → ``cluster_id`` for every row, and a cluster summary
(:mod:`trajsynth.quality.diversity` holds the steps).

1) gather every row (k-means needs all of them);
2) embed ``goal | skeleton`` with all-MiniLM-L6-v2 (offline) or TF-IDF + SVD;
3) cluster with k-means (``clusters`` or ``round(sqrt(n/2))``), seeded by the run seed;
4) write ``cluster_id``; the summary (cluster count, size entropy, the largest clusters'
   representative goals) goes to the metrics, and so to the manifest and the report.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import pyarrow as pa
from pydantic import Field

from ...quality.columns import skeleton_strings
from ...quality.diversity import auto_k, cluster_summary, embed_texts, kmeans, trajectory_texts
from ..common.columns import gather_table, replace_columns
from ..context import Context
from ..kinds import GlobalStage, Output, StageConfig
from ..registry import register

__all__ = ["Diversity", "DiversityConfig"]


class DiversityConfig(StageConfig):
    clusters: int | None = Field(
        None, ge=1, description="Number of clusters (default: round(sqrt(rows / 2)), 2..100)."
    )
    embedder: Literal["minilm", "tfidf"] = Field(
        "minilm", description="minilm: all-MiniLM-L6-v2 (embed extra); tfidf: TF-IDF + SVD."
    )
    top: int = Field(5, ge=0, description="Largest clusters listed with a representative goal.")


@register
class Diversity(GlobalStage[DiversityConfig]):
    """Cluster trajectories (embeddings + k-means) into cluster_id; report diversity."""

    name = "diversity"
    writes = ("cluster_id",)

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        # 1) every row
        table = gather_table(batches)
        if table is None:
            return
        cfg = self.config
        goals = table.column("goal").to_pylist()
        # 2) embed
        texts = trajectory_texts(goals, skeleton_strings(table.column("messages")).to_pylist())
        vectors = embed_texts(texts, cfg.embedder, seed=ctx.seed)
        # 3) cluster
        k = cfg.clusters or auto_k(len(texts))
        labels, centroids = kmeans(vectors, k, seed=ctx.seed)
        # 4) write and summarise
        summary = cluster_summary(labels, goals, vectors, centroids, top=cfg.top)
        ctx.metrics.set("clusters", summary)
        ctx.metrics.inc("rows", table.num_rows)
        out = replace_columns(table, {"cluster_id": pa.array(labels, pa.int64())})
        yield from out.to_batches(max_chunksize=50_000)

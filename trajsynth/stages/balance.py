"""``balance``: stratified sampling to the target difficulty mix (30/50/20 by default), spread
across domains and clusters (:mod:`trajsynth.quality.balance` holds the method).

1) gather every row's ``id``, ``difficulty``, ``domain`` and ``cluster_id``;
2) plan the per-bucket sizes for ``size`` rows (default: all), recording shortfalls, and
   either shrink to keep the mix (default) or keep all of a short bucket (``keep_all``);
3) share each bucket's size across (domain, cluster) strata by water filling, pick rows by a
   seeded hash of their id, and yield them in input order; the plan, the mix before and after
   and the shortfalls go to the metrics (and so to the manifest and the report).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pydantic import Field, field_validator

from ..core.errors import ConfigError
from ..quality.balance import BUCKETS, balance
from .common.columns import gather_table
from .context import Context
from .kinds import GlobalStage, Output, StageConfig
from .registry import register

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
class Balance(GlobalStage[BalanceConfig]):
    """Sample to the easy/medium/hard mix, spread across domains and clusters."""

    name = "balance"
    reads = ("difficulty",)

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        # 1) every row (kept whole: the survivors are yielded at the end)
        table = gather_table(batches)
        if table is None:
            return
        if table.column("difficulty").null_count == table.num_rows:
            raise ConfigError(
                "balance: no row has a difficulty label",
                hint="run the `difficulty` stage first",
            )
        # 2)-3) plan, spread, pick
        result = balance(
            table.column("id"),
            table.column("difficulty"),
            domain=table.column("domain"),
            cluster=table.column("cluster_id"),
            mix=cfg.mix,
            size=cfg.size,
            keep_all=cfg.keep_all,
            seed=ctx.seed,
        )
        kept = table.filter(pa.array(result.keep))
        yield from kept.to_batches(max_chunksize=50_000)
        plan = result.plan
        ctx.metrics.set("plan", plan.as_dict())
        ctx.metrics.inc("rows_in", table.num_rows)
        ctx.metrics.inc("kept", kept.num_rows)
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

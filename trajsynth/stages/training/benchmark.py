"""Public benchmarks inside a pipeline: keep their test items out of the training data, and
score the models a pipeline trains on them.

``decontaminate`` (a map stage): every row that offers or calls a function named like one of
BFCL's single-turn test functions, or asks one of its single-turn questions (compared in
lower case, words only), goes to the ``contaminated`` side output; the rest flow on unchanged.
BFCL's single-turn questions, functions and answers are the benchmark: they must never be
trained on (its multi-turn API classes are other data, and fair game). ``EnvConfig.
decontaminate: bfcl`` already leaves such functions out of every domain, so tasks never offer
them; this stage is the check on whatever rows reach training, from any source.

``eval_bfcl`` (a global stage, no rows out):

1) the contamination of its input rows (the training data: ``from:`` the stage the trainer
   read), recorded as ``contamination`` (0 is the only acceptable figure);
2) the base model (``base``, e.g. ``smollm2-135m``; none: skipped) and every checkpoint in
   ``needs:``, each scored on BFCL (:mod:`trajsynth.train.bfcl`: the categories asked, ``limit``
   entries of each);
3) ``bfcl.json`` in the stage's artifacts (and the run folder): ``{"base": {category:
   accuracy, "mean"}, "trained": {...}, "<stage id>": {...}, "intervals": {label: {category:
   [low, high]}}, "contamination": {...}, "limit": N}``, ``trained`` being the last needed
   checkpoint, ``intervals`` the 95% bootstrap interval of each figure; the figures also go
   to the stage's metrics and the log as a table.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pydantic import Field

from ...core.batch import to_records
from ...core.errors import ConfigError
from ...core.location import put_file
from ...train.bfcl import (
    DEFAULT_CATEGORIES,
    BfclConfig,
    SingleTurnIndex,
    contamination,
    evaluate_bfcl,
    row_contamination,
    single_turn_index,
)
from ...train.modeling import trained_precision
from ..context import Context
from ..kinds import Emit, GlobalStage, MapStage, Output, StageConfig
from ..registry import register

__all__ = ["Decontaminate", "DecontaminateConfig", "EvalBfcl", "EvalBfclConfig"]


class DecontaminateConfig(StageConfig):
    benchmark: str = Field("bfcl", description="The benchmark whose test items are kept out.")
    data_dir: str | None = Field(
        None, description="Its data folder (default: the bfcl-eval wheel's)."
    )


_INDEX: dict[str | None, SingleTurnIndex] = {}


def _index(benchmark: str, data_dir: str | None) -> SingleTurnIndex:
    if benchmark != "bfcl":
        raise ConfigError(f"unknown benchmark {benchmark!r}", hint="available: bfcl")
    if data_dir not in _INDEX:
        _INDEX[data_dir] = single_turn_index(data_dir)
    return _INDEX[data_dir]


@register
class Decontaminate(MapStage[DecontaminateConfig]):
    """Rows that hold a benchmark's test functions or questions → the `contaminated` output."""

    name = "decontaminate"
    outputs = ("main", "contaminated")

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        index = _index(self.config.benchmark, self.config.data_dir)
        for batch in batches:
            keep, drop = [], []
            for row in to_records(batch):
                names, questions = row_contamination(row, index)
                if names or questions:
                    drop.append(row)
                    ctx.metrics.inc("contaminated")
                    for n in names:
                        ctx.metrics.inc(f"contaminated.name.{n}")
                    ctx.metrics.inc("contaminated.questions", len(questions))
                else:
                    keep.append(row)
            if keep:
                yield keep
            if drop:
                yield Emit("contaminated", drop)


class EvalBfclConfig(StageConfig):
    categories: list[str] = Field(
        default_factory=lambda: list(DEFAULT_CATEGORIES), description="BFCL categories."
    )
    limit: int | None = Field(
        None, ge=1, description="Entries per category, evenly spread (none: all)."
    )
    base: str | None = Field(
        None, description="Also score this model as it is (a name or folder), as `base`."
    )
    data_dir: str | None = Field(None, description="BFCL data (default: the bfcl-eval wheel's).")
    batch_size: int = Field(64, ge=1, description="Prompts a local model generates at once.")
    max_new_tokens: int = Field(256, ge=1, description="Tokens per answer.")
    device: str = Field("auto", description="auto, cpu, cuda, mps.")
    copy_to_run: bool = Field(True, description="Also write bfcl.json into the run folder.")


@register
class EvalBfcl(GlobalStage[EvalBfclConfig]):
    """BFCL accuracy of the base model and of the checkpoints in `needs:`; the contamination
    of the training rows it reads."""

    name = "eval_bfcl"
    makes_artifact = True

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        # 1) contamination of the training data
        rows = [r for b in batches for r in to_records(b)]
        found = contamination(rows, _index("bfcl", cfg.data_dir))
        if found["count"]:
            ctx.log.warning(
                "eval_bfcl: %d BFCL single-turn names/questions in %d training rows: %s",
                found["count"], found["rows"], ", ".join(found["names"][:10]),
            )  # fmt: skip
        # 2) the models
        models: dict[str, str] = {}
        if cfg.base:
            models["base"] = cfg.base
        needed = ctx.needed_artifacts()
        for stage_id, folder in zip(ctx.spec.artifacts_in, needed, strict=True):
            models[stage_id] = str(folder)
        if needed:
            models["trained"] = str(needed[-1])
        if not models:
            raise ConfigError(
                f"stage {ctx.stage_id!r}: nothing to score: give `base:` or `needs:` a "
                "training stage"
            )
        bench = BfclConfig(
            categories=cfg.categories,
            limit=cfg.limit,
            data_dir=cfg.data_dir,
            max_new_tokens=cfg.max_new_tokens,
        )
        out: dict[str, Any] = {"limit": cfg.limit, "contamination": found}
        scored: dict[str, dict[str, float]] = {}
        bounds: dict[str, dict[str, Any]] = {}
        # base and trained alike, in the precision the trained checkpoint trained in
        trained = trained_precision(models["trained"]) if "trained" in models else None
        for label, model in models.items():
            if model not in scored:
                client = self._client(model, cfg, trained)
                report = evaluate_bfcl(client, bench, model=model)
                scored[model] = report.accuracies()
                bounds[model] = report.intervals()
                ctx.metrics.set(f"seconds.{label}", report.seconds)
            out[label] = scored[model]
            out.setdefault("intervals", {})[label] = bounds[model]
            for cat, acc in scored[model].items():
                ctx.metrics.set(f"{label}.{cat}", acc)
        ctx.metrics.set("contamination", found["count"])
        # 3) the files
        text = json.dumps(out, indent=2)
        (ctx.artifacts_dir / "bfcl.json").write_text(text)
        if cfg.copy_to_run:
            put_file(ctx.artifacts_dir / "bfcl.json", ctx.run_dir / "bfcl.json")
        ctx.log.info("eval_bfcl: %s", text)
        yield from ()

    @staticmethod
    def _client(model: str, cfg: EvalBfclConfig, trained: str | None) -> Any:
        """A local backend on ``model`` (a name is prepared once, like ``--model``)."""
        from ...llm.base import RoleConfig
        from ...llm.client import LLMClient
        from ...llm.local import LocalBackend
        from ...llm.models import resolve_model
        from ...train.modeling import eval_autocast, resolve_device

        device = resolve_device(cfg.device)
        local = {
            "device": device,
            "batch_size": cfg.batch_size,
            "autocast": eval_autocast(device, trained),
        }
        role = RoleConfig(backend="local", model=resolve_model(model), local=local)
        return LLMClient("student", role, LocalBackend(role), None)

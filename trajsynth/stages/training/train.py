"""``train_sft`` and ``train_grpo``: the trainer (:mod:`trajsynth.train`) as pipeline stages, so a
loop can train, probe and train again (LoopTool: π_{j+1} = train(π_j, D_j), warm-started from the
previous round's checkpoint; Zhang et al. 2025, "LoopTool: Closing the Data–Training Loop for Robust
LLM Tool Calls", arXiv:2511.09148).

Both are thin global stages over the trainer's public functions:

1) read every input row (trajectories for SFT; task rows with ground truth for GRPO);
2) the starting point: the checkpoint of the last stage in ``needs:`` (a warm start), else
   ``sft.model`` (``tiny``: a fresh student built from the data); a warm-started run takes
   ``warm_lr``, ``warm_epochs`` and ``warm_step_budget`` where given (a loop's first round
   from the base model, later rounds from the last checkpoint);
3) train into the stage's artifacts folder (a transformers model folder that ``gcp``,
   ``trajsynth eval --model`` and the next round's warm start read);
4) report the run's figures (steps, losses or rewards, seconds) in the metrics.

They yield no rows: the checkpoint is the artifact, fingerprinted by the runner, so what
``needs:`` it reruns when it changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pydantic import Field, field_validator

from ...core.batch import to_records
from ...core.errors import ConfigError, DataError
from ...train.data import left_out_note
from ...train.grpo import GRPOConfig, train_grpo
from ...train.sft import SFTConfig, train_sft, unseen_note
from ..context import Context
from ..kinds import GlobalStage, Output, StageConfig
from ..registry import register

__all__ = ["TrainGRPO", "TrainGRPOConfig", "TrainSFT", "TrainSFTConfig"]


class TrainSFTConfig(StageConfig):
    sft: dict[str, Any] = Field(
        default_factory=dict,
        description="trajsynth.train.sft.SFTConfig fields (model, tiny, epochs, lr, ...).",
    )
    warm_lr: float | None = Field(
        None, gt=0, description="Peak lr of a warm-started run (default: the cold-start one)."
    )
    warm_epochs: float | None = Field(
        None, gt=0, description="Epochs of a warm-started run (default: sft.epochs)."
    )
    warm_step_budget: int | None = Field(
        None,
        ge=1,
        description="Step budget of a warm-started run (default: sft.step_budget): a loop's "
        "first round can train longer from the base model than later rounds from a checkpoint.",
    )

    @field_validator("sft")
    @classmethod
    def _sft_settings(cls, value: dict[str, Any]) -> dict[str, Any]:
        # checked when the pipeline is validated, not when the stage starts hours later
        SFTConfig.model_validate(value)
        return value


@register
class TrainSFT(GlobalStage[TrainSFTConfig]):
    """SFT of the student (assistant tokens only); warm-starts from a needed checkpoint."""

    name = "train_sft"
    makes_artifact = True
    outputs = ("main",)

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        # 1) the rows
        rows = [r for b in batches for r in to_records(b) if r.messages]
        if not rows:
            raise DataError(f"stage {ctx.stage_id!r}: no trajectories to train on")
        # 2) the starting point
        sft = SFTConfig.model_validate({"seed": ctx.seed, **cfg.sft})
        needed = ctx.needed_artifacts()
        if needed:
            cold_lr = sft.peak_lr()
            update: dict[str, Any] = {"model": str(needed[-1]), "lr": cfg.warm_lr or cold_lr}
            if cfg.warm_epochs is not None:
                update["epochs"] = cfg.warm_epochs
            if cfg.warm_step_budget is not None:
                update["step_budget"] = cfg.warm_step_budget
            sft = sft.model_copy(update=update)
        weighted = sum(1 for r in rows if (r.extra or {}).get("weight", 1) != 1)
        if weighted and not sft.weights:
            ctx.log.warning(
                "train_sft: %d of %d rows carry a sample weight (extra.weight) that this run "
                "ignores; set sft.weights: true to train with it",
                weighted, len(rows),
            )  # fmt: skip
        # 3) train into the artifacts folder
        result = train_sft(rows, ctx.artifacts_dir, sft)
        # 4) figures
        ctx.metrics.set("rows", len(rows))
        ctx.metrics.set("warm_start", bool(needed))
        for key in ("steps", "seconds", "first_loss", "final_loss", "tokens"):
            ctx.metrics.set(key, getattr(result, key))
        ctx.metrics.set("rows_cut_off", result.data.get("cut_off", 0))
        ctx.metrics.set("rows_truncated", result.data.get("truncated", 0))
        ctx.metrics.set("longest_row", result.data.get("longest", 0))
        ctx.metrics.set("max_len", sft.max_len)
        for key in ("planned_steps", "epochs_done", "examples_unseen"):
            ctx.metrics.set(key, getattr(result, key))
        ctx.metrics.set("examples", result.data.get("examples", 0))
        ctx.metrics.set("max_minutes", sft.max_minutes or 0)
        yield from ()

    def findings(self, metrics: dict[str, Any]) -> list[str]:
        """The rows ``max_len`` left out or cut (:func:`~trajsynth.train.data.left_out_note`)
        and the examples a run stopped before one epoch never saw
        (:func:`~trajsynth.train.sft.unseen_note`)."""
        values = metrics.get("values", {})
        data = {
            "rows": values.get("rows", 0),
            "cut_off": values.get("rows_cut_off", 0),
            "truncated": values.get("rows_truncated", 0),
            "longest": values.get("longest_row", 0),
        }
        notes = [left_out_note(data, values.get("max_len", 0)), unseen_note(values)]
        return [n for n in notes if n]


class TrainGRPOConfig(StageConfig):
    grpo: dict[str, Any] = Field(
        default_factory=dict,
        description="trajsynth.train.grpo.GRPOConfig fields except model (iterations, ...).",
    )

    @field_validator("grpo")
    @classmethod
    def _grpo_settings(cls, value: dict[str, Any]) -> dict[str, Any]:
        # the model comes from `needs:` at run time; the rest is checked before anything runs
        GRPOConfig.model_validate({"model": "-", **value})
        return value


@register
class TrainGRPO(GlobalStage[TrainGRPOConfig]):
    """GRPO of the student on task rows from the needed checkpoint (LoopTool's trainer)."""

    name = "train_grpo"
    makes_artifact = True
    outputs = ("main",)

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        # 1) task rows
        tasks = [r for b in batches for r in to_records(b) if r.ground_truth is not None]
        if not tasks:
            raise DataError(f"stage {ctx.stage_id!r}: no task rows with ground truth")
        # 2) the starting checkpoint
        needed = ctx.needed_artifacts()
        if not needed and "model" not in cfg.grpo:
            raise ConfigError(
                f"stage {ctx.stage_id!r}: train_grpo starts from a checkpoint: give `needs:` "
                "a training stage or `with: {grpo: {model: DIR}}`"
            )
        grpo = GRPOConfig.model_validate(
            {"seed": ctx.seed, **cfg.grpo, **({"model": str(needed[-1])} if needed else {})}
        )
        # 3) train (rows of the run's own domains — search collections, imported toolsets —
        # are played in the run's environments)
        result = train_grpo(tasks, ctx.artifacts_dir, grpo, make_env=_run_envs(tasks, ctx))
        # 4) figures
        ctx.metrics.set("iterations", result.iterations)
        ctx.metrics.set("seconds", result.seconds)
        if result.history:
            ctx.metrics.set("last", result.history[-1])
        yield from ()


def _run_envs(tasks: list[Any], ctx: Context) -> Any:
    """``row → environment`` from the run's env settings when a task's domain is not a
    built-in one (None: the trainer's own maker of built-in domains)."""
    from ...core.task import GroundTruth
    from ...envs.domains import BUILTIN_DOMAINS

    if all(t.domain in BUILTIN_DOMAINS for t in tasks):
        return None

    def make(row: Any) -> Any:
        gt = row.ground_truth or GroundTruth()
        return ctx.envs.make(row.domain, seed=gt.env_seed, initial_state=gt.initial_state)

    return make

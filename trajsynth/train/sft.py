"""Supervised fine-tuning on trajectories, with the loss on assistant tokens only.

A compact loop of our own, not TRL's ``SFTTrainer``: ``bench/sft.py`` runs both on the same
tiny model, data and settings in one process and prints tokens/s for each (the issue's rule:
the benchmark decides). Ours computes the LM head only at the trained positions
(:func:`~trajsynth.train.modeling.selected_logprobs`) and packs whole conversations with
best-fit decreasing; TRL's mask comes from the same ``{% generation %}`` markers.

1) the student: ``model="tiny"`` trains a tokenizer on the data and builds a fresh model
   (:mod:`.tiny`); a name (``smollm2-135m``) or a path loads a transformers folder
   (:mod:`.modeling`); with ``lora_r`` > 0 only LoRA adapters on its linear layers are
   trained (PyPI ``peft``; "LoRA: Low-Rank Adaptation of Large Language Models",
   arXiv:2106.09685), and merged into the saved model; with ``train_layers`` N > 0 instead,
   only the top N blocks and the final norm are trained, every weight of them, and the
   backward pass stops below them;
2) tokenize every row with the chat template and its assistant mask, then pack (:mod:`.data`):
   tool results, user turns and the system prompt carry no loss. With ``weights`` (the
   default) each assistant token carries its row's sample weight × its step's weight
   (``extra["weight"]``, else STeCa's calibration weight; ``extra["step_weights"]``); a row of
   weight 0 is dropped before anything else, so it changes nothing; ``decision_weight``
   multiplies the weight of each assistant message's first token (call, ask or answer);
3) each optimizer step takes ``grad_accum`` micro-batches; the loss is the sum of −w·log p over
   the masked-in tokens of all of them divided by their total weight (their count when every
   weight is 1), so one micro-batch of 8 and eight of 1 give the same gradient; bf16
   autocast on CUDA and on a CPU with AMX, fp32 elsewhere (``precision``);
4) clip the gradient norm, AdamW step, learning rate with linear warmup then cosine decay to
   ``min_lr_ratio`` × lr (with a time budget, ``max_minutes``, the decay follows whichever of
   steps or time is further along, and training stops when the time is up);
5) report loss, learning rate and tokens/s; every ``save_every`` steps write a checkpoint
   (model, tokenizer, optimizer, step) into ``OUT/checkpoint`` by atomic rename, so the same
   command run again resumes where it stopped (full fine-tuning; a LoRA run, minutes long on
   a small model, writes no intermediate checkpoint and starts over);
6) save the final model and tokenizer as a transformers folder in ``OUT``, with
   ``trajsynth_sft.json`` (config, data and result summary). A run that stops before one
   whole epoch (the clock, ``max_steps``) counts the examples it never trained on;
   :func:`unseen_note` says so in one sentence.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from ..core.config import AsBefore, identity_dump
from ..core.errors import ConfigError, DataError
from ..core.ids import stable_hash
from ..core.schema import Trajectory
from . import checkpoint
from .data import IGNORE_INDEX, Batch, batches, sample_weight, tokenize_rows
from .modeling import (
    LoRASettings,
    autocast,
    fused_adamw,
    load_student,
    resolve_device,
    resolve_dtype,
    selected_logprobs,
    train_top_blocks,
    use_tool_format,
    with_lora,
)
from .progress import NullProgress, Progress
from .tiny import TinyConfig, new_student

__all__ = [
    "SFTConfig",
    "SFTResult",
    "accumulate_gradients",
    "masked_nll",
    "train_sft",
    "unseen_note",
]

STATE_FILE = "trajsynth_sft.json"


class SFTConfig(LoRASettings):
    """Settings of one SFT run (the ``trajsynth train-sft`` options)."""

    model: str = Field(
        default="tiny",
        description="`tiny` (a tokenizer trained on the data + a fresh tiny model) or a path "
        "to a transformers model folder.",
    )
    tiny: TinyConfig = Field(default_factory=TinyConfig, description="Size of the tiny model.")
    tool_format: Literal["model", "signature", "described", "json"] = Field(
        default="model",
        description="How the student's prompt shows tools. model: as its chat template does "
        "(tiny: tiny.tool_format). signature: one line per tool, name(param: type, "
        "optional?: type) - description; described: that line and one per parameter that "
        "has a description (format, unit, default: ~25% longer prompts); json: each tool's "
        "JSON schema (~80% longer). Only for a model on trajsynth's template (tiny, a "
        "prepared SmolLM2); the checkpoint keeps it, so eval and serve prompt alike.",
    )
    train_layers: int = Field(
        default=0,
        ge=0,
        description="Without LoRA: train only the top N transformer blocks and the final norm "
        "in full (0: every weight). The embeddings and the blocks below stay frozen and the "
        "backward pass stops at the lowest trained block: more steps in a CPU budget.",
    )
    epochs: float = Field(default=3.0, gt=0, description="Passes over the data.")
    max_steps: int | None = Field(
        default=None, ge=1, description="Stop after this many optimizer steps (overrides epochs)."
    )
    step_budget: int | None = Field(
        default=None,
        ge=1,
        description="At most this many optimizer steps: epochs decide unless they need more "
        "(a compute budget, e.g. for a loop whose data grows every round).",
    )
    max_minutes: float | None = Field(
        default=None,
        gt=0,
        description="Stop after this many minutes of training (a CPU budget); the learning "
        "rate follows whichever of steps or time is further along, so it has decayed by then.",
    )
    lr: float | None = Field(
        default=None,
        gt=0,
        description="Peak learning rate; default 3e-3 for the tiny model, 2e-5 for a "
        "pretrained one.",
    )
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1, description="Final lr / peak lr.")
    warmup_ratio: float = Field(default=0.05, ge=0, lt=1, description="Share of warmup steps.")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay.")
    grad_clip: float = Field(default=1.0, gt=0, description="Gradient norm clip.")
    batch_size: int = Field(default=8, ge=1, description="Rows per micro-batch.")
    grad_accum: int = Field(default=1, ge=1, description="Micro-batches per optimizer step.")
    max_len: int = Field(
        default=1024, ge=16, description="Tokens per row (packed) or per sequence (truncated)."
    )
    pack: bool = Field(default=True, description="Pack whole conversations into rows.")
    pack_len: Annotated[int | None, AsBefore(None)] = Field(
        default=None,
        ge=16,
        description="Tokens per packed row when below max_len (None: max_len): short "
        "conversations share rows of pack_len tokens, a longer one (up to max_len) gets a row "
        "of its own, so long rows are kept whole without making every step longer.",
    )
    reasoning: bool = Field(default=True, description="Train on the assistant's reasoning too.")
    weights: bool = Field(
        default=True,
        description="Weight each row's loss by its sample weight (extra.weight, else STeCa's "
        "calibration weight) and each step by extra.step_weights; a row of weight 0 is dropped.",
    )
    decision_weight: float = Field(
        default=1.0,
        gt=0,
        description="Loss weight of each assistant message's first token, where the model "
        "decides to call, ask or answer (1: no more than any other token).",
    )
    device: str = Field(default="auto", description="auto, cpu, cuda, cuda:1, mps.")
    precision: Literal["auto", "bf16", "fp32"] = Field(
        default="auto",
        description="auto: bf16 autocast on CUDA and on a CPU with AMX bf16 units (there fp32 "
        "for the tiny model, which learns worse in bf16), fp32 elsewhere (weights stay fp32).",
    )
    seed: int = Field(default=0, description="Seeds data order and the tiny model's weights.")
    save_every: int = Field(
        default=0, ge=0, description="Checkpoint every N steps (0: at each epoch's end only)."
    )
    resume: bool = Field(default=True, description="Resume from OUT/checkpoint when present.")
    log_every: int = Field(default=1, ge=1, description="Report metrics every N steps.")

    def peak_lr(self) -> float:
        if self.lr is not None:
            return self.lr
        if self.model == "tiny":
            return 3e-3
        return 5e-4 if self.lora_r else 2e-5

    def identity(self) -> str:
        """Hash of the settings that change the result (not where or how often it saves)."""
        keep = identity_dump(self)
        for name in ("device", "save_every", "resume", "log_every"):
            keep.pop(name, None)
        return stable_hash(keep)


class SFTResult(BaseModel):
    out: str
    steps: int
    micro_batches: int
    tokens: int = Field(description="Non-padding tokens trained on in this run.")
    loss_tokens: int
    seconds: float
    tokens_per_s: float
    first_loss: float | None
    final_loss: float | None
    packed_fill: float = Field(description="Non-padding share of the tokens fed to the model.")
    resumed_from: int = 0
    data: dict[str, int] = Field(default_factory=dict)
    parameters: int = 0
    device: str = "cpu"
    precision: str = "fp32"
    planned_steps: int = Field(default=0, description="The steps the schedule was laid out for.")
    epochs_done: float = Field(default=0.0, description="Micro-batches trained ÷ per epoch.")
    examples_unseen: int = Field(
        default=0,
        description="Examples (of data.examples) that no trained micro-batch held.",
    )


def unseen_note(run: Mapping[str, Any]) -> str | None:
    """What stopping before one whole epoch cost, in one sentence (None when every example
    was trained on at least once): what stopped it and how many examples were never seen.
    ``run``: ``steps``, ``planned_steps``, ``epochs_done``, ``examples_unseen`` (an
    :class:`SFTResult`'s fields), ``examples`` (its ``data``) and the config's ``max_minutes``;
    the train stage's metrics have them all.

    >>> print(unseen_note({"steps": 670, "planned_steps": 2040, "epochs_done": 0.66,
    ...     "examples": 2388, "examples_unseen": 810, "max_minutes": 30}).replace(": ", ":\\n"))
    the 30-minute budget (max_minutes) stopped training at step 670 of 2,040, 0.66 of an epoch:
    810 of 2,388 examples were never trained on; give it more time or fewer, shorter rows
    """
    unseen, steps = run.get("examples_unseen", 0), run.get("steps", 0)
    if not unseen:
        return None
    minutes = run.get("max_minutes")
    if minutes and steps < run.get("planned_steps", 0):
        cause = (
            f"the {minutes:g}-minute budget (max_minutes) stopped training at step {steps:,} "
            f"of {run['planned_steps']:,}"
        )
    else:
        plural = "" if steps == 1 else "s"
        cause = f"training ended after {steps:,} step{plural} (max_steps or step_budget)"
    return (
        f"{cause}, {run.get('epochs_done', 0.0):.2f} of an epoch: {unseen:,} of "
        f"{run.get('examples', 0):,} examples were never trained on; give it more time or "
        "fewer, shorter rows"
    )


def masked_nll(model: Any, batch: Batch, device: str, precision: str) -> tuple[Any, int]:
    """(sum of −w·log p over the batch's labelled tokens, their count); w = 1 without
    loss weights."""
    import torch

    ids = torch.tensor(batch.input_ids, device=device)  # (B, T)
    pos = torch.tensor(batch.position_ids, device=device)  # (B, T)
    labels = torch.tensor(batch.labels, device=device)  # (B, T)
    keep = labels != IGNORE_INDEX  # (B, T)
    with autocast(device, precision):
        logp = selected_logprobs(model, ids, pos, keep)  # (N,)
    if batch.loss_weights is None:
        return -logp.sum(), int(logp.numel())
    w = torch.tensor(batch.loss_weights, device=device)[:, 1:][keep[:, 1:]]  # (N,)
    return -(w * logp).sum(), int(logp.numel())


def accumulate_gradients(
    model: Any, micro: Sequence[Batch], device: str, precision: str
) -> tuple[float, int]:
    """Step 3: backward over the micro-batches of one optimizer step, each loss divided by
    the whole step's total loss weight (so the split into micro-batches does not change the
    gradient). Returns (summed loss, labelled tokens)."""
    n_step = sum(b.loss_tokens for b in micro)  # labelled tokens of the whole step
    w_step = sum(b.loss_weight for b in micro)  # their summed weight (= n_step unweighted)
    total = 0.0
    for b in micro:
        nll, n = masked_nll(model, b, device, precision)
        if n == 0 or w_step <= 0:
            continue
        (nll / w_step).backward()
        total += float(nll.detach())
    return total * n_step / w_step if w_step > 0 else 0.0, n_step


def _lr_at(step: int, total: int, cfg: SFTConfig, time_share: float = 0.0) -> float:
    """``time_share``: the share of ``max_minutes`` used so far (0 without a time budget)."""
    peak = cfg.peak_lr()
    warmup = int(cfg.warmup_ratio * total)
    # 1) linear warmup (with a time budget, over once that share of the time has passed)
    if step < warmup and time_share < cfg.warmup_ratio:
        return peak * max((step + 1) / warmup, time_share / cfg.warmup_ratio)
    # 2) cosine decay from peak to min_lr_ratio × peak, by steps or time, whichever is further
    progress = max((step - warmup) / max(1, total - warmup), time_share)
    floor = cfg.min_lr_ratio * peak
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * min(1.0, progress)))


def _data_fingerprint(rows: Sequence[Trajectory], weights: bool = False) -> str:
    ids: list[Any] = [r.id for r in rows]
    if weights and any(sample_weight(r) != 1.0 or "step_weights" in (r.extra or {}) for r in rows):
        ids = [[r.id, sample_weight(r), (r.extra or {}).get("step_weights")] for r in rows]
    return stable_hash(ids)


def train_sft(
    rows: Sequence[Trajectory],
    out: str | Path,
    cfg: SFTConfig | None = None,
    progress: Progress | None = None,
) -> SFTResult:
    """Steps 1-6 of the module docstring; returns what the run did."""
    import torch

    cfg = cfg or SFTConfig()
    if cfg.train_layers and cfg.model == "tiny":
        raise ConfigError("train_layers is for a pretrained model; the tiny one trains fully")
    progress = progress or NullProgress()
    out = Path(out)
    device = resolve_device(cfg.device)
    precision = resolve_dtype(cfg.precision, device, from_scratch=cfg.model == "tiny")
    if not rows:
        raise DataError("no trajectories to train on")
    if cfg.weights:  # a row of weight 0 changes nothing, not even the tiny tokenizer
        rows = [r for r in rows if sample_weight(r) > 0]
        if not rows:
            raise DataError("every row has weight 0: nothing to train on")
    data_fp = _data_fingerprint(rows, cfg.weights)
    resume = checkpoint.load_state(out, cfg.identity(), data_fp, resume=cfg.resume)

    # 1) the student
    if resume is not None:
        model, tokenizer = load_student(out / checkpoint.CHECKPOINT, device)
    elif cfg.model == "tiny":
        tiny = cfg.tiny.model_copy(update={"seed": cfg.seed})
        if cfg.tool_format != "model":
            tiny.tool_format = cfg.tool_format
        model, tokenizer = new_student(rows, tiny)
        model.to(device)
    else:
        model, tokenizer = load_student(cfg.model, device)
        if cfg.tool_format != "model":
            use_tool_format(tokenizer, cfg.tool_format, cfg.model)
    torch.manual_seed(cfg.seed)
    if cfg.lora_r:
        model = _with_lora(model, cfg)
    elif cfg.train_layers:
        train_top_blocks(model, cfg.train_layers)

    # 2) tokens, masks, packing
    examples, stats = tokenize_rows(
        tokenizer,
        rows,
        max_len=cfg.max_len,
        reasoning=cfg.reasoning,
        weights=cfg.weights,
        decision_weight=cfg.decision_weight,
    )
    if not examples:
        raise DataError(
            f"none of the {len(rows)} rows has an assistant message to train on",
            hint="train-sft needs trajectories (rows with messages), not task rows",
        )
    pad_id = tokenizer.pad_token_id

    def epoch_batches(epoch: int) -> list[Batch]:
        return batches(
            examples,
            batch_size=cfg.batch_size,
            max_len=min(cfg.pack_len or cfg.max_len, cfg.max_len),
            pack_sequences=cfg.pack,
            pad_id=pad_id,
            seed=cfg.seed + epoch,
        )

    first = epoch_batches(0)
    per_epoch = len(first)
    total_micro = max(1, round(cfg.epochs * per_epoch))
    total_steps = cfg.max_steps or math.ceil(total_micro / cfg.grad_accum)
    if cfg.step_budget is not None:
        total_steps = min(total_steps, cfg.step_budget)
    total_micro = total_steps * cfg.grad_accum

    # 3-4) optimizer
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=cfg.peak_lr(),
        betas=(0.9, 0.95),
        weight_decay=cfg.weight_decay,
        fused=fused_adamw(device),
    )
    step = 0
    if resume is not None:
        checkpoint.load_optimizer(out, optimizer, device)
        step = int(resume["step"])
        progress.note(f"resuming from step {step} of {total_steps}")

    model.train()
    cache: dict[int, list[Batch]] = {0: first}

    def micro_batch(m: int) -> Batch:
        epoch, index = divmod(m, per_epoch)
        if epoch not in cache:
            cache.clear()
            cache[epoch] = epoch_batches(epoch)
        return cache[epoch][index]

    progress.start(total_steps, "sft", done=step)
    start_step = step
    tokens = loss_tokens = fed = 0
    first_loss: float | None = None
    last_loss: float | None = None
    t0 = time.perf_counter()
    budget_s = cfg.max_minutes * 60 if cfg.max_minutes else None
    while step < total_steps:
        elapsed = time.perf_counter() - t0
        if budget_s is not None and elapsed >= budget_s:
            break
        lr = _lr_at(step, total_steps, cfg, elapsed / budget_s if budget_s else 0.0)
        for group in optimizer.param_groups:
            group["lr"] = lr
        micro = [micro_batch(step * cfg.grad_accum + k) for k in range(cfg.grad_accum)]
        step_loss, n_step = accumulate_gradients(model, micro, device, precision)
        tokens += sum(b.real_tokens for b in micro)
        fed += sum(b.shape[0] * b.shape[1] for b in micro)
        loss_tokens += n_step
        # 4) clip, step
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        last_loss = step_loss / max(1, n_step)
        if first_loss is None:
            first_loss = last_loss
        # 5) report, checkpoint
        elapsed = time.perf_counter() - t0
        if step % cfg.log_every == 0 or step == total_steps:
            progress.update(
                step,
                {
                    "loss": last_loss,
                    "lr": lr,
                    "tokens_per_s": tokens / elapsed if elapsed > 0 else 0.0,
                    "epoch": step * cfg.grad_accum / per_epoch,
                },
            )
        at_epoch_end = (step * cfg.grad_accum) % per_epoch < cfg.grad_accum
        if (
            not cfg.lora_r
            and step < total_steps
            and (
                (cfg.save_every and step % cfg.save_every == 0)
                or (not cfg.save_every and at_epoch_end)
            )
        ):
            checkpoint.save_checkpoint(
                out,
                model,
                tokenizer,
                optimizer,
                {"step": step, "config": cfg.identity(), "data": data_fp},
            )
    seconds = time.perf_counter() - t0
    progress.close()
    micro_done = step * cfg.grad_accum  # resumed steps included: they trained the same bins
    unseen = (
        len(examples) - sum(b.sequences for b in first[:micro_done])
        if micro_done < per_epoch
        else 0
    )

    # 6) the final model folder
    model.eval()
    if cfg.lora_r:
        model = model.merge_and_unload()
    checkpoint.save_model(out, model, tokenizer)
    result = SFTResult(
        out=str(out),
        steps=step,
        micro_batches=step * cfg.grad_accum,
        tokens=tokens,
        loss_tokens=loss_tokens,
        seconds=seconds,
        tokens_per_s=tokens / seconds if seconds > 0 else 0.0,
        first_loss=first_loss,
        final_loss=last_loss,
        packed_fill=tokens / fed if fed else 0.0,
        resumed_from=start_step,
        data=stats.as_dict(),
        parameters=sum(p.numel() for p in model.parameters()),
        device=device,
        precision=precision,
        planned_steps=total_steps,
        epochs_done=micro_done / per_epoch,
        examples_unseen=unseen,
    )
    (out / STATE_FILE).write_text(
        json.dumps({"config": cfg.model_dump(mode="json"), "result": result.model_dump()}, indent=2)
    )
    checkpoint.finish(out)
    return result


def _with_lora(model: Any, cfg: SFTConfig) -> Any:
    """LoRA adapters (rank ``lora_r``) on every linear layer but the output head, in the top
    ``lora_layers`` blocks; only they are trained."""
    if cfg.model == "tiny":
        raise ConfigError("LoRA is for a pretrained model; the tiny student trains fully")
    return with_lora(model, cfg.lora_r, cfg.lora_alpha, cfg.lora_layers)

"""``gcp``: LoopTool's Greedy Capability Probing (Zhang et al. 2025, "LoopTool: Closing the
Data–Training Loop for Robust LLM Tool Calls", arXiv:2511.09148; official code
``dataloop/greedy_capability_prob.py``).

The student just trained is decoded greedily on the current data; what it already masters
with confidence is dropped, the rest drives the next round:

1) the student: the checkpoint of the stage named in ``needs:`` (a transformers folder, e.g.
   ``train_sft``'s artifact) played through ``ctx.use_checkpoint`` (the local backend,
   token in / token out, as ``trajsynth eval`` plays it) — or, with ``role:``, an LLM role
   (an endpoint, the simulator, a scripted backend) sent the task as metadata; either is
   asked for ``logprobs``;
2) greedy decoding (temperature 0) of every row's task with
   :func:`trajsynth.train.eval.evaluate` (episodes against the real environments, scored by
   the shared verifiers);
3) per sample: the mean log-probability of the generated tokens (LoopTool's
   ``avg_log_prob``) and the perplexity ``exp(−mean)``;
4) mastered vs failed by LoopTool's order-insensitive multiset match at every step
   (:func:`~trajsynth.envs.verifiers.exact_multiset_reward`: reordered parallel calls count
   as mastered); a failed sample records its first mismatching step: the label (gold calls
   or text), the prediction and the conversation the student saw before it (what JGLV
   judges); ``tool_match`` (the right tools at every step, arguments aside) is recorded too;
5) per-capability accuracy (mastered share) into the metrics (``accuracy.<capability>``);
6) the high-perplexity cut among mastered samples: ``ppl_threshold`` or, by default, the
   ``ppl_quantile`` quantile of their perplexities (neither the paper nor the released code
   gives a value); mastered samples above it are *hard* (kept, H_j), the others
   *easy* (dropped);
7) outputs: ``main`` = kept (failed ∪ hard), ``failed`` (F_j, JGLV's input), ``hard`` (H_j),
   ``easy`` (dropped, for inspection) and ``episodes`` (the student's greedy episode of every
   row, scored: a probe set's accuracy report). Each row's ``extra["gcp"]`` holds the status,
   log-probability, perplexity and, when failed, the mismatch.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pydantic import Field

from ...core.batch import to_records
from ...core.errors import ConfigError
from ...core.ids import stable_id
from ...core.schema import Message, Trajectory
from ...envs.verifiers import exact_multiset_reward
from ...train.eval import evaluate, gold_steps, predicted_steps
from ...train.modeling import resolve_device
from ...train.rollout import ChatPlayer, RolloutConfig
from ...train.synth import env_maker
from ..common.looptool import calls_json
from ..common.policies import sim_task
from ..context import Context
from ..kinds import Emit, GlobalStage, Output, StageConfig
from ..registry import register

__all__ = ["GCP", "GCPConfig"]


class GCPConfig(StageConfig):
    role: str | None = Field(
        None,
        description="Probe an LLM role instead of the checkpoint in `needs:` (e.g. `teacher` "
        "for its accuracy on the same probe set).",
    )
    probe_set: str = Field(
        "data", description="Name of the probed set, kept in extra.gcp.set (data, probe)."
    )
    ppl_quantile: float = Field(
        0.5, ge=0, le=1, description="High-perplexity cut: this quantile of mastered samples."
    )
    ppl_threshold: float | None = Field(
        None, gt=0, description="A fixed perplexity cut instead of the quantile."
    )
    max_steps: int = Field(8, ge=1, description="Assistant turns per episode at most.")
    max_new_tokens: int = Field(192, ge=1, description="Tokens per assistant turn.")
    max_len: int = Field(2048, ge=64, description="Tokens per episode at most.")
    batch_size: int = Field(64, ge=1, description="Prompts per generation batch (local).")
    device: str = Field("auto", description="Device of the local student.")


def _first_mismatch(row: Trajectory, messages: Sequence[Message]) -> dict[str, Any]:
    """Step 4: the first step where prediction and gold differ as multisets."""
    gt = row.ground_truth
    assert gt is not None
    gold = gold_steps(gt)
    pred = predicted_steps(messages)
    assistant = [i for i, m in enumerate(messages) if m.role == "assistant"]
    for i, g in enumerate(gold):
        p = pred[i] if i < len(pred) else None
        missing = i >= len(pred)
        if missing or exact_multiset_reward(p if p is not None else "text", g or "text") != 1.0:
            cut = assistant[i] if i < len(assistant) else len(messages)
            content = None if missing else messages[assistant[i]].content
            return {
                "step": i,
                "label": calls_json(g),
                "prediction": "none" if missing else calls_json(p),
                "prediction_text": content,
                "context": [m.model_dump(exclude_defaults=True) for m in messages[:cut]],
            }
    # every gold step matched but the student wrote more steps
    i = len(gold)
    cut = assistant[i] if i < len(assistant) else len(messages)
    p = pred[i] if i < len(pred) else None
    return {
        "step": i,
        "label": "none",
        "prediction": calls_json(p),
        "prediction_text": messages[cut].content if cut < len(messages) else None,
        "context": [m.model_dump(exclude_defaults=True) for m in messages[:cut]],
    }


# --------------------------------------------------------------------------------------
# the stage
# --------------------------------------------------------------------------------------


@register
class GCP(GlobalStage[GCPConfig]):
    """LoopTool GCP: greedy probe of the student; keep failed + high-perplexity, drop easy."""

    name = "gcp"
    outputs = ("main", "failed", "hard", "easy", "episodes")
    writes = ("success", "reward", "reward_components")

    def _player(self, ctx: Context) -> Any:
        cfg = self.config
        if cfg.role is not None:
            role = cfg.role

            def metadata(row: Trajectory) -> dict[str, Any] | None:
                gt = row.ground_truth
                return {"role": role, "ground_truth": sim_task(gt)} if gt else None

            return ChatPlayer(ctx.llm(role), logprobs=True, metadata=metadata), role
        needed = ctx.needed_artifacts()
        if not needed:
            raise ConfigError(
                f"stage {ctx.stage_id!r}: gcp probes a student: give `needs:` a training stage "
                "(its checkpoint) or `with: {role: ...}`"
            )
        folder: Path = needed[-1]
        local = {"device": resolve_device(cfg.device), "batch_size": cfg.batch_size}
        client = ctx.use_checkpoint("student", folder, local=local)
        return ChatPlayer(client, tokens=True, logprobs=True), str(folder.name)

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        rows = [r for b in batches for r in to_records(b) if r.ground_truth]
        if not rows:
            return
        # 1) the student; 2) greedy decoding through the eval code path
        player, generator = self._player(ctx)
        rcfg = RolloutConfig(
            temperature=0.0,
            max_steps=cfg.max_steps,
            max_new_tokens=cfg.max_new_tokens,
            max_len=cfg.max_len,
            batch_size=cfg.batch_size,
        )
        report = evaluate(rows, player, env_maker(), rcfg, seed=ctx.seed)
        # 3) mean log-prob and perplexity; 4) mastered vs failed
        records = []
        for row, ep in zip(rows, report.episodes, strict=True):
            scores = dict(ep["scores"])
            messages = [Message.model_validate(m) for m in ep["messages"]]
            mastered = scores.get("exact_match", 0.0) == 1.0
            records.append((row, messages, scores, mastered))
        # 5) per-capability accuracy
        per_cap: dict[str, list[float]] = defaultdict(list)
        for row, _, _, mastered in records:
            for cap in row.capabilities or ["untagged"]:
                per_cap[cap].append(float(mastered))
        accuracy = {c: sum(v) / len(v) for c, v in sorted(per_cap.items())}
        ctx.metrics.set("accuracy", accuracy)
        ctx.metrics.set("accuracy_overall", sum(m for *_, m in records) / len(records))
        # 6) the perplexity cut among mastered samples
        ppls = [s["perplexity"] for _, _, s, m in records if m and "perplexity" in s]
        if cfg.ppl_threshold is not None:
            cut = cfg.ppl_threshold
        else:
            cut = float(np.quantile(ppls, cfg.ppl_quantile)) if ppls else math.inf
        ctx.metrics.set("ppl_threshold", cut if math.isfinite(cut) else None)
        # 7) outputs
        out: dict[str, list[Trajectory]] = defaultdict(list)
        for row, messages, scores, mastered in records:
            ppl = scores.get("perplexity")
            if not mastered:
                status = "failed"
            else:
                status = "hard" if ppl is not None and ppl > cut else "easy"
            info: dict[str, Any] = {
                "status": status,
                "policy": cfg.role or "student",
                "set": cfg.probe_set,
                "mean_logprob": scores.get("mean_logprob"),
                "perplexity": ppl,
                "scores": {k: v for k, v in scores.items() if isinstance(v, (int, float))},
            }
            if status == "failed":
                info.update(_first_mismatch(row, messages))
            ctx.metrics.inc(status)
            extra = {**(row.extra or {}), "gcp": info}
            out[status].append(row.derive(extra=extra, iteration=ctx.iteration))
            out["episodes"].append(
                row.derive(
                    id=stable_id("gcp-episode", row.id, ctx.stage_id),
                    messages=messages,
                    success=mastered,
                    reward=float(mastered),
                    reward_components={
                        k: float(v) for k, v in scores.items() if isinstance(v, (int, float))
                    },
                    extra=extra,
                    **ctx.provenance(method="gcp", parent_ids=[row.id], generator=generator),
                )
            )
        kept = out["failed"] + out["hard"]
        if kept:
            yield kept
        for name in ("failed", "hard", "easy", "episodes"):
            if out[name]:
                yield Emit(name, out[name])

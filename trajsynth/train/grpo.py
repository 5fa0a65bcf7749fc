"""Policy-gradient training on multi-turn tool-use episodes: GRPO, GiGPO, Turn-PPO, ArCHer,
an explicit PRM or implicit step rewards for the credit, optional StarPO-S filtering.

GRPO: Shao et al. 2024, "DeepSeekMath" (arXiv 2402.03300, §4.1). GiGPO: Feng et al. 2025,
"Group-in-Group Policy Optimization for LLM Agent Training" (arXiv 2505.10978). Settings
follow LoopTool's verl run (arXiv:2511.09148, ``grpotool/train_grpo_qwen.sh``): G rollouts
per task, binary exact-match reward, clip 0.2 / 0.28, no KL. The other estimators live in
the modules named after their methods (:mod:`.credit` lists them): Turn-PPO
(:mod:`.turn_ppo`, arXiv 2512.17008), ArCHer (:mod:`.archer`, arXiv 2402.19446), an explicit
PRM (:mod:`.agent_prm`, arXiv 2502.10325), iStar's implicit PRM (:mod:`.istar`, arXiv
2509.19199); StarPO-S's filter is :mod:`.starpo` (arXiv 2504.20073).

Each iteration:

1) take the next ``tasks_per_step`` task rows (a seeded shuffle of all tasks, epoch after
   epoch) and play ``group_size`` (G) episodes of each against the real environments,
   concurrently, sampling at ``rollout.temperature`` (:mod:`.rollout`: the model being
   trained is played through :class:`~trajsynth.llm.local.LocalBackend`, token in / token
   out, token ids as generated);
2) score every episode (:mod:`.rewards`): the weighted reward terms (by default LoopTool's
   binary exact match from the shared verifiers; the three-part agent reward, the judge's
   rubric, partial credit) less the efficiency and format penalties. The reward is given at
   the last step (sparse), so a step's discounted return is γ^{T−1−t}·R;
3) with ``filter_variance`` p, keep the top p of the task groups by reward standard deviation
   (StarPO-S); then the estimator gives every turn of every episode it keeps an advantage:
   GRPO's (r − mean)/std, GiGPO's episode + ω × anchor-state step advantage (both drop a
   group whose rewards are all equal), Turn-PPO's turn GAE, ArCHer's Q − V, or the episode
   advantage + w × normalised step rewards of a PRM (explicit or implicit). An estimator that
   learns (a critic, a PRM) trains on the same batch;
4) every generated token gets its turn's advantage; prompt, user and tool tokens get loss mask
   0 (the model is never trained on tool output). Old log-probabilities come from the current
   model before the update (on-policy; with one pass and one minibatch the policy has not
   moved yet, so they are the update's own log-probabilities, detached, and the extra forward
   pass is skipped), reference ones from the frozen start model when ``beta`` > 0;
5) ``ppo_epochs`` passes over ``minibatches`` minibatches: clipped surrogate (ε_low, ε_high)
   + β·KL (k3), aggregated per token or per sequence (:mod:`.losses`), gradient clipping,
   AdamW;
6) log reward (and each of its terms), success, calls per episode, format errors, advantage
   statistics, the estimator's figures (critic loss, explained variance, PRM scores), the
   clipped share and KL; checkpoint every ``save_every`` iterations (with the estimator's
   state); save the final model folder.

Everything a run needs is checked before the first rollout: an unknown reward term, weights
that do not sum as declared, ``prm`` without a PRM folder.

With ``lora_r`` > 0 only LoRA adapters are trained (:func:`~.modeling.with_lora`; "LoRA:
Low-Rank Adaptation of Large Language Models", arXiv:2106.09685), optionally in the top
``lora_layers`` blocks only, and merged into the saved model; such a run writes no
intermediate checkpoint (as in SFT) and starts over when run again.

Deviations from LoopTool's run: episodes are multi-turn against live environments (LoopTool
scores single steps against a gold history); the reward of an episode is 1 when every step
matches (LoopTool: one step).
"""

from __future__ import annotations

import copy
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from ..core.errors import ConfigError, DataError
from ..core.ids import stable_hash
from ..core.schema import Trajectory
from . import checkpoint
from .advantages import AdvantageStats, GroupRelative
from .agent_prm import PRMRewardConfig
from .archer import ArcherConfig
from .credit import Estimator, Kept, batch_logprobs, group_by_task, token_batch
from .istar import IStarConfig
from .losses import aggregate, clipped_surrogate, kl_k3
from .modeling import (
    LoRASettings,
    fused_adamw,
    load_student,
    resolve_device,
    resolve_dtype,
    with_lora,
)
from .progress import NullProgress, Progress
from .rewards import RewardConfig, score_rewards
from .rollout import ChatPlayer, Rollout, RolloutConfig, run_rollouts
from .starpo import filter_groups
from .turn_ppo import TurnPPOConfig

__all__ = ["GRPOConfig", "GRPOResult", "train_grpo"]

STATE_FILE = "trajsynth_grpo.json"

#: an episode's task reward in [0, 1] from its row and messages (default: the verifiers)
RewardFn = Callable[[Trajectory, list[Any]], float]


class GRPOConfig(LoRASettings):
    """Settings of one GRPO run (the ``trajsynth train-grpo`` options)."""

    model: str = Field(description="The starting checkpoint: a transformers model folder.")
    iterations: int = Field(default=20, ge=1, description="Policy updates (rollout batches).")
    tasks_per_step: int = Field(default=8, ge=1, description="Tasks per rollout batch.")
    group_size: int = Field(
        default=8, ge=2, description="G: episodes per task (LoopTool uses n=16)."
    )
    lr: float = Field(default=1e-6, gt=0, description="Learning rate (LoopTool: 1e-6).")
    clip_low: float = Field(default=0.2, ge=0, description="ε_low (LoopTool/DAPO: 0.2).")
    clip_high: float = Field(default=0.28, ge=0, description="ε_high (LoopTool/DAPO: 0.28).")
    beta: float = Field(
        default=0.0, ge=0, description="KL weight β (LoopTool and DAPO: 0; DeepSeek-R1: 0.001)."
    )
    loss_agg: Literal["token_mean", "seq_mean"] = Field(
        default="token_mean",
        description="token_mean: DAPO's token-level mean; seq_mean: the original GRPO.",
    )
    advantage: Literal["grpo", "gigpo", "turn_ppo", "archer", "prm", "implicit_prm"] = Field(
        default="grpo",
        description="Credit assignment: grpo (episode advantages), gigpo (+ anchor-state step "
        "advantages), turn_ppo (turn critic, GAE over turns), archer (off-policy TD critic), "
        "prm (a trained step scorer's dense rewards), implicit_prm (iStar's log-ratio rewards).",
    )
    filter_variance: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="StarPO-S: keep the top share of task groups by reward std before each "
        "update (RAGEN's default 0.25); None keeps every group.",
    )
    scale_advantages: bool = Field(
        default=True, description="Divide by the group std (False: Dr. GRPO's r − mean)."
    )
    omega: float = Field(default=1.0, ge=0, description="GiGPO ω (paper: 1).")
    gamma: float = Field(default=0.95, ge=0, le=1, description="GiGPO γ (paper: 0.95).")
    turn_ppo: TurnPPOConfig = Field(default_factory=TurnPPOConfig, description="Turn-PPO.")
    archer: ArcherConfig = Field(default_factory=ArcherConfig, description="ArCHer.")
    prm: PRMRewardConfig = Field(default_factory=PRMRewardConfig, description="Explicit PRM.")
    implicit_prm: IStarConfig = Field(default_factory=IStarConfig, description="iStar.")
    ppo_epochs: int = Field(default=1, ge=1, description="Passes over each rollout batch.")
    minibatches: int = Field(default=1, ge=1, description="Optimizer steps per pass.")
    micro_batch: int = Field(default=16, ge=1, description="Sequences per forward pass.")
    grad_clip: float = Field(default=1.0, gt=0, description="Gradient norm clip.")
    reward: RewardConfig = Field(default_factory=RewardConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    max_observation_chars: int | None = Field(
        default=16_000, description="Longest tool output shown to the model."
    )
    device: str = Field(default="auto", description="auto, cpu, cuda, mps.")
    precision: Literal["auto", "bf16", "fp32"] = Field(default="auto")
    seed: int = Field(default=0, description="Seeds the task order and sampling.")
    save_every: int = Field(default=0, ge=0, description="Checkpoint every N iterations.")
    resume: bool = Field(default=True, description="Resume from OUT/checkpoint when present.")

    @model_validator(mode="after")
    def _needs(self) -> GRPOConfig:
        if self.advantage == "prm" and not self.prm.path:
            raise ValueError(
                "advantage prm needs a trained step scorer: give --prm DIR (a folder written "
                "by trajsynth train-prm)"
            )
        return self

    def identity(self) -> str:
        return stable_hash(self.model_dump(exclude={"device", "save_every", "resume"}))


class GRPOResult(BaseModel):
    out: str
    iterations: int
    history: list[dict[str, float]] = Field(description="Metrics of every iteration.")
    seconds: float
    resumed_from: int = 0
    precision: str = Field("fp32", description="What the forward passes ran in: fp32 or bf16.")


# --------------------------------------------------------------------------------------
# 1-3) rollouts, rewards, advantages
# --------------------------------------------------------------------------------------


def score_and_advantages(
    episodes: list[Rollout],
    make_env: Callable[[Trajectory], Any],
    cfg: GRPOConfig,
    stats: AdvantageStats,
    reward_fn: RewardFn | None = None,
    *,
    estimator: Estimator | None = None,
    metrics: dict[str, float] | None = None,
) -> Kept:
    """Steps 2-3: (episode, advantage per assistant turn) for every episode the estimator
    keeps. ``reward_fn`` (e.g. an arena package's own reward) replaces the verifiers' score
    as the task reward; the efficiency and format terms still apply. ``estimator`` defaults
    to GRPO or GiGPO as ``cfg.advantage`` says (those need no model)."""
    metrics = metrics if metrics is not None else {}
    metrics.update(
        score_rewards(
            episodes,
            make_env,
            cfg.reward,
            cfg.rollout.max_steps,
            reward_fn=reward_fn,
            seed=cfg.seed,
        )
    )
    groups = group_by_task(episodes)
    if cfg.filter_variance is not None:
        groups = filter_groups(groups, cfg.filter_variance, metrics)
    if estimator is None:
        if cfg.advantage not in ("grpo", "gigpo"):
            raise ConfigError(f"advantage {cfg.advantage} needs a model: use train_grpo")
        estimator = GroupRelative(
            gigpo=cfg.advantage == "gigpo",
            omega=cfg.omega,
            gamma=cfg.gamma,
            scale=cfg.scale_advantages,
        )
    return estimator.advantages(groups, stats, metrics)


def make_estimator(
    cfg: GRPOConfig,
    model: Any,
    start_model: Any | None,
    tokenizer: Any,
    device: str,
    precision: str,
    temperature: float,
) -> Estimator:
    """The estimator ``cfg.advantage`` names, with what it owns: a critic on a frozen copy of
    the start model (``start_model``), the PRM folder, or π_φ copied from ``model``."""
    if cfg.advantage in ("grpo", "gigpo"):
        return GroupRelative(
            gigpo=cfg.advantage == "gigpo",
            omega=cfg.omega,
            gamma=cfg.gamma,
            scale=cfg.scale_advantages,
        )
    if cfg.advantage in ("turn_ppo", "archer"):
        from .critic import Encoder

        assert start_model is not None
        encoder = Encoder(
            start_model,
            tokenizer,
            device,
            max_steps=cfg.rollout.max_steps,
            max_len=cfg.rollout.max_len,
        )
        if cfg.advantage == "turn_ppo":
            from .turn_ppo import TurnPPO

            return TurnPPO(encoder, cfg.turn_ppo, seed=cfg.seed)
        from .archer import Archer

        return Archer(encoder, cfg.archer, seed=cfg.seed)
    if cfg.advantage == "prm":
        from .agent_prm import AgentPRM, StepScorer

        assert cfg.prm.path is not None
        scorer = StepScorer.load(cfg.prm.path, device, max_steps=cfg.rollout.max_steps)
        return AgentPRM(scorer, cfg.prm, scale=cfg.scale_advantages)
    from .istar import IStar

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return IStar(
        model,
        cfg.implicit_prm,
        pad_id=pad_id,
        device=device,
        precision=precision,
        temperature=temperature,
        micro_batch=cfg.micro_batch,
        scale=cfg.scale_advantages,
    )


_token_batch = token_batch  # step 4 (the name the tests know)
_logprobs = batch_logprobs


# --------------------------------------------------------------------------------------
# the loop
# --------------------------------------------------------------------------------------


def train_grpo(
    tasks: Sequence[Trajectory],
    out: str | Path,
    cfg: GRPOConfig,
    *,
    make_env: Callable[[Trajectory], Any] | None = None,
    reward_fn: RewardFn | None = None,
    progress: Progress | None = None,
) -> GRPOResult:
    """Steps 1-6 of the module docstring. ``make_env`` and ``reward_fn`` let another task
    source (ASTRA-style arena packages: :func:`trajsynth.envs.arena.arena_training_set`)
    bring its own environments and reward."""
    import torch

    from .synth import env_maker

    progress = progress or NullProgress()
    out = Path(out)
    tasks = [t for t in tasks if t.ground_truth is not None]
    if not tasks:
        raise DataError("no task rows with ground truth to train on")
    make_env = make_env or env_maker(cfg.max_observation_chars)
    if cfg.advantage == "prm":  # before any model is loaded or episode played
        from .agent_prm import StepScorer

        assert cfg.prm.path is not None
        StepScorer.check(cfg.prm.path)
    device = resolve_device(cfg.device)
    precision = resolve_dtype(cfg.precision, device)
    data_fp = stable_hash([t.id for t in tasks])
    state = checkpoint.load_state(out, cfg.identity(), data_fp, resume=cfg.resume)
    start = out / checkpoint.CHECKPOINT if state is not None else Path(cfg.model)
    model, tokenizer = load_student(start, device)
    ref_model = None
    if cfg.beta > 0:  # the frozen start model (the original, also when resuming)
        ref_model = load_student(cfg.model, device)[0] if state else copy.deepcopy(model)
        ref_model.eval().requires_grad_(False)
    start_model = None
    if cfg.advantage in ("turn_ppo", "archer"):  # the critic's frozen encoder: the start model
        start_model = ref_model or (
            load_student(cfg.model, device)[0] if state else copy.deepcopy(model)
        )
    if cfg.lora_r:
        torch.manual_seed(cfg.seed)  # the adapters' initial weights
        model = with_lora(model, cfg.lora_r, cfg.lora_alpha, cfg.lora_layers)
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=cfg.lr,
        betas=(0.9, 0.99),
        weight_decay=0.0,
        fused=fused_adamw(device),
    )
    temp = cfg.rollout.temperature or 1.0  # the sampled policy is softmax(logits / T)
    estimator = make_estimator(cfg, model, start_model, tokenizer, device, precision, temp)
    first = 0
    history: list[dict[str, float]] = []
    if state is not None:
        checkpoint.load_optimizer(out, optimizer, device)
        extra = checkpoint.load_extra(out)
        if extra is not None:
            estimator.load_state_dict(extra)
        first = int(state["step"])
        history = list(state.get("history", []))
        progress.note(f"resuming from iteration {first} of {cfg.iterations}")
    from ..llm.local import LocalBackend

    backend = LocalBackend.from_model(
        model,
        tokenizer,
        device=device,
        autocast="bf16" if precision == "bf16" else "none",
        batch_size=cfg.rollout.batch_size,
        max_new_tokens=cfg.rollout.max_new_tokens,
    )
    player = ChatPlayer.local(backend)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    # 1) the task stream: a seeded shuffle per epoch
    def task_batch(it: int) -> list[Trajectory]:
        per_epoch = max(1, len(tasks) // cfg.tasks_per_step)
        epoch, k = divmod(it, per_epoch)
        order = list(range(len(tasks)))
        random.Random(cfg.seed * 1000003 + epoch).shuffle(order)
        picked = order[k * cfg.tasks_per_step : (k + 1) * cfg.tasks_per_step]
        return [tasks[i] for i in picked]

    progress.start(cfg.iterations, "grpo", done=first)
    t_start = time.perf_counter()
    for it in range(first, cfg.iterations):
        t0 = time.perf_counter()
        rows = task_batch(it)
        model.eval()
        episodes = run_rollouts(
            rows, player, make_env, cfg.rollout, samples=cfg.group_size, seed=cfg.seed + it
        )
        t_rollout = time.perf_counter() - t0
        # 2-3) rewards and advantages
        stats = AdvantageStats()
        found: dict[str, float] = {}
        t_credit = time.perf_counter()
        kept = score_and_advantages(
            episodes, make_env, cfg, stats, reward_fn, estimator=estimator, metrics=found
        )
        kept = [(ep, a) for ep, a in kept if any(ep.mask)]
        metrics: dict[str, float] = {
            "reward": sum(ep.reward for ep in episodes) / len(episodes),
            "success": sum(float(ep.success) for ep in episodes) / len(episodes),
            "calls_per_episode": sum(ep.calls for ep in episodes) / len(episodes),
            "steps_per_episode": sum(ep.steps for ep in episodes) / len(episodes),
            "format_errors": sum(len(ep.format_errors) for ep in episodes) / len(episodes),
            "truncated": sum(float(ep.truncated) for ep in episodes) / len(episodes),
            "episodes_trained": float(len(kept)),
            "generated_tokens": float(sum(sum(ep.mask) for ep in episodes)),
            "rollout_s": t_rollout,
            "credit_s": time.perf_counter() - t_credit,
            **stats.summary(),
            **found,
        }
        # 4-5) the policy update
        clip_frac = kl_sum = loss_sum = 0.0
        updates = 0
        t_update = time.perf_counter()
        model.train()
        if kept:
            order = list(range(len(kept)))
            batches = [
                _token_batch([kept[i] for i in order[s : s + cfg.micro_batch]], pad_id, device)
                for s in range(0, len(order), cfg.micro_batch)
            ]
            # one pass, one minibatch: π_old is the update's own π_θ, detached (step 4)
            on_policy = cfg.ppo_epochs == 1 and cfg.minibatches == 1
            with torch.no_grad():
                for b in batches:
                    if not on_policy:
                        b["old"] = _logprobs(model, b, device, precision, temp)  # π_old, (N,)
                    if ref_model is not None:
                        b["ref"] = _logprobs(ref_model, b, device, precision, temp)  # π_ref, (N,)
            per_mb = math.ceil(len(batches) / cfg.minibatches)
            for _ in range(cfg.ppo_epochs):
                for m in range(0, len(batches), per_mb):
                    group = batches[m : m + per_mb]
                    tokens = sum(int(b["adv"].numel()) for b in group)
                    seqs = sum(b["n_seqs"] for b in group)
                    for b in group:
                        logp = _logprobs(model, b, device, precision, temp)  # π_θ, (N,)
                        old = logp.detach() if on_policy else b["old"]
                        pg, clipped = clipped_surrogate(
                            logp, old, b["adv"], cfg.clip_low, cfg.clip_high
                        )
                        per_token = pg
                        if ref_model is not None:
                            kl = kl_k3(logp, b["ref"])
                            per_token = pg + cfg.beta * kl
                            kl_sum += float(kl.detach().sum())
                        # the minibatch's loss = its token (or sequence) mean, summed over
                        # micro-batches so that splitting does not change the gradient
                        if cfg.loss_agg == "token_mean":
                            loss = per_token.sum() / max(1, tokens)
                        else:
                            loss = aggregate(per_token, b["seq_index"], b["n_seqs"], "seq_mean") * (
                                b["n_seqs"] / seqs
                            )
                        loss.backward()
                        loss_sum += float(loss.detach())
                        clip_frac += float(clipped.float().sum())
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    updates += 1
            trained_tokens = sum(int(b["adv"].numel()) for b in batches) * cfg.ppo_epochs
            metrics["clip_frac"] = clip_frac / max(1, trained_tokens)
            metrics["kl"] = kl_sum / max(1, trained_tokens)
            metrics["loss"] = loss_sum / max(1, updates)
        # tokens through the update's forward and backward passes (whole sequences)
        metrics["update_tokens"] = float(sum(len(ep.token_ids) for ep, _ in kept) * cfg.ppo_epochs)
        metrics["update_s"] = time.perf_counter() - t_update
        metrics["updates"] = float(updates)
        metrics["iteration_s"] = time.perf_counter() - t0
        history.append(metrics)
        progress.update(it + 1, metrics)
        # 6) checkpoint
        if (
            cfg.save_every
            and not cfg.lora_r
            and (it + 1) % cfg.save_every == 0
            and it + 1 < cfg.iterations
        ):
            checkpoint.save_checkpoint(
                out,
                model,
                tokenizer,
                optimizer,
                {"step": it + 1, "config": cfg.identity(), "data": data_fp, "history": history},
                extra=estimator.state_dict() or None,
            )
    progress.close()
    model.eval()
    if cfg.lora_r:
        model = model.merge_and_unload()
    checkpoint.save_model(out, model, tokenizer)
    result = GRPOResult(
        out=str(out),
        iterations=cfg.iterations,
        history=history,
        seconds=time.perf_counter() - t_start,
        resumed_from=first,
        precision=precision,
    )
    (out / STATE_FILE).write_text(
        json.dumps({"config": cfg.model_dump(mode="json"), "result": result.model_dump()}, indent=2)
    )
    checkpoint.finish(out)
    return result

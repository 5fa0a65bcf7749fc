"""GRPO on the pretrained student: does the exact-match reward of SmolLM2-135M-Instruct rise
over GRPO updates from a short SFT warm-up, and does the GRPO checkpoint beat the warm-up one?

What it does, in one process:

1) tasks: variants of one single-call task family ("How many miles is 42.195 km?": one
   ``convert_units`` call; only that tool offered), split into warm-up rows, GRPO training
   tasks and held-out tasks (``trajsynth.train.synth``);
2) warm-up: ``--sft-steps`` LoRA SFT steps on gold trajectories of the warm-up rows (one
   sequence per step): the student writes the call format and, greedily, mostly the right
   values, but sampling at ``--temperature`` still often writes a wrong value or a broken call;
3) baseline: the warm-up checkpoint sampled ``--samples`` times at ``--temperature`` on the
   GRPO training tasks and on the held-out tasks, and greedily on the held-out tasks;
4) GRPO (``trajsynth.train.grpo``, LoRA, β = 0, clip 0.2 / 0.28) for ``--updates`` updates,
   each on ``--tasks-per-step`` training tasks × ``--group`` rollouts of one assistant turn
   (max_steps 1: an episode is one generation), rewarded by LoopTool's binary exact multiset
   match of that turn's calls against the gold step (``trajsynth.train.eval.first_step_exact``),
   ``--ppo-epochs`` passes over each rollout batch;
5) the GRPO checkpoint evaluated as in 3).

Measured here with the defaults (seed 0; 2 CPU cores shared with other jobs: 25 minutes,
17.5 of them GRPO, 0.055 rollouts/s; a quiet machine is several times faster): the reward per
update 0.375, 0.375, 0.625, 0.25, 0.875, 0.375 (the two training tasks alternate, one per
update; first two 0.375, last two 0.625); at temperature 0.7 the warm-up checkpoint's exact
match was 0.25 on the training tasks and 0.44 on the held-out ones, the GRPO checkpoint's 1.00
and 0.75; greedy on the held-out tasks both 0.875 (GRPO sharpens the sampled policy towards
what the greedy one already does).

Run: python bench/grpo.py [--updates 6] [--group 8] [--temperature 0.7] [--sft-steps 6]
The last line is one JSON object: first_reward / last_reward (mean reward of the first and
the last ``--k`` updates), updates, rollouts_per_s, minutes, and the exact match of the
warm-up (``sft_*``) and GRPO (``grpo_*``) checkpoints on the training tasks (``train``) and the
held-out ones (``heldout``), sampled and greedy.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

FAMILY = "math-marathon-miles"


def exact_of(
    folder: str,
    rows: list,
    make_env: Any,
    temperature: float,
    samples: int,
    max_new_tokens: int,
    seed: int,
) -> float:
    """Mean first-step exact match of ``samples`` one-turn episodes per task."""
    from trajsynth.llm.base import RoleConfig
    from trajsynth.llm.local import LocalBackend
    from trajsynth.train.eval import first_step_exact
    from trajsynth.train.rollout import ChatPlayer, RolloutConfig, run_rollouts

    backend = LocalBackend(
        RoleConfig(backend="local", model=folder, local={"device": "cpu", "batch_size": 16})
    )
    cfg = RolloutConfig(
        temperature=temperature, max_new_tokens=max_new_tokens, max_steps=1, batch_size=16
    )
    eps = run_rollouts(rows, ChatPlayer.local(backend), make_env, cfg, samples=samples, seed=seed)
    return sum(first_step_exact(e.row, e.messages) for e in eps) / max(1, len(eps))


def evaluate_checkpoint(
    name: str, folder: str, train: list, heldout: list, make_env: Any, args: argparse.Namespace
) -> dict[str, float]:
    """Steps 3 and 5."""
    t0 = time.perf_counter()
    scores = {
        f"{name}_train": exact_of(
            folder,
            train,
            make_env,
            args.temperature,
            args.samples,
            args.max_new_tokens,
            args.seed + 101,
        ),
        f"{name}_heldout": exact_of(
            folder,
            heldout,
            make_env,
            args.temperature,
            args.samples,
            args.max_new_tokens,
            args.seed + 202,
        ),
        f"{name}_heldout_greedy": exact_of(
            folder, heldout, make_env, 0.0, 1, args.max_new_tokens, 0
        ),
    }
    print(
        f"{name:5s}: exact (T={args.temperature}) train {scores[f'{name}_train']:.3f}, "
        f"held-out {scores[f'{name}_heldout']:.3f}; greedy held-out "
        f"{scores[f'{name}_heldout_greedy']:.3f}  ({time.perf_counter() - t0:.0f}s)",
        flush=True,
    )
    return scores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--updates", type=int, default=6, help="GRPO updates (iterations).")
    ap.add_argument("--group", type=int, default=8, help="G: rollouts per task.")
    ap.add_argument("--tasks-per-step", type=int, default=1, help="Tasks per update.")
    ap.add_argument("--train-tasks", type=int, default=2, help="GRPO training tasks.")
    ap.add_argument("--heldout", type=int, default=8, help="Held-out tasks.")
    ap.add_argument("--samples", type=int, default=2, help="Samples per task in the evals.")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--sft-steps", type=int, default=6, help="LoRA warm-up steps.")
    ap.add_argument("--lr", type=float, default=2e-3, help="GRPO LoRA learning rate.")
    ap.add_argument("--ppo-epochs", type=int, default=1, help="Passes over each batch.")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=2, help="Updates averaged for first/last.")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from trajsynth.llm.models import pull
    from trajsynth.train.eval import first_step_exact
    from trajsynth.train.grpo import GRPOConfig, train_grpo
    from trajsynth.train.rollout import RolloutConfig
    from trajsynth.train.sft import SFTConfig, train_sft
    from trajsynth.train.synth import env_maker, gold_trajectory, task_variants

    t_start = time.perf_counter()
    base_dir = str(pull("smollm2-135m"))
    tmp = Path(tempfile.mkdtemp(prefix="trajsynth-bench-grpo-"))
    make_env = env_maker(200)
    # 1) tasks
    n_warm = 8
    rows = task_variants(
        n_warm + args.train_tasks + args.heldout, seed=5, task_ids=[FAMILY], distractors=0
    )
    warm = rows[:n_warm]
    train = rows[n_warm : n_warm + args.train_tasks]
    heldout = rows[n_warm + args.train_tasks :]
    print(f"tasks: {len(warm)} warm-up, {len(train)} GRPO, {len(heldout)} held-out", flush=True)
    # 2) the warm-up
    sft_dir = tmp / "sft"
    sft = train_sft(
        [gold_trajectory(t, make_env) for t in warm],
        sft_dir,
        SFTConfig(
            model=base_dir,
            lora_r=16,
            lora_layers=8,
            max_steps=args.sft_steps,
            batch_size=1,
            max_len=512,
            lr=2e-3,
            warmup_ratio=0.0,
            reasoning=False,
            resume=False,
            seed=args.seed,
        ),
    )
    print(f"warm-up: {sft.steps} SFT steps in {sft.seconds:.0f}s", flush=True)
    # 3) the baseline
    scores = evaluate_checkpoint("sft", str(sft_dir), train, heldout, make_env, args)
    # 4) GRPO
    cfg = GRPOConfig(
        model=str(sft_dir),
        iterations=args.updates,
        tasks_per_step=args.tasks_per_step,
        group_size=args.group,
        lr=args.lr,
        lora_r=16,
        lora_layers=8,
        ppo_epochs=args.ppo_epochs,
        micro_batch=16,
        seed=args.seed,
        resume=False,
        max_observation_chars=200,
        rollout=RolloutConfig(
            temperature=args.temperature,
            max_new_tokens=args.max_new_tokens,
            max_steps=1,
            batch_size=16,
        ),
    )
    grpo = train_grpo(train, tmp / "grpo", cfg, make_env=make_env, reward_fn=first_step_exact)
    print(
        f"\n{'update':>6} {'reward':>7} {'trained':>7} {'fmt_err':>7} {'rollout_s':>9} "
        f"{'update_s':>8}"
    )
    for i, h in enumerate(grpo.history, 1):
        print(
            f"{i:>6} {h['reward']:>7.3f} {int(h['episodes_trained']):>7} "
            f"{h['format_errors']:>7.2f} {h['rollout_s']:>9.1f} {h['update_s']:>8.1f}"
        )
    rewards = [h["reward"] for h in grpo.history]
    k = max(1, min(args.k, len(rewards) // 2))
    rollouts = len(rewards) * args.tasks_per_step * args.group
    rollout_s = sum(h["rollout_s"] for h in grpo.history)
    # 5) the GRPO checkpoint
    print()
    scores |= evaluate_checkpoint("grpo", str(tmp / "grpo"), train, heldout, make_env, args)
    summary = {
        "first_reward": round(sum(rewards[:k]) / k, 4),
        "last_reward": round(sum(rewards[-k:]) / k, 4),
        "k": k,
        "rewards": [round(r, 4) for r in rewards],
        "updates": len(rewards),
        "group_size": args.group,
        "tasks_per_step": args.tasks_per_step,
        "temperature": args.temperature,
        "rollouts": rollouts,
        "rollouts_per_s": round(rollouts / max(rollout_s, 1e-9), 3),
        "grpo_minutes": round(grpo.seconds / 60, 2),
        **{key: round(v, 4) for key, v in scores.items()},
        "load": round(os.getloadavg()[0], 2),
        "minutes": round((time.perf_counter() - t_start) / 60, 2),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

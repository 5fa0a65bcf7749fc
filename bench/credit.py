"""Credit assignment where it matters: every estimator of ``trajsynth train-grpo --advantage``
with the same rollout budget on a long-horizon family, over seeds.

The family (``trajsynth.train.synth.workflow_tasks``): four math workflows of five dependent
calls each ("convert 491 km to mi, round it, store it, recall it, double it"; "solve the
quadratic, average its roots, round, store, list"; ...), every math tool offered, then the
final answer: six turns. The request decides which tool comes at each step, and each call
reads the previous one's output, so one early wrong call dooms the episode: the reward, over
every step (``--reward``: ``tool_match`` by default — the right tools at every step, which the
tiny student can learn; ``exact_match`` for a pretrained student), is 0 whatever comes after.

What it does, in one process per run (so wall time and peak memory are each run's own):

1) tasks: warm-up rows, RL training tasks and held-out tasks of the family;
2) warm-up: ``--sft-steps`` SFT steps of the student on gold trajectories of the warm-up rows
   (the tiny student from scratch; ``--model smollm2`` LoRA on SmolLM2-135M-Instruct), so
   sampling at T = 1 solves some episodes but not most;
3) a PRM for ``prm`` (``trajsynth.train.agent_prm.train_prm``): the warm-up checkpoint's own
   rollouts on the warm-up tasks, labelled by the verifier's step outcomes at the reward's
   level (tools for ``tool_match``), the checkpoint as the encoder; its held-out step AUC is
   reported;
4) the start: the warm-up checkpoint evaluated on the held-out tasks (``--eval-samples``
   episodes per task at T = 1, seeded by the run's seed): the mean reward;
5) each estimator × seed: ``train_grpo`` from the warm-up checkpoint with the same budget
   (``--iterations`` × ``--tasks-per-step`` × ``--group`` rollouts), then the final
   checkpoint evaluated as in 4); its wall time (training and evaluation) and peak resident
   memory (the process's VmHWM);
6) per estimator: the reward after the budget as the mean over seeds with a 95% interval
   (Student's t, n − 1 degrees of freedom), the start's the same way, ``learned`` when the
   interval's low end is above the start's mean, and the difference to GRPO.

Run:  python bench/credit.py [--seeds 3] [--iterations 8] [--tasks-per-step 4] [--group 8]
      python bench/credit.py --model smollm2 --reward exact_match --seeds 1 --iterations 2 ...
The last line is one JSON object: the settings, the start, and per estimator
{reward_mean, reward_ci95: [lo, hi], rewards, train_reward_last, learned, minus_grpo,
wall_s, peak_mb}; plus the PRM's held-out AUC.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one math thread: the machine is shared

ESTIMATORS = ("grpo", "gigpo", "turn_ppo", "archer", "prm", "implicit_prm")
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}


def _tasks(args: argparse.Namespace) -> tuple[list, list, list]:
    """Step 1: (warm-up rows, training tasks, held-out tasks)."""
    from trajsynth.train.synth import workflow_tasks

    rows = workflow_tasks(args.warmup_tasks + args.train_tasks + args.heldout)
    a, b = args.warmup_tasks, args.warmup_tasks + args.train_tasks
    return rows[:a], rows[a:b], rows[b:]


def _rollout_cfg(args: argparse.Namespace, temperature: float = 1.0) -> Any:
    from trajsynth.train.rollout import RolloutConfig

    return RolloutConfig(
        temperature=temperature,
        max_new_tokens=args.max_new_tokens,
        max_steps=8,
        max_len=args.max_len + 512,
        batch_size=64,
    )


def _player(folder: str) -> Any:
    from trajsynth.llm.base import RoleConfig
    from trajsynth.llm.client import LLMClient
    from trajsynth.llm.local import LocalBackend
    from trajsynth.train.rollout import ChatPlayer

    backend = LocalBackend(
        RoleConfig(backend="local", model=folder, local={"device": "cpu", "batch_size": 64})
    )
    return ChatPlayer(LLMClient("student", backend.config, backend, None))


def evaluate(folder: str, rows: list, args: argparse.Namespace, seed: int) -> float:
    """Steps 4-5: the mean reward of ``--eval-samples`` sampled episodes per held-out task."""
    from trajsynth.train.eval import score_episode
    from trajsynth.train.rollout import run_rollouts
    from trajsynth.train.synth import env_maker

    make_env = env_maker(300)
    eps = run_rollouts(
        rows,
        _player(folder),
        make_env,
        _rollout_cfg(args),
        samples=args.eval_samples,
        seed=10_000 + seed,
    )
    return sum(score_episode(e.row, e.messages)[args.reward] for e in eps) / len(eps)


def warm_up(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Steps 2-3: the warm-up checkpoint and the PRM."""
    from trajsynth.train.agent_prm import PRMConfig, train_prm
    from trajsynth.train.rollout import run_rollouts
    from trajsynth.train.sft import SFTConfig, train_sft
    from trajsynth.train.synth import env_maker, gold_trajectory

    make_env = env_maker(300)
    warm, _, _ = _tasks(args)
    gold = [gold_trajectory(t, make_env) for t in warm]
    t0 = time.perf_counter()
    if args.model == "tiny":
        sft = SFTConfig(
            max_steps=args.sft_steps, batch_size=4, max_len=args.max_len, lr=5e-3, seed=0
        )
    else:
        sft = SFTConfig(
            model=args.model,
            max_steps=args.sft_steps,
            batch_size=2,
            max_len=args.max_len,
            lora_r=16,
            seed=0,
        )
    result = train_sft(gold, work / "warm", sft)
    sft_s = time.perf_counter() - t0
    print(f"warm-up: {result.steps} SFT steps, loss {result.final_loss:.3f} ({sft_s:.0f}s)")
    # 3) the PRM: the warm-up checkpoint's rollouts, labelled by the verifier
    t0 = time.perf_counter()
    eps = run_rollouts(
        warm[: args.prm_tasks], _player(str(work / "warm")), make_env, _rollout_cfg(args),
        samples=4, seed=7,
    )  # fmt: skip
    rows = [e.to_trajectory() for e in eps if e.steps]
    level = "tool" if args.reward == "tool_match" else "call"
    prm_cfg = PRMConfig(model=str(work / "warm"), labels="verifier", match=level, epochs=100)
    prm = train_prm(rows, work / "prm", prm_cfg)
    print(
        f"PRM: {prm.train_steps} training steps, {prm.holdout_steps} held out, held-out AUC "
        f"{prm.holdout_auc} ({time.perf_counter() - t0:.0f}s)"
    )
    return {
        "sft_steps": result.steps,
        "sft_loss": result.final_loss,
        "sft_s": sft_s,
        "prm_holdout_auc": prm.holdout_auc,
        "prm_steps": prm.train_steps + prm.holdout_steps,
    }


def one_run(spec: dict[str, Any]) -> dict[str, Any]:
    """Step 5 (or 4, for ``estimator: start``) in this process."""
    from trajsynth.train.grpo import GRPOConfig, train_grpo
    from trajsynth.train.synth import env_maker

    args = argparse.Namespace(**spec["args"])
    work, seed, name = Path(spec["work"]), spec["seed"], spec["estimator"]
    _, train, heldout = _tasks(args)
    t0 = time.perf_counter()
    folder, train_last = str(work / "warm"), None
    if name != "start":
        settings: dict[str, Any] = {
            "model": str(work / "warm"),
            "advantage": name,
            "iterations": args.iterations,
            "tasks_per_step": args.tasks_per_step,
            "group_size": args.group,
            "lr": args.lr,
            "seed": seed,
            "device": "cpu",
            "micro_batch": 8,
            "rollout": _rollout_cfg(args).model_dump(),
            "reward": {"kind": args.reward},
            "max_observation_chars": 300,
            "prm": {"path": str(work / "prm"), "weight": 1.0},
            "implicit_prm": {"lr": args.prm_lr},
            "resume": False,
        }
        if args.filter_variance:
            settings["filter_variance"] = args.filter_variance
        if args.model != "tiny":
            settings["lora_r"] = 16
        out = work / f"{name}-{seed}"
        result = train_grpo(
            train, out, GRPOConfig.model_validate(settings), make_env=env_maker(300)
        )
        folder = str(out)
        k = max(1, len(result.history) // 4)
        train_last = sum(h["reward"] for h in result.history[-k:]) / k
    reward = evaluate(folder, heldout, args, seed)
    return {"estimator": name, "seed": seed, "reward": reward, "train_reward_last": train_last,
            "wall_s": time.perf_counter() - t0, "peak_mb": _peak_mb()}  # fmt: skip


def _peak_mb() -> float:
    """This process's peak resident memory: VmHWM (ru_maxrss would carry the parent's peak
    over the exec on Linux)."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _same_run(kept: dict[str, Any] | None, base: dict[str, Any]) -> bool:
    """A kept result is this run's when every setting but how many seeds and which estimators
    the whole bench runs is the same."""

    def run_settings(a: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in a.items() if k not in ("seeds", "estimators")}

    return kept is not None and run_settings(kept) == run_settings(base)


def _ci(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% interval (Student's t over the seeds)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, mean, mean
    half = T_975.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="tiny, or smollm2 (SmolLM2-135M, LoRA).")
    ap.add_argument("--estimators", default=",".join(ESTIMATORS))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--reward", default="tool_match", help="tool_match or exact_match.")
    ap.add_argument("--warmup-tasks", type=int, default=300)
    ap.add_argument("--train-tasks", type=int, default=64)
    ap.add_argument("--heldout", type=int, default=32)
    ap.add_argument("--sft-steps", type=int, default=400)
    ap.add_argument("--prm-tasks", type=int, default=48, help="Warm-up tasks the PRM sees.")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--tasks-per-step", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--prm-lr", type=float, default=1e-4, help="iStar's π_φ learning rate.")
    ap.add_argument("--filter-variance", type=float, default=None)
    ap.add_argument("--eval-samples", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--max-len", type=int, default=1024, help="SFT tokens per packed row.")
    ap.add_argument(
        "--work",
        default=None,
        help="Keep checkpoints and each run's result here (default: a temp dir); a run "
        "already there with the same settings is not run again, so seeds can be added later.",
    )
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one_run(json.loads(args.one))), flush=True)
        return
    if args.model == "smollm2":
        args.model = "smollm2-135m"
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        saved = work / "prep.json"
        if saved.is_file() and (work / "prm" / "prm.json").is_file():
            prep = json.loads(saved.read_text())  # a kept --work folder: its warm-up
            print(f"warm-up and PRM reused from {work}")
        else:
            prep = warm_up(work, args)
            saved.write_text(json.dumps(prep))
        names = ["start", *args.estimators.split(",")]
        runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
        base = {k: v for k, v in vars(args).items() if k not in ("one", "work")}
        for name in names:
            for seed in range(args.seeds):
                spec = {"args": base, "work": str(work), "seed": seed, "estimator": name}
                kept = work / f"result-{name}-{seed}.json"
                if kept.is_file() and _same_run(json.loads(kept.read_text()).get("args"), base):
                    run = json.loads(kept.read_text())["run"]  # this run, same settings
                    runs[name].append(run)
                    print(f"{name:13s} seed {seed}: reward {run['reward']:.3f}  (kept)", flush=True)
                    continue
                proc = subprocess.run(
                    [sys.executable, __file__, "--one", json.dumps(spec)],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if proc.returncode != 0:
                    print(proc.stderr[-3000:], file=sys.stderr)
                    raise SystemExit(f"{name} seed {seed} failed")
                run = json.loads(proc.stdout.strip().splitlines()[-1])
                kept.write_text(json.dumps({"args": base, "run": run}))
                runs[name].append(run)
                print(
                    f"{name:13s} seed {seed}: reward {run['reward']:.3f}  train(last quarter) "
                    f"{run['train_reward_last'] if run['train_reward_last'] is not None else '-'}"
                    f"  {run['wall_s']:.0f}s  {run['peak_mb']:.0f} MB",
                    flush=True,
                )
    start_mean, start_lo, start_hi = _ci([r["reward"] for r in runs["start"]])
    table: dict[str, Any] = {}
    grpo_mean = None
    for name in names[1:]:
        rewards = [r["reward"] for r in runs[name]]
        mean, lo, hi = _ci(rewards)
        if name == "grpo":
            grpo_mean = mean
        table[name] = {
            "reward_mean": round(mean, 4),
            "reward_ci95": [round(lo, 4), round(hi, 4)],
            "rewards": [round(x, 4) for x in rewards],
            "train_reward_last": round(
                sum(r["train_reward_last"] for r in runs[name]) / len(rewards), 4
            ),
            "learned": lo > start_mean,
            "wall_s": round(sum(r["wall_s"] for r in runs[name]) / len(rewards), 1),
            "peak_mb": round(max(r["peak_mb"] for r in runs[name]), 1),
        }
    for row in table.values():
        row["minus_grpo"] = (
            round(row["reward_mean"] - grpo_mean, 4) if grpo_mean is not None else None
        )
    print(f"\nstart (warm-up checkpoint): {start_mean:.3f} [{start_lo:.3f}, {start_hi:.3f}]")
    print(f"{'estimator':13s} {'reward':>7s} {'95% interval':>17s} {'learned':>8s} "
          f"{'−grpo':>7s} {'wall s':>7s} {'peak MB':>8s}")  # fmt: skip
    for name, row in table.items():
        lo, hi = row["reward_ci95"]
        diff = "-" if row["minus_grpo"] is None else f"{row['minus_grpo']:+.3f}"
        print(
            f"{name:13s} {row['reward_mean']:7.3f} [{lo:6.3f}, {hi:6.3f}] "
            f"{row['learned']!s:>8s} {diff:>7s} {row['wall_s']:7.0f} {row['peak_mb']:8.0f}"
        )
    out = {
        "model": args.model,
        "family": "workflow (5 dependent calls + answer)",
        "reward": args.reward,
        "seeds": args.seeds,
        "rollouts_per_run": args.iterations * args.tasks_per_step * args.group,
        "iterations": args.iterations,
        "heldout_tasks": args.heldout,
        "eval_samples": args.eval_samples,
        **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in prep.items()},
        "start": {
            "reward_mean": round(start_mean, 4),
            "reward_ci95": [round(start_lo, 4), round(start_hi, 4)],
        },
        "estimators": table,
        "minutes": round((time.perf_counter() - t_all) / 60, 1),
    }  # fmt: skip
    print(json.dumps(out))


if __name__ == "__main__":
    main()

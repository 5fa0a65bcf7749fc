#!/usr/bin/env bash
# GPU readiness: SFT then a short GRPO run of a larger student in bf16, with tokens/s and MFU.
#
# What it does, in under 8 minutes on one H100/H200-class GPU:
#   1) makes the training data the default offline pipeline would (gold trajectories of varied
#      built-in example tasks, every domain, full toolsets) and held-out task rows;
#   2) builds a ~100M-parameter Llama-style student (tokenizer trained on the data) and runs
#      `train_sft` on it: bf16 autocast, packed rows of 2048 tokens;
#   3) runs a short GRPO (binary exact-match reward, G = 8) from that checkpoint against the
#      live environments;
#   4) prints a table and, last, one JSON line: SFT tokens/s and MFU (6·N + 12·L·d·T FLOPs per
#      token against the GPU's dense bf16 peak), GRPO generated tokens/s, update tokens/s and
#      reward before/after, and the held-out call match after SFT and after GRPO.
#
# Run:   bash bench/gpu.sh                # on a GPU machine (installed with `make install`)
#        bash bench/gpu.sh --dry-run      # seconds on a CPU: tiny sizes, checks it all starts
# Peak FLOPs are looked up from the GPU's name; pass --peak-tflops N for other GPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
[ -x .venv/bin/python ] && [ "$PYTHON" = python ] && PYTHON=.venv/bin/python
export TOKENIZERS_PARALLELISM=false PYTHONPATH="${PYTHONPATH:-$PWD}"
exec "$PYTHON" - "$@" <<'PY'
import argparse, json, logging, shutil, sys, tempfile, time, warnings
from pathlib import Path

warnings.filterwarnings("ignore")
logging.getLogger("transformers").setLevel(logging.ERROR)
ap = argparse.ArgumentParser(prog="bench/gpu.sh")
ap.add_argument("--dry-run", action="store_true", help="tiny sizes on any device (a start-up check)")
ap.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak of the GPU")
ap.add_argument("--out", default=None, help="keep the checkpoints here")
args = ap.parse_args()

import torch

from trajsynth.train.eval import evaluate
from trajsynth.train.grpo import GRPOConfig, train_grpo
from trajsynth.train.modeling import load_student, resolve_device
from trajsynth.llm.local import LocalBackend
from trajsynth.train.rollout import ChatPlayer, RolloutConfig
from trajsynth.train.sft import SFTConfig, train_sft
from trajsynth.train.synth import env_maker, gold_trajectory, task_variants
from trajsynth.train.tiny import TinyConfig

dry = args.dry_run
device = resolve_device("auto")
if not dry and not device.startswith("cuda"):
    sys.exit("bench/gpu.sh needs a CUDA GPU (use --dry-run to check it on a CPU)")
PEAKS = {"H200": 989, "H100": 989, "H800": 989, "A100": 312, "A800": 312, "L40S": 362,
         "L40": 181, "A10": 125, "L4": 121, "4090": 165, "3090": 71, "A6000": 155}
name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
peak = args.peak_tflops or next((v for k, v in PEAKS.items() if k in name), None)
tmp = Path(args.out or tempfile.mkdtemp(prefix="trajsynth-gpu-"))
t_all = time.perf_counter()

# 1) data
n_tasks, n_eval = (60, 8) if dry else (2400, 200)
obs = 400 if dry else 2000
tasks = task_variants(n_tasks + n_eval, seed=0, distractors=2 if dry else None)
train_tasks, eval_tasks = tasks[:n_tasks], tasks[n_tasks:]
make_env = env_maker(obs)
gold = [gold_trajectory(t, make_env) for t in train_tasks]

# 2) SFT
if dry:
    tiny = TinyConfig(vocab_size=512, hidden_size=64, num_layers=2, intermediate_size=128)
    sft_cfg = SFTConfig(tiny=tiny, max_steps=2, batch_size=2, max_len=512, precision="fp32")
else:
    tiny = TinyConfig(vocab_size=8192, hidden_size=768, num_layers=12, num_heads=12,
                      num_kv_heads=4, intermediate_size=2048, max_position_embeddings=4096,
                      tool_format="json")
    sft_cfg = SFTConfig(tiny=tiny, epochs=3, batch_size=16, max_len=2048, lr=1e-3,
                        precision="bf16", save_every=0)
sft = train_sft(gold, tmp / "sft", sft_cfg)
n_params = sft.parameters
flops_per_token = 6 * n_params + 12 * tiny.num_layers * tiny.hidden_size * sft_cfg.max_len
sft_mfu = (sft.tokens_per_s * flops_per_token / (peak * 1e12)) if peak else None

def held_out(folder):
    model, tok = load_student(folder, device)
    backend = LocalBackend.from_model(model, tok, device=device, batch_size=256,
                                      autocast="bf16" if sft.precision == "bf16" else "none")
    cfg = RolloutConfig(temperature=0.0, max_new_tokens=256, batch_size=256, max_len=4096)
    return evaluate(eval_tasks, ChatPlayer.local(backend), make_env, cfg, logprobs=False).overall

sft_eval = held_out(tmp / "sft")

# 3) GRPO
grpo_cfg = GRPOConfig(
    model=str(tmp / "sft"),
    iterations=1 if dry else 12,
    tasks_per_step=2 if dry else 32,
    group_size=2 if dry else 8,
    lr=1e-4 if dry else 2e-6,
    micro_batch=4 if dry else 64,
    max_observation_chars=obs,
    precision="fp32" if dry else "bf16",
    rollout=RolloutConfig(temperature=1.0, max_new_tokens=64 if dry else 256,
                          batch_size=256, max_len=4096),
)
t0 = time.perf_counter()
grpo = train_grpo(train_tasks, tmp / "grpo", grpo_cfg, make_env=make_env)
grpo_s = time.perf_counter() - t0
h = grpo.history
gen_tokens = sum(x["generated_tokens"] for x in h)
rollout_s = sum(x["rollout_s"] for x in h)
grpo_eval = held_out(tmp / "grpo")

# 4) report
total = time.perf_counter() - t_all
print(f"device {name}  params {n_params:,}  peak {peak} TFLOPS")
print(f"SFT   {sft.tokens:,} tokens in {sft.seconds:.1f}s = {sft.tokens_per_s:,.0f} tokens/s, "
      f"MFU {sft_mfu if sft_mfu is None else f'{sft_mfu:.1%}'}, loss {sft.first_loss:.3f} → "
      f"{sft.final_loss:.3f}, held-out call match {sft_eval['call_match']:.1%}")
print(f"GRPO  {len(h)} updates in {grpo_s:.1f}s, {gen_tokens:,.0f} generated tokens "
      f"({gen_tokens / max(rollout_s, 1e-9):,.0f}/s in rollouts), reward {h[0]['reward']:.3f} → "
      f"{h[-1]['reward']:.3f}, held-out call match {grpo_eval['call_match']:.1%}")
print(f"total {total:.0f}s")
if not args.out:
    shutil.rmtree(tmp, ignore_errors=True)
print(json.dumps({
    "bench": "gpu", "dry_run": dry, "device": name, "params": n_params,
    "sft_tokens_per_s": round(sft.tokens_per_s, 1),
    "sft_mfu": None if sft_mfu is None else round(sft_mfu, 4),
    "sft_final_loss": round(sft.final_loss, 4),
    "grpo_updates": len(h), "grpo_generated_tokens_per_s": round(gen_tokens / max(rollout_s, 1e-9), 1),
    "grpo_reward_first": round(h[0]["reward"], 4), "grpo_reward_last": round(h[-1]["reward"], 4),
    "held_out_call_match_sft": sft_eval["call_match"], "held_out_call_match_grpo": grpo_eval["call_match"],
    "seconds": round(total, 1),
}))
PY
